"""Block-by-block logits: a weight rounded a chunk at a time is the weight rounded whole."""

from __future__ import annotations

import os
import platform

import pytest
import torch

from ckinspect.analysis import blockwise
from ckinspect.analysis.blockwise import round_weight


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2"])
def test_rounding_in_chunks_equals_rounding_the_whole_tensor(fmt, monkeypatch):
    monkeypatch.setattr(blockwise, "_ROUND_ELEMENTS", 1000)  # many chunks, the last one short
    ref = torch.randn(37, 101, generator=torch.Generator().manual_seed(0)) * 3
    ref[0, :3] = torch.tensor([7e4, 1e-9, -2e5])  # beyond fp16, below it, and the largest magnitude
    dtype = blockwise.torch_dtype(fmt)
    if fmt.startswith("fp8"):
        scale = ref.abs().max().item() / torch.finfo(dtype).max
        whole = ref.div(scale).to(dtype).float().mul_(scale)
    else:
        whole = ref.to(dtype).float()
    got = round_weight(ref, fmt)
    assert got.shape == ref.shape and got.dtype == torch.float32
    assert torch.equal(got, whole)
    assert torch.equal(round_weight(ref.t(), fmt), whole.t().contiguous())  # a strided view: the same values


def test_a_measured_run_keeps_only_the_reference_logits():
    run = blockwise.BlockRun(lambda name, ref, got: (name, float((ref - got).abs().max())))
    run.keep("batch", "fp32", torch.zeros(2, 3))
    run.keep("batch", "fp16", torch.ones(2, 3))
    assert set(run.logits["batch"]) == {"fp32"}
    assert run.measured == {"batch": {"fp16": ("batch", 1.0)}}


_HEAP_PINNED = r"""
import re, sys
import numpy as np
from ckinspect.analysis.blockwise import buffers_unmapped_when_freed

def vm_data():
    return int(re.search(r"VmData:\s+(\d+) kB", open("/proc/self/status").read())[1]) << 10

if sys.argv[1] == "set":
    buffers_unmapped_when_freed()
np.ones(16 << 20, np.uint8)  # freed at once: by default glibc now serves buffers this size from its heap
before = vm_data()
blocks = [np.ones(6 << 20, np.uint8) for _ in range(10)]  # a block's weights
pin = np.ones(1000)  # a small buffer that outlives them, above them in the heap
del blocks
print(vm_data() - before)
"""


@pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc" or not os.path.exists("/proc/self/status"), reason="glibc's malloc on Linux"
)
def test_a_freed_block_leaves_the_process_instead_of_the_heap():
    """What RLIMIT_DATA and strict overcommit count: of 60 MiB of freed blocks, part stays in the heap's
    extent by default (a small live buffer above them pins it); with their own mappings all is given back."""
    import subprocess
    import sys

    from tests.conftest import cli_env

    def kept(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _HEAP_PINNED, mode], capture_output=True, text=True, env=cli_env())
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    assert kept("default") >= 16 << 20  # 23 MiB of the 60 on glibc 2.3x
    assert kept("set") < 4 << 20  # none
