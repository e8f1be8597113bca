"""`--jobs 2` needs no torch: the pool's workers scan safetensors shards in a process where torch cannot be
imported, and the report is the one-process report (CI runs this again in the torch-free virtualenv)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ckinspect.io.safetensors_write import Entry, write_safetensors
from tests.commands.test_without_torch import ckinspect

pytestmark = pytest.mark.torchfree


def _shards(folder):
    weight_map = {}
    for s in range(4):
        name = f"model-{s + 1:05d}-of-00004.safetensors"
        entries = []
        for i in range(2):
            values = np.linspace(-1, 1, 256, dtype=np.float32)
            if (s, i) in ((0, 1), (2, 0)):
                values[7] = np.nan
            entries.append(Entry(f"layers.{2 * s + i}.weight", "float32", (16, 16), lambda v=values: [v.tobytes()]))
            weight_map[entries[-1].name] = name
        write_safetensors(folder / name, entries)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder / "model.safetensors.index.json"


def test_two_worker_processes_without_torch(tmp_path):
    index = _shards(tmp_path)
    one = ckinspect("--report", str(index), "--format", "json", "--jobs", "1", cwd=tmp_path)
    two = ckinspect("--report", str(index), "--format", "json", "--jobs", "2", cwd=tmp_path)
    assert (two.returncode, two.stdout, two.stderr) == (one.returncode, one.stdout, "")
    assert one.returncode == 1
    [finding] = json.loads(two.stdout)["files"][0]["findings"]
    assert finding["code"] == "NONFINITE"
    assert finding["message"] == (
        "2 tensors named layers.*.weight: layers.1.weight: 1 NaN and 0 Inf among 256 values; "
        "layers.4.weight: 1 NaN and 0 Inf among 256 values"
    )
