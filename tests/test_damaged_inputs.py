"""Whatever damage a file has, every command ends in a finding, a one-line error or a result: never
in 'internal error'. Byte flips and truncations of real checkpoints in three formats, each run
through the commands a user would point at it; the input file's bytes stay as they were."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import REPO, run_cli

RESUME = REPO / "samples" / "straight-60" / "tiny_resume.pth"


@pytest.fixture(scope="module")
def originals(tmp_path_factory) -> dict[str, Path]:
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("originals")
    state = {"model": {"w": torch.randn(8, 4), "b": torch.randn(4)}, "step": 3, "rng": torch.get_rng_state()}
    torch.save(state, folder / "legacy.pt", _use_new_zipfile_serialization=False)
    save_file({"w": torch.randn(8, 4), "h": torch.randn(3).half()}, folder / "weights.safetensors")
    return {"zip": RESUME, "legacy": folder / "legacy.pt", "safetensors": folder / "weights.safetensors"}


damage = st.one_of(
    st.tuples(st.just("cut"), st.floats(0.0, 0.999)),
    st.tuples(st.just("flip"), st.lists(st.tuples(st.floats(0.0, 0.999), st.integers(1, 255)), min_size=1, max_size=6)),
)


@pytest.mark.slow  # 40 damaged files through every command
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["zip", "legacy", "safetensors"]), how=damage)
def test_no_command_ends_in_an_internal_error(originals, tmp_path, kind, how):
    original = originals[kind]
    data = bytearray(original.read_bytes())
    if how[0] == "cut":
        data = data[: int(len(data) * how[1])]
    else:
        for where, xor in how[1]:
            data[int(len(data) * where)] ^= xor
    damaged = tmp_path / f"damaged{original.suffix}"
    damaged.write_bytes(bytes(data))
    commands = [
        ("--report", damaged),
        ("diff", original, damaged, "--report"),
        ("drift", damaged, "--report", "--format", "json"),
        ("salvage", damaged, tmp_path / "salvaged.safetensors"),
        ("convert", damaged, tmp_path / "converted.safetensors"),
    ]
    for command in commands:
        result = run_cli(*command)
        assert result.returncode in (0, 1, 2) and "internal error" not in result.stderr, (command[0], result.stderr)
    assert damaged.read_bytes() == bytes(data)
