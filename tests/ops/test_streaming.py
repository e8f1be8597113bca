"""convert and salvage stream: the files they write are byte for byte what torch.save / the in-memory
route writes from the same tensors, and a child process converting or salvaging a file several times
larger than the memory bound stays under it (peak RSS measured by the kernel, from wait4)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ckinspect.formats import open_checkpoint
from ckinspect.ops.convert import _StorageReader
from ckinspect.ops.rawtensors import CHUNK, RawTensor
from ckinspect.ops.torchio import rebuild_tree, save_torch
from tests.helpers.torch_files import cut

REPO = Path(__file__).resolve().parents[2]
MIB = 1 << 20


def awkward_state() -> dict:
    """Views, tied storages, a transposed weight, an expanded one, empties, a tensor several chunks long."""
    g = torch.Generator().manual_seed(14)
    base = torch.randn(64, 100, generator=g)
    big = torch.randn(3 * CHUNK // 4 + 17, generator=g)  # 3 chunks of 8 MiB and 68 bytes
    return {
        "model": {
            "w": base,
            "w_t": base.t(),
            "slice": base[3:9, 10:40],
            "expanded": torch.ones(1, 5).expand(4, 5),
            "emb": torch.randn(300, 16, generator=g).to(torch.bfloat16),
            "big": big,
            "empty": torch.empty(0, 3),
            "ids": torch.arange(10),
        },
        "optimizer": {"state": {0: {"exp_avg": torch.randn(64, 100, generator=g), "step": torch.tensor(5.0)}}},
        "step": 7,
    }


def in_memory_copy(built_tree, fills) -> None:
    """What convert and salvage did before they streamed: every placeholder storage holds its bytes."""

    def fill(t: torch.Tensor) -> None:
        source = fills.get(t.untyped_storage()._cdata)
        data = b"".join(bytes(c) for c in source.chunks()) if source is not None else b""
        if data:
            t.untyped_storage().copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8).untyped_storage())

    def walk(o):
        if isinstance(o, torch.Tensor):
            fill(o)
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v)

    walk(built_tree)


@pytest.mark.parametrize("cast", [None, torch.bfloat16, torch.float16])
def test_a_streamed_torch_file_is_byte_for_byte_what_torch_save_writes_from_memory(tmp_path, cast):
    src = tmp_path / "src.pth"
    torch.save(awkward_state(), src)
    ckpt = open_checkpoint(src)

    def to(name, t):
        if cast is None or not t.is_floating_point() or t.dim() == 0 or t.dtype == cast:
            return t
        return t.to(cast)

    with _StorageReader(ckpt) as reader:
        built = rebuild_tree(ckpt.tree, reader.read, cast=to if cast else None)
        assert built.fills and not built.missing
        streamed = tmp_path / "streamed.pth"
        save_torch(streamed, built.tree, built.fills)
        in_memory_copy(built.tree, built.fills)
        expected = tmp_path / "expected.pth"
        save_torch(expected, built.tree)  # plain torch.save of the same tensors, bytes in memory
    assert streamed.read_bytes() == expected.read_bytes()
    loaded = torch.load(streamed, weights_only=True)
    original = awkward_state()
    want = original["model"]["w_t"] if cast is None else original["model"]["w_t"].to(cast)
    assert torch.equal(loaded["model"]["w_t"], want) and loaded["model"]["w_t"].stride() == want.stride()
    big = original["model"]["big"] if cast is None else original["model"]["big"].to(cast)
    assert torch.equal(loaded["model"]["big"], big)


def test_a_raw_tensor_streams_in_chunks_no_larger_than_the_bound(tmp_path):
    src = tmp_path / "src.pth"
    state = awkward_state()
    torch.save(state, src)
    ckpt = open_checkpoint(src)
    big = ckpt.tensor("model.big")
    with _StorageReader(ckpt) as reader:
        source = reader.read(big)
        pieces = [len(c) for c in RawTensor(big, source).chunks()]
        assert max(pieces) <= CHUNK and sum(pieces) == big.nbytes and len(pieces) == 4
        cast = [bytes(c) for c in RawTensor(big, source, "bfloat16").chunks()]
    assert b"".join(cast) == state["model"]["big"].to(torch.bfloat16).view(torch.uint8).numpy().tobytes()


# ---------------------------------------------------------------- peak memory of a real child process

CHILD = r"""
import os, sys
sys.argv = ["ckinspect", *sys.argv[1:]]
from ckinspect.cli import main
status = main(sys.argv[1:])
print("torch imported" if "torch" in sys.modules else "no torch")
sys.exit(status)
"""


@pytest.mark.slow
def test_convert_and_salvage_of_a_file_larger_than_the_bound_stay_under_it(tmp_path):
    """A 384 MiB checkpoint: what was held in memory before (the storages' bytes, 1-2x the file) is now
    8 MiB chunks. Bounds: 128 MB without torch (safetensors out), 300 MB with it (a torch file out: torch's
    own import is ~220 MB of that)."""
    g = torch.Generator().manual_seed(1)
    state = {f"layer{i}.weight": torch.randn(8 * MIB, generator=g) for i in range(12)}  # 12 x 32 MiB
    state["layer3.view"] = state["layer3.weight"][100:1000]
    src = tmp_path / "big.pth"
    torch.save(state, src)
    assert src.stat().st_size > 380 * MIB
    broken = cut(src, 0.9, tmp_path / "broken.pth")
    results = {}
    for args, status in (
        (["convert", src, tmp_path / "c.safetensors"], 0),
        (["convert", src, tmp_path / "c.pth"], 0),
        (["salvage", broken, tmp_path / "s.pth"], 1),  # 1: the cut-off tensors are missing
    ):
        results[args[-1].name] = _run_alone(args, status)
    assert results["c.safetensors"][1] == "no torch" and results["c.safetensors"][0] < 128 * MIB
    assert results["c.pth"][0] < 300 * MIB and results["s.pth"][0] < 300 * MIB
    # and the bytes are what they were when everything was held in memory
    loaded = torch.load(tmp_path / "c.pth", weights_only=True)
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert loaded["layer3.view"].untyped_storage().data_ptr() == loaded["layer3.weight"].untyped_storage().data_ptr()
    ckpt = open_checkpoint(tmp_path / "c.pth")
    with _StorageReader(ckpt) as reader:
        built = rebuild_tree(ckpt.tree, reader.read)
        in_memory_copy(built.tree, built.fills)
        save_torch(tmp_path / "expected.pth", built.tree)
    assert (tmp_path / "c.pth").read_bytes() == (tmp_path / "expected.pth").read_bytes()
    from safetensors.torch import load_file

    flat = load_file(tmp_path / "c.safetensors")
    assert all(torch.equal(flat[k], v) for k, v in state.items())
    salvaged = torch.load(tmp_path / "s.pth", weights_only=True)
    salvaged.pop("ckinspect_salvage", None)  # what the cut lost, recorded in the file (tests/ops/test_salvage.py)
    assert salvaged and all(torch.equal(salvaged[k], state[k]) for k in salvaged)


def _run_alone(args: list, status: int) -> tuple[int, str]:
    """Peak RSS of one child: a fresh grandchild per measurement, so RUSAGE_CHILDREN holds it alone."""
    code = (
        "import os, resource, subprocess, sys; "
        "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
        "sys.stderr.write(p.stderr); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, p.stdout.strip().splitlines()[-1]); "
        "sys.exit(p.returncode)"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = subprocess.run(
        [sys.executable, "-c", code, sys.executable, "-c", CHILD, *map(str, args)],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=900,
    )  # fmt: skip
    assert out.returncode == status, out.stderr
    rss, what = out.stdout.strip().splitlines()[-1].split(" ", 1)
    return int(rss), what
