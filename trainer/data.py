"""The corpus and the two batch orders.

The corpus is generated, not downloaded: a fixed little grammar driven by a fixed LCG (not Python's
`random`, whose streams may change between versions), so every machine trains on the same bytes.
Tokens are bytes (vocab 256).

Batch orders:
- "random": each step draws window starts from a dedicated `torch.Generator`; its state is saved
  in the resume file and restored, so the resumed run draws exactly the batches the straight run drew.
- "epoch": MiniMind's order. Each epoch is a permutation of fixed windows seeded by seed + epoch, split
  across ranks; on resume the batches already seen in that epoch are skipped by index arithmetic,
  never loaded.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

_SUBJECTS = [
    "the cat",
    "a dog",
    "the old man",
    "my sister",
    "the robot",
    "a small bird",
    "the teacher",
    "our neighbour",
    "the river",
    "a tired student",
    "the baker",
    "the moon",
]
_VERBS = ["sees", "likes", "follows", "paints", "remembers", "carries", "finds", "builds", "hears", "opens"]
_OBJECTS = [
    "the red door",
    "a long letter",
    "the garden",
    "an apple",
    "the quiet street",
    "a wooden box",
    "the morning light",
    "a new song",
    "the map",
    "two stones",
    "the last train",
]
_ENDINGS = [".", ".", ".", " again.", " every day.", " at night.", " with care.", "!", " in the rain."]

CORPUS_SENTENCES = 360  # ~13 KB of text: 22 batches of 8x64 per epoch, so a stop at step 30 lands mid-epoch 1


def _lcg(seed: int):
    state = seed
    while True:
        state = (state * 6364136223846793005 + 1442695040888963407) % 2**64
        yield state >> 33


@functools.lru_cache(maxsize=1)
def corpus_bytes(sentences: int = CORPUS_SENTENCES, seed: int = 2024) -> bytes:
    """The training text: deterministic, identical on every machine and Python version."""
    draw = _lcg(seed)
    pick = lambda words: words[next(draw) % len(words)]  # noqa: E731
    lines = []
    for _ in range(sentences):
        sentence = f"{pick(_SUBJECTS)} {pick(_VERBS)} {pick(_OBJECTS)}{pick(_ENDINGS)}"
        lines.append(sentence[0].upper() + sentence[1:])
    return (" ".join(lines) + "\n").encode("ascii")


def corpus_tokens() -> torch.Tensor:
    return torch.frombuffer(bytearray(corpus_bytes()), dtype=torch.uint8).long()


def split_tokens() -> tuple[torch.Tensor, torch.Tensor]:
    """(train, held-out): the last 10% is never trained on; the fixed evaluation batch comes from it."""
    tokens = corpus_tokens()
    cut = len(tokens) * 9 // 10
    return tokens[:cut], tokens[cut:]


def fixed_batch(seed: int, batch_size: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded batch from the held-out text: the same (inputs, targets) for the same arguments."""
    _, held_out = split_tokens()
    gen = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(held_out) - seq_len - 1, (batch_size,), generator=gen)
    windows = torch.stack([held_out[s : s + seq_len + 1] for s in starts.tolist()])
    return windows[:, :-1], windows[:, 1:]


def batch_generator_seed(seed: int, rank: int) -> int:
    """Each rank draws its own stream of random positions."""
    return seed * 1000 + rank


@dataclass
class Position:
    """Where the data stream stands: epoch and the batches already seen in it (per rank)."""

    epoch: int = 0
    epoch_step: int = 0


class Batches:
    """Yields (inputs, targets) for one rank in the chosen order; `position` is what a resume file saves."""

    def __init__(self, order: str, seed: int, batch_size: int, seq_len: int, rank: int = 0, world_size: int = 1):
        if order not in ("random", "epoch"):
            raise ValueError(f"unknown batch order {order!r} (random or epoch)")
        self.order, self.seed, self.batch_size, self.seq_len = order, seed, batch_size, seq_len
        self.rank, self.world_size = rank, world_size
        self.tokens, _ = split_tokens()
        self.position = Position()
        self.generator = torch.Generator().manual_seed(batch_generator_seed(seed, rank))
        self.windows = len(self.tokens) // (seq_len + 1)  # epoch order: fixed, non-overlapping windows
        self.batches_per_epoch = (self.windows // world_size) // batch_size
        if order == "epoch" and self.batches_per_epoch < 1:
            raise ValueError("corpus too small for this batch size and world size")
        self._perm_epoch, self._perm = -1, torch.empty(0, dtype=torch.long)

    def _rank_indices(self, epoch: int) -> torch.Tensor:
        if epoch != self._perm_epoch:
            perm = torch.randperm(self.windows, generator=torch.Generator().manual_seed(self.seed + epoch))
            per_rank = self.windows // self.world_size
            self._perm, self._perm_epoch = perm[self.rank :: self.world_size][:per_rank], epoch
        return self._perm

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        span = self.seq_len + 1
        if self.order == "random":
            starts = torch.randint(0, len(self.tokens) - span, (self.batch_size,), generator=self.generator)
        else:
            pos = self.position
            if pos.epoch_step >= self.batches_per_epoch:
                pos.epoch, pos.epoch_step = pos.epoch + 1, 0
            lo = pos.epoch_step * self.batch_size
            starts = self._rank_indices(pos.epoch)[lo : lo + self.batch_size] * span
        self.position.epoch_step += 1
        if self.order == "epoch" and self.position.epoch_step == self.batches_per_epoch:
            self.position.epoch, self.position.epoch_step = self.position.epoch + 1, 0
        windows = torch.stack([self.tokens[s : s + span] for s in starts.tolist()])
        return windows[:, :-1], windows[:, 1:]
