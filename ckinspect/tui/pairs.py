"""One row of the diff screen: a tensor name and its two sides, with what comparing them found. Its own
module so that the diff screen and the one-tensor detail screen share it without importing each other."""

from __future__ import annotations

from ckinspect.model import TensorInfo
from ckinspect.record import Record
from ckinspect.vocab import SAME_STRUCTURE


class Pair(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    name: str
    a: TensorInfo | None
    b: TensorInfo | None
    status: str = "comparing"
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    n_diff: int | None = None

    @property
    def differs(self) -> bool:
        return self.status not in ("same", SAME_STRUCTURE, "comparing")
