"""The token ids logit drift feeds a model: a seeded random batch, or a text cut into windows. What a
LogitModel (analysis.logit_models) builds its inputs from; torch is imported when they are made."""

from __future__ import annotations

from typing import Any


def random_batch(seed: int, batch: int, length: int, vocab: int) -> Any:
    """Token ids drawn uniformly below `vocab` from a generator seeded with `seed`: shape (batch, length)."""
    import torch

    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def text_windows(ids: list[int], length: int) -> Any:
    """Token ids cut into as many whole windows of `length` as they fill (at least one, shorter if need be)."""
    import torch

    length = max(2, min(length, len(ids)))
    count = max(1, len(ids) // length)
    return torch.tensor(ids[: count * length], dtype=torch.long).reshape(count, length)
