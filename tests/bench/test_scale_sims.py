"""bench/scale_sims' zero tensors: the sparse saves' templates (make_sparse_run's 1B run) are torch.save's own bytes
with every storage's data a hole, whatever the process's heap held before (bench_scale builds every family in one
process: torch.empty handed back freed heap bytes, and a 1B save took 269 MB of real blocks instead of 0.8 MB)."""

from __future__ import annotations

import torch

from bench import scale_sims

SHAPES = [(512, 256), (256,), (3, 4), (1 << 16,)]


def test_zero_tensors_are_saved_as_torch_zeros_are_and_their_data_are_holes():
    freed = [bytes([7]) * 100_000 for _ in range(200)]  # 20 MB of non-zero heap, freed but the last block
    kept = freed[-1]
    del freed
    names = [f"t{i}" for i in range(len(SHAPES))]
    zeros = scale_sims.zero_tensors(SHAPES, torch.bfloat16)
    assert [tuple(t.shape) for t in zeros] == SHAPES and len({t.untyped_storage()._cdata for t in zeros}) == 4
    ours = scale_sims.saved_template(dict(zip(names, zeros, strict=True)))
    plain = {name: torch.zeros(shape, dtype=torch.bfloat16) for name, shape in zip(names, SHAPES, strict=True)}
    theirs = scale_sims.saved_template(plain)
    assert ours == theirs
    holes = [part for part in ours if isinstance(part, int)]
    assert holes == [512 * 256 * 2, (1 << 16) * 2]  # each storage of 4 KiB or more; the two smaller are bytes
    assert scale_sims.real_bytes(ours) == scale_sims.template_length(ours) - sum(holes) and kept
