"""One tensor's value statistics as the TUI's details pane draws them: min, max, mean, std, non-finite and
fp16-overflow counts (the value scan's own implementation, analysis.stats) plus a small histogram drawn
from an evenly strided sample. Pure: bytes come from io.values' block reader, nothing is written; numpy is
imported by the call, so importing this module costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ckinspect.model import Checkpoint, TensorInfo
from ckinspect.record import Record, field

Progress = Callable[[float], object]  # fraction done, 0.0 .. 1.0; what it returns is ignored


class ValueStats(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    count: int
    minimum: float | None = None
    maximum: float | None = None
    mean: float | None = None
    std: float | None = None  # with Bessel's correction, as torch.std and the value scan
    nonfinite: int = 0
    fp16_overflow: int = 0
    histogram: list[int] = field(default_factory=list)
    hist_range: tuple[float, float] = (0.0, 0.0)
    sampled: bool = False  # the histogram is drawn from an evenly strided sample


HISTOGRAM_BINS = 24
_SAMPLE_LIMIT = 1_000_000
_BLOCK_ELEMENTS = 1 << 20  # elements decoded at once (8 MiB of float64)


def tensor_value_stats(ckpt: Checkpoint, tensor: TensorInfo, progress: Progress | None = None) -> ValueStats:
    """min, max, mean, std, non-finite and fp16-overflow counts and a small histogram.

    The values come from the shared block reader (io.values: any layout, strided views included) and
    the statistics from the value scan's own implementation (analysis.stats); what is computed here is
    only what the details pane draws and the scan does not keep: the histogram.
    """
    import numpy as np

    from ckinspect.analysis.stats import OVERFLOW_DTYPES, Moments, block_moments
    from ckinspect.dtypes import dtype_info
    from ckinspect.io.blobs import Blobs, UnreadableStorage
    from ckinspect.io.values import decode, raw_blocks

    info = dtype_info(tensor.dtype)
    if info.kind == "complex":
        raise ValueError(f"value statistics of {tensor.dtype} tensors are not computed")
    storage = ckpt.storages.get(tensor.storage_key)
    if storage is None:
        raise UnreadableStorage(f"storage {tensor.storage_key} of {tensor.name} is not in the checkpoint")
    floating = info.is_floating
    stats = ValueStats(count=tensor.numel)
    if tensor.numel == 0:
        return stats
    step = max(1, tensor.numel // _SAMPLE_LIMIT)
    stats.sampled = step > 1
    samples: list[Any] = []
    moments = Moments()
    count_overflow = tensor.dtype in OVERFLOW_DTYPES
    index = 0
    with Blobs() as blobs:
        for raw in raw_blocks(blobs, storage, tensor, _BLOCK_ELEMENTS):
            values = decode(raw, tensor.dtype)
            moments.merge(block_moments(values, count_overflow))
            picked = values[(-index) % step :: step]
            samples.append(picked[np.isfinite(picked)] if floating else picked)
            index += values.size
            if progress is not None:
                progress(index / tensor.numel)

    _settle(stats, moments, samples)
    return stats


def _settle(stats: ValueStats, moments: Any, samples: list[Any]) -> None:
    """The scan's numbers into `stats`, and the histogram of the finite sample over [min, max]."""
    import numpy as np

    summary = moments.stats()
    stats.nonfinite, stats.fp16_overflow = summary.nonfinite, summary.fp16_overflow
    if not moments.n:
        return
    lo, hi = moments.mn, moments.mx
    stats.minimum, stats.maximum, stats.mean = lo, hi, summary.mean
    if moments.n > 1:
        stats.std = summary.std
    sample = np.concatenate(samples)
    if sample.size:
        counts, edges = np.histogram(sample, bins=HISTOGRAM_BINS, range=(lo, hi) if hi > lo else (lo - 0.5, hi + 0.5))
        stats.histogram = [int(c) for c in counts]
        stats.hist_range = (float(edges[0]), float(edges[-1]))
