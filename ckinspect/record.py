"""`Record`: the one record style of ckinspect. Fields are annotations, `__init__` is generated.

    class Part(Record):
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

Why this style: measured on this project's 2-core machine while it ran other jobs (load average
~16), so only the relative figures mean much. `python bench/bench_records.py --rounds 15`, best of
15 fresh processes per style, a TensorInfo-shaped class (7 fields, 2 defaults):
                         generated Record  hand-written  @dataclass(slots)  NamedTuple
    50,000 built (no gc)      80 ms           74 ms          70 ms            143 ms
    bytes per instance        88              88             88               104
    defining the class        0.19 ms         0.04 ms        0.89 ms          0.28 ms
In one process the generated and the hand-written `__init__` build 50,000 in 100 and 110 ms (their
bytecode is identical); the table's spread between the first three is noise. `@dataclass` would
also import `dataclasses` (and `inspect`) on the report path, which tests/report/test_import_hygiene.py
keeps free of it; tuples are 18% bigger, slower to build, and cannot refuse `__setstate__` (TensorInfo
must) nor hold private state. The cost of generating is compiling: so each class compiles its
`__init__` on its first construction. `ckinspect --report --quick --format json
samples/resumed-60/tiny_resume.pth` builds 12 of the 17 record classes it imports; compiling their
`__init__`s took 13 ms of its 324 ms in-process run at that load (24 ms for all 17 compiled at
import); the whole command took a median 873 ms against 831 ms for the hand-written records (15
interleaved runs each; best runs 455 and 612 ms: within the noise). In exchange no record spells out
`self.x = x` (10 of the 14 repeated blocks `duplicates` found) and the fields are declared once.

The exceptions, on purpose: `io.zipdir.ZipMember` stays a tuple subclass, built by `tuple.__new__`
in the central-directory loop with no Python frame (16% faster than any `__init__` on 50,000
members, and that reader's speed is a promise); the restricted unpickler's stand-ins (`StorageRef`,
`_StorageType`, `Opaque` ...) stay hand-slotted, since a hostile pickle holds them and they refuse
`__setattr__`; the TUI's `Row`s compute their cells lazily; Textual messages are `@dataclass`
subclasses of `Message` (Textual's own style: the generated `__init__` ends in `Message.__post_init__`,
and the TUI imports `dataclasses` through Textual anyway).
"""

from __future__ import annotations

import math
import os

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
        own = _own_fields(ns)
        cls = super().__new__(mcls, name, bases, ns, **kwargs)
        inherited: dict[str, Field] = {}
        for base in reversed(cls.__mro__[1:]):
            inherited.update(getattr(base, "_specs", {}))
        cls._specs = {**inherited, **own}
        cls._fields = tuple(f for f in cls._specs if not f.startswith("_"))
        if own and "__init__" not in ns:
            setattr(cls, "__init__", _compile_on_first_call)  # noqa: B010 - the class's __init__, not an instance's
        return cls


def _own_fields(ns: dict[str, Any]) -> dict[str, Field]:
    """The fields a class body declares; its annotated defaults leave `ns`, which gets the `__slots__`."""
    if "__slots__" in ns:  # spelled out (Record itself, or a class with its own __init__): fields = slots
        slots = (ns["__slots__"],) if isinstance(ns["__slots__"], str) else ns["__slots__"]
        return {fname: Field(MISSING, None, True) for fname in slots}
    own: dict[str, Field] = {}
    for fname, annotation in ns.get("__annotations__", {}).items():
        if "ClassVar" in str(annotation):
            continue
        value = ns.pop(fname, MISSING)
        own[fname] = value if isinstance(value, Field) else Field(value, None, True)
    ns["__slots__"] = tuple(own)
    return own


def _compile_on_first_call(self: Any, *args: Any, **kwargs: Any) -> None:
    """A record class's first construction compiles its __init__ (classes a run never builds never pay)."""
    cls = type(self)
    owner = next(c for c in cls.__mro__ if c.__dict__.get("__init__") is _compile_on_first_call)
    init = _generated_init(owner)  # type: ignore[arg-type]  # a class of the RecordType metaclass
    setattr(owner, "__init__", init)  # noqa: B010
    init(self, *args, **kwargs)


def _generated_init(cls: RecordType) -> Callable[..., None]:
    """Compile `__init__(self, a, b=<default>, c=None)` whose body assigns each field in order."""
    params: list[str] = []
    body: list[str] = []
    env: dict[str, Any] = {}
    seen_default = False
    for name, spec in cls._specs.items():
        env[f"_default_{name}"], env[f"_factory_{name}"] = spec.default, spec.default_factory
        param, value = _param_and_value(name, spec)
        if param == name and seen_default:
            raise TypeError(f"{cls.__name__}: field {name} without a default follows one with a default")
        if param is not None:
            params.append(param)
        seen_default = seen_default or (spec.init and (spec.default is not MISSING or spec.default_factory is not None))
        body.append(f"self.{name} = {value}")
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    source = f"def __init__(self, {', '.join(params)}) -> None:\n    " + "\n    ".join(body or ["pass"])
    exec(compile(source, f"<record {cls.__qualname__}>", "exec", dont_inherit=True), env)
    init = env["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    return init


def _param_and_value(name: str, spec: Field) -> tuple[str | None, str]:
    """The field's parameter in `__init__` (None: not one) and the expression its body assigns."""
    if spec.default_factory is not None:
        if spec.init:
            return f"{name}=None", f"_factory_{name}() if {name} is None else {name}"
        return None, f"_factory_{name}()"
    if not spec.init:
        return None, f"_default_{name}"
    return (name if spec.default is MISSING else f"{name}=_default_{name}"), name


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

    def to_json(self) -> dict[str, Any]:
        """The public fields by name, for JSON: paths as str, inf and NaN as null (JSON has neither)."""
        return {name: _jsonable(getattr(self, name)) for name in self._fields}

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


def slot_descriptors(cls: RecordType) -> tuple[Any, ...]:
    """The slot descriptors of every field of a record class, in `__init__`'s order: what the compiled record
    copier (ckinspect/_native/records.c) sets, with no `__init__` frame. A class whose fields live in several
    classes or that has a `__post_init__` (which they would skip) is refused."""
    own = vars(cls)
    if hasattr(cls, "__post_init__") or not all(name in own for name in cls._specs):
        raise TypeError(f"{cls.__name__}: its records cannot be built slot by slot")
    return tuple(own[name] for name in cls._specs)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return os.fspath(value) if isinstance(value, os.PathLike) else value
