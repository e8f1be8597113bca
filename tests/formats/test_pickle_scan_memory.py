"""The scan's memory is proportional to what it read, whatever the pickle builds.

CPython's C unpickler, which resolves STACK_GLOBAL names of a pickle held in memory, builds every object
the pickle describes: 10 MB of EMPTY_DICT opcodes are ten million dicts (about 700 MB). Measured in a
fresh process (peak RSS), so nothing else the suite holds counts.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.core

_LIMIT_MB = 160  # the design's budget is 256 MB on files of 10 MB or less; the data itself is 10 MB of it

_CHILD = r"""
import json, resource, sys
from ckinspect.formats import open_checkpoint
from ckinspect.formats.pickle_scan import scan_pickle

data = b"\x80\x04" + b"}" * 10_000_000 + b"\x8c\x02os\x8c\x06system\x93."
path = sys.argv[1]
with open(path, "wb") as f:
    f.write(data)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
scan = scan_pickle(data)
ckpt = open_checkpoint(path)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"grown_mb": grown / 1024, "globals": [[g.module, g.name, g.kind] for g in scan.globals],
                  "error": scan.error, "end": scan.end, "size": len(data),
                  "findings": [[f.code, f.message] for f in ckpt.findings]}))
"""


def test_ten_million_empty_dicts_and_a_stack_global_are_judged_in_bounded_memory(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "dicts.pkl")], capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["grown_mb"] < _LIMIT_MB, out["grown_mb"]
    # CPython's unpickler would ask for os.system under ten million dicts; the scan stops following the stack
    # past MAX_STACK items (4M) and says what it cannot name: an unresolved global, unsafe, never a clean pass
    assert out["globals"] == [["<unresolved>", "STACK_GLOBAL", "unsafe"]]
    assert out["error"] is None and out["end"] == out["size"]
    assert [code for code, _ in out["findings"]] == ["UNSAFE_PICKLE"]
    assert "<unresolved>.STACK_GLOBAL" in out["findings"][0][1]
