"""`Record`: the one record style of ckinspect. Fields are annotations, `__init__` is generated.

    class TensorInfo(Record):
        name: str
        dtype: str
        storage_offset: int = 0
        tensors: list[TensorInfo] = field(default_factory=list)   # None also means "a fresh one"
        _memo: Any = field(default=None, init=False)              # private state: a slot, not a field

`RecordType` turns the annotations into `__slots__` (no per-instance dict), removes the defaults
from the class body, and compiles one `__init__` per class with `exec` (`self.name = name` ...,
then `__post_init__` if the class has one). Equality, hash and repr are by value over the public
fields; names starting with "_" are private state, left out of them. Type checkers see the fields
through `dataclass_transform`. Value records (TensorInfo, Finding ...) are never changed once built
(`replace` makes a changed copy; the anatomy memo relies on it); records filled in step by step
(Checkpoint, Layout ...) set `__hash__ = None`.

Why this style, measured on this 2-core machine (bench/bench_records.py, Python 3.11, medians):
                                  hand-written  generated  @dataclass     NamedTuple
                                  (was Record)  (Record)   (slots=True)
    50,000 TensorInfo built       29 ms         29 ms      33 ms          40 ms
    bytes per instance            112           112        112            104
    defining a 7-field class      0.05 ms       0.11 ms    0.56 ms        0.18 ms
    importing the machinery       0             0          9.4 ms         0 (in collections)
`ckinspect --report --quick --format json samples/resumed-60/tiny_resume.pth` imports 20 records;
under `python -X importtime` ckinspect's own imports took 33.5 ms before and 33.6 ms after
(median of 11 runs). The generated `__init__` is byte for byte the hand-written one, so building
is as fast; it costs ~0.06 ms more per class than writing it out, and spares every record its
`self.x = x` lines (10 of the 14 repeated blocks `duplicates` found). `@dataclass` would cost an
import of `dataclasses` + `inspect` and half a millisecond a class on the report path, and its
`__init__` is slower with slots; tuples cannot refuse `__setstate__` (TensorInfo must) nor hold
private state. Textual messages stay `@dataclass` subclasses of `Message` (Textual's own style;
the TUI imports `dataclasses` through Textual anyway).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar

    from typing_extensions import Self, dataclass_transform  # typing's from 3.11/3.12; only type checkers read it
else:

    def dataclass_transform(**_: object):  # type checkers read the real one; at run time it marks nothing
        return lambda cls: cls


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


class Field:
    """How one field starts: a default, a factory (called for each record, and when given None), or neither."""

    __slots__ = ("default", "default_factory", "init")

    def __init__(self, default: Any, default_factory: Callable[[], Any] | None, init: bool) -> None:
        self.default = default
        self.default_factory = default_factory
        self.init = init


def field(*, default: Any = MISSING, default_factory: Callable[[], Any] | None = None, init: bool = True) -> Any:
    """A field with a fresh default per record (`default_factory`) or left out of `__init__` (`init=False`)."""
    return Field(default, default_factory, init)


@dataclass_transform(field_specifiers=(field,))
class RecordType(type):
    """Metaclass of Record: annotations -> __slots__, defaults -> a generated __init__."""

    _specs: dict[str, Field]
    _fields: tuple[str, ...]

    def __new__(mcls, name: str, bases: tuple[type, ...], ns: dict[str, Any], **kwargs: Any) -> RecordType:
        own: dict[str, Field] = {}
        if "__slots__" in ns:  # spelled out (Record itself, or a class with its own __init__): fields = slots
            slots = (ns["__slots__"],) if isinstance(ns["__slots__"], str) else ns["__slots__"]
            own = {fname: Field(MISSING, None, True) for fname in slots}
        else:
            for fname, annotation in ns.get("__annotations__", {}).items():
                if "ClassVar" in str(annotation):
                    continue
                value = ns.pop(fname, MISSING)
                own[fname] = value if isinstance(value, Field) else Field(value, None, True)
            ns["__slots__"] = tuple(own)
        cls = super().__new__(mcls, name, bases, ns, **kwargs)
        inherited: dict[str, Field] = {}
        for base in reversed(cls.__mro__[1:]):
            inherited.update(getattr(base, "_specs", {}))
        cls._specs = {**inherited, **own}
        cls._fields = tuple(f for f in cls._specs if not f.startswith("_"))
        if own and "__init__" not in ns:
            cls.__init__ = _generated_init(cls)  # type: ignore[misc]
        return cls


def _generated_init(cls: RecordType) -> Callable[..., None]:
    """Compile `__init__(self, a, b=<default>, c=None)` whose body assigns each field in order."""
    params: list[str] = []
    body: list[str] = []
    env: dict[str, Any] = {}
    seen_default = False
    for name, spec in cls._specs.items():
        env[f"_default_{name}"], env[f"_factory_{name}"] = spec.default, spec.default_factory
        if spec.default_factory is not None:
            value = f"_factory_{name}()"
            if spec.init:
                params.append(f"{name}=None")
                value = f"{value} if {name} is None else {name}"
        elif not spec.init:
            value = f"_default_{name}"
        else:
            value = name
            if spec.default is MISSING:
                if seen_default:
                    raise TypeError(f"{cls.__name__}: field {name} without a default follows one with a default")
                params.append(name)
            else:
                params.append(f"{name}=_default_{name}")
        seen_default = seen_default or (spec.init and (spec.default is not MISSING or spec.default_factory is not None))
        body.append(f"self.{name} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    source = f"def __init__(self, {', '.join(params)}) -> None:\n    " + "\n    ".join(body or ["pass"])
    exec(compile(source, f"<record {cls.__qualname__}>", "exec"), env)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


class Record(metaclass=RecordType):
    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()  # the public fields, in order (set by RecordType)
    _specs: ClassVar[dict[str, Field]] = {}  # every field and how it starts

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
