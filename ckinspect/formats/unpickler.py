"""A restricted unpickler: decodes checkpoint pickles into plain data without importing or running anything.

`find_class` never imports: every global it accepts maps to a stand-in defined here (tensors become
`TensorInfo` descriptors, torch dtypes become their names, numpy arrays become `ArrayInfo`, other
harmless classes become `Opaque` records). Anything else raises `UnsafePickle`, and the static scan
(`pickle_scan`) has already refused such pickles before this runs.
"""

from __future__ import annotations

import ntpath
import pickle
import posixpath
import reprlib
import struct

from ckinspect.dtypes import TORCH_DTYPE_ATTRS, TORCH_STORAGE_CLASSES, dtype_info
from ckinspect.fmt import bounded_repr, bounded_str
from ckinspect.formats.errors import CorruptPickle, UnsafePickle
from ckinspect.formats.pickle_scan import (
    PickleScan,
    classify_global,
    is_torchscript_global,
    native_decoding,
    normalize,
    prefetched,
    scan_decoding,
    scan_pickle,
)
from ckinspect.model import COMPOSITE_PARTS, RAGGED, CompositeTensor, TensorInfo
from ckinspect.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

SMALL_ARRAY_BYTES = 1 << 20  # numpy arrays up to this size keep their bytes (RNG states); larger keep only the size


# ----------------------------------------------------------------------------------------------
# What decoded objects look like
#
# Stand-ins live as long as the process, so a pickle must not be able to change them for the next
# file: BUILD can set attributes on whatever is on the stack, including the classes and callables
# find_class returned. Classes therefore refuse attribute writes (_FrozenMeta), callables are
# slotted objects that refuse them too, and per-load records either define __setstate__ or have
# no __dict__.


class _FrozenMeta(type):
    def __setattr__(cls, name: str, value: Any) -> None:
        raise CorruptPickle(f"pickle tries to set {name!r} on {cls.__name__}")

    def __delattr__(cls, name: str) -> None:
        raise CorruptPickle(f"pickle tries to delete {name!r} from {cls.__name__}")


class _Call:
    """A stand-in callable that a pickle cannot modify (functions have a writable __dict__)."""

    __slots__ = ("_fn",)
    _fn: Callable[..., Any]

    def __init__(self, fn: Callable[..., Any]) -> None:
        object.__setattr__(self, "_fn", fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __setattr__(self, name: str, value: Any) -> None:
        raise CorruptPickle(f"pickle tries to set {name!r} on a stand-in")

    def __delattr__(self, name: str) -> None:
        raise CorruptPickle(f"pickle tries to delete {name!r} from a stand-in")

    def __repr__(self) -> str:
        return f"<stand-in {self._fn.__name__}>"


class StorageRef:
    """A storage named by a persistent id: ('storage', type, key, location, numel[, view]).

    Slotted, and its `__setstate__` refuses: a pickle's BUILD cannot change it. The readers set
    `dtype` (an untyped storage learns it from the tensor viewing it) and `key` (a prefix) directly.
    """

    __slots__ = ("key", "dtype", "location", "nbytes", "untyped")

    def __init__(self, key: str, dtype: str, location: str, nbytes: int, untyped: bool = False) -> None:
        self.key = key
        self.dtype = dtype
        self.location = location
        self.nbytes = nbytes
        self.untyped = untyped  # torch.storage.UntypedStorage: dtype comes from the tensor that views it

    def __setstate__(self, state: Any) -> None:
        raise CorruptPickle("pickle tries to rewrite a storage reference")

    def __repr__(self) -> str:
        return f"StorageRef({self.key!r}, {self.dtype!r}, {self.location!r}, {self.nbytes!r}, untyped={self.untyped!r})"


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 3, 6, 6, 6
_SHORT.maxstring, _SHORT.maxother = 80, 80
_repr_depth = 0


class Opaque(metaclass=_FrozenMeta):
    """A benign object kept as a record: the global it names, its constructor args and its state."""

    qualname = "?"
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    state: Any
    items: list[Any]
    mapping: dict[Any, Any]

    def __new__(cls, *args: Any, **kwargs: Any) -> Opaque:
        self = object.__new__(cls)
        self.args = args
        self.kwargs = kwargs
        self.state = None
        self.items = []
        self.mapping = {}
        return self

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def append(self, item: Any) -> None:
        self.items.append(item)

    def extend(self, items: Any) -> None:
        self.items.extend(items)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.mapping[key] = value

    @property
    def fields(self) -> dict[str, Any]:
        """Attributes the object would have had (its BUILD state, when that is a dict)."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2 and (state[0] is None or isinstance(state[0], dict)):
            merged = dict(state[0] or {})
            merged.update(state[1] or {})
            return merged
        return dict(state) if isinstance(state, dict) else {}

    def __repr__(self) -> str:
        # bounded: a pickle's memo can share one list a billion times over, or nest records without end
        global _repr_depth
        if _repr_depth > 2:
            return f"Opaque({self.qualname}, ...)"
        _repr_depth += 1
        try:
            return f"Opaque({self.qualname}, args={_SHORT.repr(self.args)}, state={_SHORT.repr(self.state)})"
        finally:
            _repr_depth -= 1


class ArrayInfo(metaclass=_FrozenMeta):
    """A numpy array (RNG state and the like): dtype string, shape, size, bytes when small."""

    def __init__(self, *args: Any) -> None:
        self.dtype = "?"
        self.shape: tuple[int, ...] = tuple(args[1]) if len(args) > 1 and isinstance(args[1], tuple) else ()
        self.nbytes = 0
        self.data: bytes | None = None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise CorruptPickle("numpy array with an unexpected state")
        shape, dtype, _fortran, raw = state[-4:]
        self.shape = tuple(int(s) for s in shape)
        self.dtype = str(dtype) if isinstance(dtype, _NumpyDType) else bounded_str(dtype, 80)
        if isinstance(raw, (bytes, bytearray)):
            self.nbytes = len(raw)
            self.data = bytes(raw) if len(raw) <= SMALL_ARRAY_BYTES else None
        else:  # object arrays pickle a list of items
            self.nbytes = 0
            self.data = None

    def __repr__(self) -> str:
        return f"ArrayInfo(dtype={self.dtype!r}, shape={self.shape}, nbytes={self.nbytes})"


class _NumpyDType(metaclass=_FrozenMeta):
    def __init__(self, descr: Any = "?", *_: Any) -> None:
        self.descr = bounded_str(descr, 80)
        self.order = "|" if self.descr in ("b1", "i1", "u1", "?") else "<"

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) > 1 and isinstance(state[1], str):
            self.order = state[1]

    def __str__(self) -> str:
        return self.descr if self.descr[:1] in "<>|=" else self.order + self.descr


_SCALAR_FORMATS = {"f8": "d", "f4": "f", "f2": "e", "i8": "q", "i4": "i", "i2": "h", "i1": "b",
                   "u8": "Q", "u4": "I", "u2": "H", "u1": "B", "b1": "?"}  # fmt: skip


def _numpy_scalar(dtype: Any, raw: Any = b"") -> Any:
    """numpy.float64(1.5) and friends as the Python number they hold (Opaque when not a plain number)."""
    text = str(dtype) if isinstance(dtype, _NumpyDType) else bounded_str(dtype, 80)
    fmt = _SCALAR_FORMATS.get(text.lstrip("<>|="))
    if fmt and isinstance(raw, (bytes, bytearray)) and len(raw) == struct.calcsize(fmt):
        return struct.unpack((">" if text.startswith(">") else "<") + fmt, raw)[0]
    return _opaque_class("numpy.core.multiarray.scalar")(text, raw)


class _StorageType:
    """torch.FloatStorage, torch.storage.UntypedStorage ...: what a persistent id names as its type."""

    __slots__ = ("dtype", "untyped", "itemsize")
    dtype: str
    untyped: bool
    itemsize: int

    def __init__(self, dtype: str, untyped: bool = False) -> None:
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "untyped", untyped)
        object.__setattr__(self, "itemsize", 1 if untyped else dtype_info(dtype).itemsize)

    def __setattr__(self, name: str, value: Any) -> None:
        raise CorruptPickle(f"pickle tries to set {name!r} on a storage type")

    def __setstate__(self, state: Any) -> None:
        raise CorruptPickle("pickle tries to rewrite a storage type")


class _DictWithState(dict, metaclass=_FrozenMeta):
    """OrderedDict / Counter as a dict. Instance attributes (a state dict's `_metadata`, which
    load_state_dict reads for module versions) are kept aside in `pickled_attributes`, never set."""

    ordered = False

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, dict):
            object.__setattr__(self, "pickled_attributes", state)


class _OrderedDictStandIn(_DictWithState):
    """collections.OrderedDict: written back as one by convert."""

    ordered = True


class _DefaultDict(_DictWithState):
    """collections.defaultdict(factory, ...) as a dict: the factory is not kept."""

    def __init__(self, factory: Any = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)


class _ParameterStandIn(metaclass=_FrozenMeta):
    """torch.nn.Parameter(data, requires_grad) by NEWOBJ or call: the tensor itself."""

    def __new__(cls, data: Any = None, *_: Any, **__: Any) -> Any:
        return data


class _TensorClass(metaclass=_FrozenMeta):
    """torch.Tensor and its legacy subclasses as the `new_type` of _rebuild_from_type_v2."""


# ----------------------------------------------------------------------------------------------
# Tensor rebuild stand-ins


def _shape(value: Any, what: str) -> tuple[int, ...]:
    if type(value) is not tuple:
        if not isinstance(value, (tuple, list)):
            raise CorruptPickle(f"tensor {what} is not a tuple of integers: {bounded_repr(value, 80)}")
        value = tuple(value)
    for v in value:  # a plain loop: this runs once per tensor and all() with a generator costs 5x more
        if type(v) is not int or v < 0 and what == "size":
            raise CorruptPickle(f"tensor {what} is not a tuple of integers: {bounded_repr(value, 80)}")
    return value


def _tensor(storage: Any, storage_offset: Any, size: Any, stride: Any, dtype: str | None = None) -> TensorInfo:
    if not isinstance(storage, StorageRef):
        raise CorruptPickle(f"tensor rebuilt from something that is not a storage: {type(storage).__name__}")
    if type(storage_offset) is not int or storage_offset < 0:
        raise CorruptPickle("tensor storage offset is not a non-negative integer")
    if dtype is None:
        dtype = storage.dtype
    elif storage.untyped and storage.dtype == "uint8" and dtype != "uint8":
        storage.dtype = dtype  # an untyped storage takes the dtype of the tensor viewing it
    return TensorInfo("", dtype, _shape(size, "size"), _shape(stride, "stride"), storage.key, storage_offset)


def _rebuild_tensor(cls, storage, storage_offset, size, stride, *_rest):
    # torch's own pickles, once per tensor: checked inline in this one frame (sizes ints >= 0, strides ints),
    # the general path handles everything else
    if type(storage) is StorageRef and type(storage_offset) is int and storage_offset >= 0 and \
            type(size) is tuple and type(stride) is tuple:  # fmt: skip
        for v in size:
            if type(v) is not int or v < 0:
                break
        else:
            for v in stride:
                if type(v) is not int:
                    break
            else:
                return TensorInfo("", storage.dtype, size, stride, storage.key, storage_offset)
    return _tensor(storage, storage_offset, size, stride)


class _RebuildTensor(metaclass=_FrozenMeta):
    """torch._utils._rebuild_tensor(_v2): a class whose __new__ returns the TensorInfo, so the call
    made once per tensor is a single frame and the stand-in cannot be modified by the pickle."""

    __new__ = _rebuild_tensor  # type: ignore[assignment]  # a __new__ returning a TensorInfo is the point


def _part(value: Any, what: str) -> TensorInfo:
    if not isinstance(value, TensorInfo):
        raise CorruptPickle(f"{what} is rebuilt from something that is not a tensor: {type(value).__name__}")
    return value


def _rebuild_sparse_tensor(layout: Any, data: Any) -> CompositeTensor:
    """torch._utils._rebuild_sparse_tensor(layout, data): COO as (indices, values, size[, is_coalesced]) (the
    3-tuple is the legacy form), CSR/CSC/BSR/BSC as (compressed indices, plain indices, values, size)."""
    layout = _get_layout(layout)
    names = COMPOSITE_PARTS.get(layout) if layout.startswith("sparse_") else None
    if names is None or not isinstance(data, tuple) or len(data) not in (len(names) + 1, len(names) + 2):
        raise CorruptPickle(f"_rebuild_sparse_tensor with layout {bounded_repr(layout, 40)} and data it cannot hold")
    if layout != "sparse_coo" and len(data) != len(names) + 1:
        raise CorruptPickle(f"_rebuild_sparse_tensor: {layout} takes {len(names) + 1} items, got {len(data)}")
    parts = {name: _part(value, f"a {layout} tensor's {name}") for name, value in zip(names, data, strict=False)}
    return CompositeTensor(layout, parts["values"].dtype, _shape(data[len(names)], "size"), parts)


def _rebuild_nested_tensor(buffer: Any, sizes: Any, strides: Any, storage_offsets: Any) -> CompositeTensor:
    """torch._utils._rebuild_nested_tensor: one flat buffer and, per component, its sizes, strides and offset.
    The logical shape is (components, ragged...): the sizes live in a tensor, read only with the values."""
    parts = {name: _part(value, f"a nested tensor's {name}") for name, value in
             zip(COMPOSITE_PARTS["nested"], (buffer, sizes, strides, storage_offsets), strict=True)}  # fmt: skip
    dims = parts["sizes"].shape
    shape = (dims[0], *(RAGGED,) * dims[1]) if len(dims) == 2 else (dims[0] if dims else 0,)
    return CompositeTensor("nested", parts["buffer"].dtype, shape, parts)


def _rebuild_njt(kwargs: Any) -> CompositeTensor:
    """torch.nested._internal.nested_tensor._rebuild_njt(constructor_kwargs): a jagged nested tensor (NJT), one
    values tensor holding the components end to end, the offsets where each begins and, when saved, their
    lengths. Its shape is (components, *values' shape) with the ragged dimension (`_ragged_idx`) RAGGED."""
    if not isinstance(kwargs, dict):
        raise CorruptPickle(f"_rebuild_njt of something that is not a dict: {type(kwargs).__name__}")
    parts = {name: _part(kwargs.get(name), f"a jagged nested tensor's {name}") for name in COMPOSITE_PARTS["jagged"]
             if name in ("values", "offsets") or kwargs.get(name) is not None}  # fmt: skip
    values, offsets, ragged = parts["values"], parts["offsets"], kwargs.get("_ragged_idx", 1)
    if len(offsets.shape) != 1 or type(ragged) is not int or not 1 <= ragged <= len(values.shape):
        raise CorruptPickle("a jagged nested tensor whose offsets or ragged dimension do not fit its values")
    dims = list(values.shape)
    dims[ragged - 1] = RAGGED
    return CompositeTensor("jagged", values.dtype, (max(offsets.shape[0] - 1, 0), *dims), parts)


class _WrapperSubclass(Record):
    """torch._utils._rebuild_wrapper_subclass(cls, dtype, size, ...): a tensor subclass that holds no storage of
    its own (DTensor ...). Its data are the tensors in the state _rebuild_from_type_v2 sets on it."""

    subclass: str
    dtype: str
    shape: tuple[int, ...]

    def __setstate__(self, state: object) -> None:
        raise CorruptPickle("pickle tries to rewrite a tensor descriptor")


def _rebuild_wrapper_subclass(cls: Any, dtype: Any, size: Any, *_rest: Any) -> _WrapperSubclass:
    if not isinstance(dtype, str):
        raise CorruptPickle(f"a tensor subclass with a dtype that is not one: {bounded_repr(dtype, 40)}")
    return _WrapperSubclass(getattr(cls, "qualname", "torch.Tensor"), dtype, _shape(size, "size"))


_MAX_WRAPPED_DEPTH, _MAX_WRAPPED = 4, 64


def _wrapped_tensors(state: Any, prefix: str = "", depth: int = 0, found: dict | None = None) -> dict[str, TensorInfo]:
    """The tensors in a wrapper subclass's state, by attribute path (`_local_tensor`, `_spec.mesh._rank_map`),
    through dicts and records a few levels deep: bounded, a pickle's memo can share one record without end."""
    found = {} if found is None else found
    if isinstance(state, Opaque):
        state = state.fields
    if not isinstance(state, dict) or depth > _MAX_WRAPPED_DEPTH:
        return found
    for key, value in state.items():
        if len(found) >= _MAX_WRAPPED or type(key) is not str:
            break
        if isinstance(value, TensorInfo):
            found[prefix + key] = value
        elif isinstance(value, (dict, Opaque)):
            _wrapped_tensors(value, f"{prefix}{key}.", depth + 1, found)
    return found


def _rebuild_meta_tensor_no_storage(dtype: Any, size: Any, stride: Any, *_rest: Any) -> CompositeTensor:
    """torch._utils._rebuild_meta_tensor_no_storage: a meta-device tensor, a shape and a dtype without data."""
    if not isinstance(dtype, str):
        raise CorruptPickle(f"a meta tensor with a dtype that is not one: {bounded_repr(dtype, 40)}")
    shape = _shape(size, "size")
    if len(_shape(stride, "stride")) != len(shape):
        raise CorruptPickle("a meta tensor whose stride and size disagree")
    return CompositeTensor("meta", dtype, shape, {})


def _rebuild_tensor_v3(storage, storage_offset, size, stride, requires_grad=False, hooks=None, dtype=None, *_):
    return _tensor(storage, storage_offset, size, stride, dtype if isinstance(dtype, str) else None)


def _rebuild_qtensor(storage, storage_offset, size, stride, quantizer_params=None, *_rest):
    """A quantized tensor: per tensor, its integers (scale and zero point are numbers in the pickle); per
    channel, a composite of its integers and its per-channel scales and zero points (tensors of their own)."""
    values = _tensor(storage, storage_offset, size, stride)
    params = quantizer_params if isinstance(quantizer_params, tuple) else ()
    if len(params) == 4 and isinstance(params[1], TensorInfo) and isinstance(params[2], TensorInfo):
        parts = {"values": values, "scales": params[1], "zero_points": params[2]}
        return CompositeTensor("per_channel_affine", values.dtype, values.shape, parts)
    return values


class _RebuildParameter(metaclass=_FrozenMeta):
    """torch._utils._rebuild_parameter(_with_state)(data, requires_grad, hooks[, state]): the tensor."""

    def __new__(cls, data, *_rest):
        return data


def _rebuild_from_type_v2(func, new_type, args, state=None):
    if not callable(func) or not isinstance(args, tuple):
        raise CorruptPickle("_rebuild_from_type_v2 with a non-callable rebuild function")
    rebuilt = func(*args)
    if isinstance(rebuilt, _WrapperSubclass):
        if isinstance(state, tuple) and len(state) == 2:  # (dict, slots), as copyreg spells state with slots
            state = {k: v for half in state if isinstance(half, dict) for k, v in half.items()}
        parts = _wrapped_tensors(state)
        return CompositeTensor("wrapper_subclass", rebuilt.dtype, rebuilt.shape, parts, subclass=rebuilt.subclass)
    return rebuilt


def _rebuild_device_tensor_from_cpu_tensor(data, *_rest):
    return data


def _device(kind: Any = "cpu", index: Any = None) -> str:
    if isinstance(kind, str) and type(index) is int:
        return f"{bounded_str(kind)}:{index}"
    return bounded_str(kind)


def _size(dims: Any = ()) -> tuple[int, ...]:
    return tuple(dims)


def _get_layout(name: Any) -> str:
    return bounded_str(name, 80).removeprefix("torch.")


_SAFE_CODECS = {"latin1", "latin-1", "iso-8859-1", "utf-8", "utf8", "ascii"}


def _codecs_encode(obj: Any, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """protocol 2 spells bytes as _codecs.encode(str, 'latin1'); other codecs could import modules."""
    if not isinstance(obj, str) or not isinstance(encoding, str) or encoding.lower() not in _SAFE_CODECS:
        raise CorruptPickle(f"_codecs.encode with codec {bounded_repr(encoding, 40)} is not a bytes literal")
    return obj.encode(encoding.lower(), "strict")


def _path(*parts: Any) -> str:
    """pathlib paths pickle as their parts ('/', 'a', 'b'): joined back into the path string."""
    text = [bounded_str(p, 4096) for p in parts]
    return posixpath.join(*text) if text else "."


def _windows_path(*parts: Any) -> str:
    text = [bounded_str(p, 4096) for p in parts]
    return ntpath.join(*text) if text else "."


def _deque(items: Any = (), *_: Any) -> list:
    return list(items)


_MAX_ZERO_FILL = 1 << 20


def _bytes(source: Any = b"", *args: Any) -> bytes:
    """bytes(n) allocates n zero bytes: a ten-byte pickle could ask for a terabyte."""
    if isinstance(source, int) and not 0 <= source <= _MAX_ZERO_FILL:
        raise CorruptPickle(f"bytes({source}) in a pickle: refusing to allocate that")
    if args and isinstance(source, str):
        return _codecs_encode(source, *args)
    return bytes(source)


def _bytearray(source: Any = b"", *args: Any) -> bytearray:
    return bytearray(_bytes(source, *args))


def _reconstructor(cls: Any, base: Any = None, state: Any = None) -> Any:
    if isinstance(cls, type) and issubclass(cls, Opaque):
        return cls.__new__(cls, state)
    raise CorruptPickle("copyreg._reconstructor of a class that is not a plain record")


_OPAQUE_CLASSES: dict[str, type] = {}


def _opaque_class(qualname: str) -> type:
    cls = _OPAQUE_CLASSES.get(qualname)
    if cls is None:
        cls = _FrozenMeta(qualname.rsplit(".", 1)[-1], (Opaque,), {"qualname": qualname, "__slots__": ()})
        _OPAQUE_CLASSES[qualname] = cls
    return cls


_STANDINS: dict[str, Any] = {
    "collections.OrderedDict": _OrderedDictStandIn,
    "collections.Counter": _DictWithState,
    "collections.defaultdict": _DefaultDict,
    "collections.deque": _Call(_deque),
    "torch._utils._rebuild_tensor": _RebuildTensor,
    "torch._utils._rebuild_tensor_v2": _RebuildTensor,
    "torch._utils._rebuild_tensor_v3": _Call(_rebuild_tensor_v3),
    "torch._utils._rebuild_qtensor": _Call(_rebuild_qtensor),
    "torch._utils._rebuild_sparse_tensor": _Call(_rebuild_sparse_tensor),
    "torch._utils._rebuild_nested_tensor": _Call(_rebuild_nested_tensor),
    "torch._utils._rebuild_meta_tensor_no_storage": _Call(_rebuild_meta_tensor_no_storage),
    "torch._utils._rebuild_parameter": _RebuildParameter,
    "torch._utils._rebuild_parameter_with_state": _RebuildParameter,
    "torch._utils._rebuild_device_tensor_from_cpu_tensor": _Call(_rebuild_device_tensor_from_cpu_tensor),
    "torch._tensor._rebuild_from_type_v2": _Call(_rebuild_from_type_v2),
    "torch._utils._rebuild_wrapper_subclass": _Call(_rebuild_wrapper_subclass),
    "torch.nested._internal.nested_tensor._rebuild_njt": _Call(_rebuild_njt),
    "torch.nested._internal.nested_tensor.NestedTensor": _TensorClass,
    "torch.nn.parameter.Parameter": _ParameterStandIn,
    "torch.Tensor": _TensorClass,
    "torch.Size": _Call(_size),
    "torch.device": _Call(_device),
    "torch.serialization._get_layout": _Call(_get_layout),
    "torch.storage.UntypedStorage": _StorageType("uint8", untyped=True),
    "torch.storage.TypedStorage": _StorageType("uint8", untyped=True),
    "_codecs.encode": _Call(_codecs_encode),
    "builtins.set": set,
    "builtins.frozenset": frozenset,
    "builtins.bytearray": _Call(_bytearray),
    "builtins.complex": complex,
    "builtins.slice": slice,
    "builtins.list": list,
    "builtins.dict": dict,
    "builtins.tuple": tuple,
    "builtins.int": int,
    "builtins.float": float,
    "builtins.str": str,
    "builtins.bytes": _Call(_bytes),
    "builtins.bool": bool,
    "copyreg._reconstructor": _Call(_reconstructor),
    "numpy.core.multiarray._reconstruct": ArrayInfo,
    "numpy._core.multiarray._reconstruct": ArrayInfo,
    "numpy.ndarray": _opaque_class("numpy.ndarray"),
    "numpy.dtype": _NumpyDType,
    "numpy.core.multiarray.scalar": _Call(_numpy_scalar),
    "numpy._core.multiarray.scalar": _Call(_numpy_scalar),
    **{f"pathlib.{p}": _Call(_path) for p in ["Path", "PosixPath", "PurePath", "PurePosixPath"]},
    **{f"pathlib.{p}": _Call(_windows_path) for p in ["WindowsPath", "PureWindowsPath"]},
}


def _storage_dtype(class_name: str) -> str:
    """FloatStorage -> float32; QInt8Storage -> qint8 (shown as an opaque 1-byte type)."""
    if class_name in TORCH_STORAGE_CLASSES:
        return TORCH_STORAGE_CLASSES[class_name]
    return class_name.removesuffix("Storage").lower() or "uint8"


def standin_for(module: str, name: str) -> Any:
    """The object find_class hands the unpickler for an allowed or benign global; UnsafePickle otherwise."""
    module, name = normalize(module, name)
    qualname = f"{module}.{name}"
    found = _STANDINS.get(qualname)
    if found is not None:
        return found
    kind = classify_global(module, name)
    if kind == "unsafe":
        raise UnsafePickle([qualname])
    found = _torch_standin(module, name)
    return _opaque_class(qualname) if found is None else found  # a class, so that both REDUCE and NEWOBJ build it


def _torch_standin(module: str, name: str) -> Any:
    """torch's dtypes, storage types, tensor types and qschemes by name; None for anything else."""
    if module == "torch" and name in TORCH_DTYPE_ATTRS:
        return TORCH_DTYPE_ATTRS[name]
    if module in ("torch", "torch.cuda") and name.endswith("Storage"):
        return _StorageType(_storage_dtype(name))
    if module in ("torch", "torch.cuda", "torch.sparse", "torch.cuda.sparse") and name.endswith("Tensor"):
        return _TensorClass
    if module == "torch" and (name.startswith(("per_tensor", "per_channel")) or name.islower()):
        return name  # dtypes beyond the table (int4, quint8 ...) and qschemes, by name
    return None


_DTYPE_NAMES = frozenset(TORCH_DTYPE_ATTRS.values())


def storage_persistent_load(pid: Any) -> Any:
    """torch's persistent ids: ('storage', storage type, key, location, numel[, view_metadata])."""
    # the common case first: one call per tensor in a checkpoint
    if _is_plain_storage_id(pid):
        stype, key, location = pid[1], pid[2], pid[3]
        if type(key) is not str or type(location) is not str:
            key, location = bounded_str(key, 1000), bounded_str(location)
        return StorageRef(key, stype.dtype, location, pid[4] * stype.itemsize, stype.untyped)
    if isinstance(pid, tuple) and pid:
        tag = pid[0].decode("ascii", "replace") if isinstance(pid[0], bytes) else pid[0]
        if tag == "storage" and len(pid) >= 5:
            return _other_storage_id(*pid[1:5])
        if tag == "module":
            return _opaque_class("torch.nn.Module(source)")(*pid[1:2])
    raise CorruptPickle(f"persistent id that is not a storage: {bounded_repr(pid, 80)}")


def _is_plain_storage_id(pid: Any) -> bool:
    """('storage', a storage type, key, location, a count >= 0, ...): what torch.save writes."""
    return (type(pid) is tuple and len(pid) >= 5 and type(pid[1]) is _StorageType
            and type(pid[4]) is int and pid[4] >= 0 and pid[0] == "storage")  # fmt: skip


def _other_storage_id(stype: Any, key: Any, location: Any, numel: Any) -> StorageRef:
    """A storage id in a spelling other writers use (a bytes tag, the dtype's own name), or CorruptPickle."""
    if isinstance(stype, _StorageType):
        dtype, untyped = stype.dtype, stype.untyped
    elif isinstance(stype, str) and stype in _DTYPE_NAMES:
        dtype, untyped = stype, False  # some writers name the dtype itself
    else:
        raise CorruptPickle(f"storage persistent id with an unknown storage type {bounded_repr(stype, 60)}")
    if not isinstance(numel, int) or numel < 0:
        raise CorruptPickle(f"storage {bounded_repr(key, 40)} has a bad element count {bounded_repr(numel, 40)}")
    return StorageRef(bounded_str(key, 1000), dtype, bounded_str(location),
                      numel * (1 if untyped else dtype_info(dtype).itemsize), untyped)  # fmt: skip


def _enum_member_getattr(cls: Any, name: Any) -> Any:
    """`getattr(EnumClass, "MEMBER")`, as Python 3.11.0-3.11.x pickled enum members: the class must be a
    benign stand-in and the name a plain identifier, or it is refused. Nothing real is looked up."""
    if (isinstance(cls, type) and issubclass(cls, Opaque) and type(name) is str and name.isidentifier()
            and not name.startswith("_")):  # fmt: skip
        return _opaque_class(f"{cls.qualname}.{name}")()
    raise UnsafePickle([f"builtins.getattr (applied to {bounded_repr(cls, 60)}, {bounded_repr(name, 40)})"])


def _restore_type_tag(value: Any, type_str: Any = None) -> Any:
    return value


def _build_list(data: Any = ()) -> list:
    return list(data) if isinstance(data, (list, tuple)) else [data]


# torch.jit._pickle helpers (TorchScript archives only): they rebuild lists and drop type tags.
_TORCHSCRIPT_STANDINS: dict[str, Any] = {
    "torch.jit._pickle.restore_type_tag": _Call(_restore_type_tag),
    "torch.jit._pickle.build_tensor_from_id": _Call(_restore_type_tag),
    **{f"torch.jit._pickle.build_{k}list": _Call(_build_list) for k in ("int", "tensor", "double", "bool")},
}


def torchscript_standin(module: str, name: str) -> Any:
    """What a TorchScript archive's `__torch__.*` class or `torch.jit._pickle` helper decodes to: a
    record of the module's attributes (its tensors are walked like a state dict), or the plain list."""
    if not is_torchscript_global(module, name):
        raise UnsafePickle([f"{module}.{name}"])
    qualname = f"{module}.{name}"
    return _TORCHSCRIPT_STANDINS.get(qualname) or _opaque_class(qualname)


# Classes a framework pickles into its own checkpoint files and imports itself when it resumes
# (torch.load(weights_only=False) in its loader). Outside torch's allowlist, so a file naming them is still
# UNSAFE_PICKLE; but when they are all it names, its tree is decoded with each one as a plain record (never
# imported), so that the framework's own counters in it can be read. Each entry says what it is.
FRAMEWORK_RECORDS: dict[str, dict[str, str]] = {
    "deepspeed": {
        "deepspeed.runtime.fp16.loss_scaler.LossScaler": "ZeRO's static loss scaler, in every optim_states file",
        "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler": "ZeRO's dynamic loss scaler (fp16)",
        "deepspeed.runtime.zero.config.ZeroStageEnum": "the ZeRO stage, an enum",
        "deepspeed.utils.tensor_fragment.fragment_address": "a named tuple (numel, start) per parameter fragment",
    },
    "megatron": {
        "argparse.Namespace": "the run's arguments, which Megatron's loader reads back (a plain attribute bag)",
    },
}
_RECORD_CLASSES = {name for table in FRAMEWORK_RECORDS.values() for name in table}


def framework_records(unsafe: list[str]) -> frozenset[str] | None:
    """The globals to decode as records when every unsafe one `unsafe` names is a framework's own class
    (FRAMEWORK_RECORDS); None when any other is named (then nothing is decoded)."""
    names = frozenset(unsafe)
    return names if names <= _RECORD_CLASSES else None


# Globals that run code in general but are safe with arguments the unpickler checks at each call; the
# framework classes above are records here, built from their arguments and state, never called.
GUARDED: dict[str, Any] = {
    "builtins.getattr": _enum_member_getattr,
    **{name: _opaque_class(name) for name in _RECORD_CLASSES},
}


class RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, persistent_load: Callable[[Any], Any] | None = None,
                 guarded: frozenset[str] = frozenset(), torchscript: bool = False) -> None:  # fmt: skip
        super().__init__(file, fix_imports=False, encoding="latin1")
        # set on the instance, the C unpickler calls it directly: no forwarding frame per tensor
        self.persistent_load = persistent_load or storage_persistent_load  # type: ignore[method-assign]
        self.guarded = guarded
        self.torchscript = torchscript  # inside a TorchScript archive: __torch__.* classes are records

    def find_class(self, module: str, name: str) -> Any:
        if self.torchscript and is_torchscript_global(module, name):
            return torchscript_standin(module, name)
        if self.guarded:
            qualname = ".".join(normalize(module, name))  # protocol 2 writes __builtin__ for builtins
            if qualname in self.guarded:
                return GUARDED[qualname]
        return standin_for(module, name)


def load_from(file: Any, persistent_load: Callable[[Any], Any] | None = None,
              guarded: frozenset[str] = frozenset(), torchscript: bool = False) -> Any:  # fmt: skip
    """Decode the next pickle from an open binary file (positioned at its start). Callers scan first.

    `guarded`: names from GUARDED that this caller accepts with their arguments checked per call.
    """
    try:
        return RestrictedUnpickler(file, persistent_load, guarded, torchscript).load()
    except (UnsafePickle, CorruptPickle):
        raise
    except RecursionError:
        raise CorruptPickle("pickle nests too deeply to decode") from None
    except Exception as exc:  # noqa: BLE001 - anything a hostile pickle provokes is "corrupt"
        raise CorruptPickle(f"{type(exc).__name__}: {exc}"[:300]) from None


def restricted_load(data: bytes, persistent_load: Callable[[Any], Any] | None = None, *,
                    scan: PickleScan | None = None, guarded: frozenset[str] = frozenset(),
                    torchscript: bool = False) -> Any:  # fmt: skip
    """Decode one pickle into plain data with TensorInfo (name "") in place of tensors.

    Raises UnsafePickle (listing every global outside the allowlist, found by the static scan
    before anything is decoded, except `guarded` ones, whose every call is checked) or CorruptPickle.
    """
    if scan is None:
        scan = scan_pickle(data)
    unsafe = [g for g in scan.unsafe if g.qualname not in guarded]
    if unsafe:
        raise UnsafePickle([g.qualname for g in unsafe])
    if scan.error is not None:
        raise CorruptPickle(scan.error)
    return load_from(prefetched(data), persistent_load, guarded, torchscript)


class _DecodingUnpickler(RestrictedUnpickler):
    """The restricted unpickler as pickle_scan.scan_decoding runs it: every global it is asked for is noted in
    `asked` before it answers (and refuses what is not allowed), so that one pass judges and decodes."""

    def __init__(self, file: Any, persistent_load: Callable[[Any], Any] | None, torchscript: bool) -> None:
        super().__init__(file, persistent_load, torchscript=torchscript)
        self.asked: list[tuple[str, str]] = []

    def find_class(self, module: str, name: str) -> Any:
        self.asked.append((module, name))
        return super().find_class(module, name)


def scan_and_load(data: bytes, persistent_load: Callable[[Any], Any] | None = None,
                  torchscript: bool = False) -> tuple[PickleScan, Any]:  # fmt: skip
    """The first pickle of `data` scanned and, when it names nothing outside the allowlist, decoded in the same
    pass of the C unpickler (pickle_scan.scan_decoding): (its scan, the tree or NOT_DECODED). NOT_DECODED
    leaves the general way to the caller (restricted_load after the scan's findings); `persistent_load` may
    then hold what the refused pass met."""
    return scan_decoding(data, lambda file: _DecodingUnpickler(file, persistent_load, torchscript))


def _slots(cls: type, *names: str) -> tuple[Any, ...]:
    """The slot descriptors of `cls` (defined on the class itself) the compiled pass sets or reads."""
    return tuple(vars(cls)[name] for name in names)


# What the compiled pass builds itself, exactly as _rebuild_tensor does: (the stand-in, TensorInfo, its 7 slots in
# __init__'s order, the default group, the empty name; StorageRef and the key and dtype slots it reads).
NATIVE_FAST = (
    _RebuildTensor,
    TensorInfo,
    (*_slots(TensorInfo, "name", "dtype", "shape", "stride", "storage_key", "storage_offset", "group"),
     TensorInfo._specs["group"].default, ""),
    (StorageRef, *_slots(StorageRef, "key", "dtype")),
)  # fmt: skip
# torch.Size's stand-in, whose REDUCE on a tuple the compiled pass answers itself (_size returns that very tuple)
NATIVE_SIZE = _STANDINS["torch.Size"]
# A StorageCollector's first branch, done by the compiled pass: (StorageRef and its slots in __init__'s order,
# _StorageType and its dtype, untyped and itemsize slots); the caller adds the collector's dict, prefix and step.
NATIVE_STORAGE = (
    (StorageRef, *_slots(StorageRef, "key", "dtype", "location", "nbytes", "untyped")),
    _StorageType,
    _slots(_StorageType, "dtype", "untyped", "itemsize"),
)


def native_scan_and_load(data: bytes, persistent_load: Callable[[Any], Any] | None = None, torchscript: bool = False,
                         storages: tuple | None = None) -> tuple[PickleScan, Any] | None:  # fmt: skip
    """scan_and_load's answer from the compiled pass (pickle_scan.native_decoding), or None: not built, or
    declined. After None, `persistent_load` may hold what the declined pass met: start the pure way afresh.
    `storages`: persistent_load's first branch for the pass to take itself (StorageCollector.native_storages)."""
    finder = _DecodingUnpickler(prefetched(b""), persistent_load, torchscript)
    return native_decoding(data, finder.find_class, finder.persistent_load, (*NATIVE_FAST, storages, NATIVE_SIZE))
