"""Element types by name, and the names each format uses for them. No torch, no numpy import."""

from __future__ import annotations

from ckinspect.record import Record


class DType(Record):
    name: str  # torch's name without "torch.": float32, bfloat16 ...
    itemsize: int  # bytes to read one element (1 for the sub-byte types: raw byte views)
    kind: str  # "float", "int", "uint", "bool", "complex", "quantized", "bits" ("opaque": unknown)
    numpy: str | None  # numpy dtype string to view raw little-endian bytes; None where numpy has none (bf16, fp8)
    # bits per element: what sizes are counted in. 4 and 6 for safetensors' F4 and F6 (packed); 0: itemsize * 8
    bits: int = 0

    def __post_init__(self) -> None:
        self.bits = self.bits or self.itemsize * 8

    @property
    def is_floating(self) -> bool:
        return self.kind == "float"


_ALL = [
    DType("float64", 8, "float", "<f8"),
    DType("float32", 4, "float", "<f4"),
    DType("float16", 2, "float", "<f2"),
    DType("bfloat16", 2, "float", None),  # viewed as uint16 and widened to float32 by hand
    DType("float8_e4m3fn", 1, "float", None),
    DType("float8_e5m2", 1, "float", None),
    DType("float8_e8m0fnu", 1, "float", None),
    DType("float8_e4m3fnuz", 1, "float", None),  # AMD's fp8 variants, safetensors F8_E4M3FNUZ / F8_E5M2FNUZ
    DType("float8_e5m2fnuz", 1, "float", None),
    DType("float6_e2m3fn", 1, "float", None, bits=6),  # safetensors F6_E2M3, F6_E3M2 and F4: packed, no padding
    DType("float6_e3m2fn", 1, "float", None, bits=6),
    DType("float4_e2m1fn", 1, "float", None, bits=4),
    DType("float4_e2m1fn_x2", 1, "float", None),  # torch's: two fp4 values per byte, counted as one element
    DType("complex128", 16, "complex", "<c16"),
    DType("complex64", 8, "complex", "<c8"),
    DType("complex32", 4, "complex", None),  # two float16 halves; numpy has no complex32
    # torch's quantized types: raw integers (scale and zero point live in the pickle); quint4x2 and
    # quint2x4 pack two and four elements per byte, and torch sizes their storages so
    DType("qint8", 1, "quantized", "|i1"),
    DType("quint8", 1, "quantized", "|u1"),
    DType("qint32", 4, "quantized", "<i4"),
    DType("quint4x2", 1, "quantized", None, bits=4),
    DType("quint2x4", 1, "quantized", None, bits=2),
    # torch's bits types: opaque bit patterns, one element per itemsize (bits1x8 is one byte of 8 bits)
    DType("bits1x8", 1, "bits", "|u1"),
    DType("bits2x4", 1, "bits", "|u1"),
    DType("bits4x2", 1, "bits", "|u1"),
    DType("bits8", 1, "bits", "|u1"),
    DType("bits16", 2, "bits", "<u2"),
    DType("int64", 8, "int", "<i8"),
    DType("int32", 4, "int", "<i4"),
    DType("int16", 2, "int", "<i2"),
    DType("int8", 1, "int", "|i1"),
    DType("uint64", 8, "uint", "<u8"),
    DType("uint32", 4, "uint", "<u4"),
    DType("uint16", 2, "uint", "<u2"),
    DType("uint8", 1, "uint", "|u1"),
    DType("bool", 1, "bool", "|b1"),
    # torch's uint1..uint7 and int1..int7: torch gives each itemsize 1 and cannot save them (yet)
    *(DType(f"{sign}int{n}", 1, sign + "int", None) for sign in ("u", "") for n in range(1, 8)),
]

DTYPES: dict[str, DType] = {d.name: d for d in _ALL}

# torch.save names storages by class: torch.FloatStorage, torch.BFloat16Storage, ...
TORCH_STORAGE_CLASSES: dict[str, str] = {
    "DoubleStorage": "float64",
    "FloatStorage": "float32",
    "HalfStorage": "float16",
    "BFloat16Storage": "bfloat16",
    "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64",
    "LongStorage": "int64",
    "IntStorage": "int32",
    "ShortStorage": "int16",
    "CharStorage": "int8",
    "ByteStorage": "uint8",
    "BoolStorage": "bool",
    "Float8_e4m3fnStorage": "float8_e4m3fn",
    "Float8_e5m2Storage": "float8_e5m2",
    "UInt16Storage": "uint16",
    "UInt32Storage": "uint32",
    "UInt64Storage": "uint64",
    "ComplexHalfStorage": "complex32",
    "QInt8Storage": "qint8",
    "QUInt8Storage": "quint8",
    "QInt32Storage": "qint32",
    "QUInt4x2Storage": "quint4x2",
    "QUInt2x4Storage": "quint2x4",
}

# torch.float32 and friends as pickled attribute names (torch.float32 is pickled as GLOBAL torch float32)
TORCH_DTYPE_ATTRS: dict[str, str] = {
    **{d.name: d.name for d in _ALL},
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "cfloat": "complex64",
    "cdouble": "complex128",
    "chalf": "complex32",
}

SAFETENSORS_DTYPES: dict[str, str] = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
    "F6_E2M3": "float6_e2m3fn",
    "F6_E3M2": "float6_e3m2fn",
    "F4": "float4_e2m1fn",
    "C64": "complex64",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
}


def dtype_info(name: str) -> DType:
    """The DType for a name; unknown names count as 1-byte opaque data rather than failing."""
    found = DTYPES.get(name)
    if found is None:
        return DType(name, 1, "opaque", None)
    return found


# numpy's type codes without the byte order ("f4", "i8", "b1" ...) -> our names: .npy headers, joblib arrays
NUMPY_CODES: dict[str, str] = {
    d.numpy[1:]: d.name for d in _ALL if d.numpy and d.kind in ("float", "int", "uint", "bool", "complex")
}
