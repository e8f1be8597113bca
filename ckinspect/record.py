"""`Record`: the base of the core's data classes. Fields in `__slots__`, equality and repr by value.

Not `@dataclass`, on purpose: importing `dataclasses` pulls in `inspect` (~9 ms) and each decorated
class compiles its generated methods at import (~1 ms a class). The ~20 records that
`ckinspect --report` imports made that a fifth of its run time on a 2 GiB file, and frozen
dataclasses had pushed the readers into building their 50,000 tensors around the generated
`__init__` (bench/bench_report.py measures both). tests/report/test_import_hygiene.py holds the line.

A subclass lists its fields in `__slots__` (names starting with "_" are private state, left out of
equality and repr) and spells out its `__init__`. Value records (TensorInfo, Finding ...) are never
changed once built (`replace` makes a changed copy; the anatomy memo relies on it); records that are
filled in step by step (Checkpoint, Layout ...) set `__hash__ = None`.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from typing_extensions import Self  # typing.Self from Python 3.11; only the type checker reads it


class Record:
    __slots__ = ()
    _fields: tuple[str, ...] = ()

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        slots = cls.__dict__.get("__slots__", ())
        cls._fields = (*cls._fields, *(name for name in slots if not name.startswith("_")))

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({fields})"

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed, like dataclasses.replace."""
        unknown = changes.keys() - set(self._fields)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        clone = object.__new__(type(self))
        for cls in type(self).__mro__:
            for name in cls.__dict__.get("__slots__", ()):
                if hasattr(self, name):
                    object.__setattr__(clone, name, changes[name] if name in changes else getattr(self, name))
        return clone
