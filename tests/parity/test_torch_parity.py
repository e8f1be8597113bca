"""The differential harness: each case of torch.save's option space (tests/parity/torch_cases.py) is written
with the installed torch, read back with torch.load and with ckinspect, and the two must agree value for
value: names, dtypes, shapes, strides, storage offsets, the bytes of every element, NaN and Inf counts, the
findings (none but CRC_NOT_RECORDED for a save without CRCs), diff against a little-endian protocol-2 save of
the same tensors (identical exactly where torch loads equal bytes) and against a changed copy (changed), and
convert to safetensors (or the named note where safetensors has no such dtype) and to .pth, both read back
by torch.

The CI share (a few hundred cases) runs in the core suite; the whole matrix by hand:

    CKINSPECT_PARITY_FULL=1 python -m pytest -p no:cacheprovider -n 2 -q tests/parity
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.utils.serialization as serialization
from numpy.lib.stride_tricks import as_strided

from ckinspect.analysis.diff import diff_checkpoints
from ckinspect.analysis.scan import scan_values
from ckinspect.dtypes import DTYPES, SAFETENSORS_DTYPES, dtype_info
from ckinspect.formats import open_checkpoint
from ckinspect.io.blobs import Blobs
from ckinspect.io.values import raw_blocks
from ckinspect.model import Checkpoint, TensorInfo
from ckinspect.ops.convert import convert
from ckinspect.vocab import CkinspectError
from tests.parity import torch_cases as tc

pytestmark = pytest.mark.usefixtures("pickle_paths")  # on the compiled pickle pass and the pure path

CASES = tc.full_matrix() if os.environ.get("CKINSPECT_PARITY_FULL") else tc.ci_share()
FLOATING = (*tc.FLOATS, *tc.FLOAT8, *tc.COMPLEX)
IN_SAFETENSORS = frozenset(SAFETENSORS_DTYPES.values())
IN_TORCH_OUTPUT = frozenset(set(tc.SAVEABLE_DTYPES) - set(tc.QUANTIZED))  # quantized: no scale/zero point kept


def test_pinned_to_the_installed_torch():
    """A torch upgrade that adds a dtype or a save option fails here, loudly: add its cases first."""
    assert torch.__version__.split("+")[0] == tc.PINNED_TORCH
    dtypes = sorted({str(v).removeprefix("torch.") for v in vars(torch).values() if isinstance(v, torch.dtype)})
    assert dtypes == sorted((*tc.SAVEABLE_DTYPES, *tc.UNSAVEABLE_DTYPES))
    assert tuple(inspect.signature(torch.save).parameters) == tc.SAVE_PARAMETERS
    assert {k.removeprefix("save."): v for k, v in serialization.config.get_config_copy().items()
            if k.startswith("save.")} == tc.SAVE_CONFIG  # fmt: skip
    for name in dtypes:  # ckinspect knows every one of them, at torch's own size
        assert name in DTYPES, name
        assert dtype_info(name).itemsize == getattr(torch, name).itemsize, name


@pytest.mark.parametrize("dtype", tc.LEGACY_UNLOADABLE)
def test_torch_cannot_load_its_own_legacy_saves_of_untyped_dtypes(dtype: str, tmp_path: Path) -> None:
    """Why the matrix has no legacy cases of these: torch.load fails on them. When an upgrade fixes it,
    this fails: add the cases back to the matrix."""
    path = tmp_path / "legacy.pt"
    tc.write_case(tc.Case(dtype, format="legacy"), path)
    with pytest.raises(AttributeError, match="UntypedStorage"):
        torch.load(path, weights_only=False)


def test_the_ci_share_covers_every_axis():
    share = tc.ci_share()
    assert 200 <= len(share) <= 400
    for axis, values in (("dtype", tc.SAVEABLE_DTYPES), ("view", tc.VIEWS), ("byteorder", tc.BYTE_ORDERS),
                         ("protocol", tc.PROTOCOLS), ("format", tc.FORMATS), ("alignment", tc.ALIGNMENTS),
                         ("crc", tc.CRCS)):  # fmt: skip
        assert {getattr(c, axis) for c in share} == set(values), axis


def test_big_endian_archives_are_what_torch_loads_back():
    """The generator's big-endian files are real: torch.load swaps each typed storage back to the values
    saved (an UntypedStorage it never swaps, which ckinspect must match too: see torch_bytes)."""
    obj = {"f": tc.base_values("float32"), "c": tc.base_values("complex64"), "h": tc.base_values("bfloat16")}
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"ckinspect-big-{os.getpid()}.pt"
    try:
        tc.save_big_endian(obj, path)
        back = torch.load(path, weights_only=True)
        assert {k: torch_bytes(v) for k, v in back.items()} == {k: torch_bytes(v) for k, v in obj.items()}
        assert open_checkpoint(path).metadata["byteorder"] == "big"
    finally:
        path.unlink(missing_ok=True)


def torch_bytes(t: torch.Tensor) -> bytes:
    """The bytes of a tensor's elements in C order, as torch holds them in memory (read through numpy, as
    torch has no copy kernel for the bits and float4 types)."""
    bits = dtype_info(str(t.dtype).removeprefix("torch.")).bits
    storage = np.frombuffer(bytes(t.untyped_storage()), dtype=np.uint8)
    if bits % 8:  # quint4x2, quint2x4: packed two or four a byte, contiguous
        start = t.storage_offset() * bits // 8
        return storage[start : start + t.numel() * bits // 8].tobytes()
    item = t.element_size()
    elements = storage.view(f"V{item}")
    view = as_strided(elements[t.storage_offset() :], t.shape, [s * item for s in t.stride()], writeable=False)
    return np.ascontiguousarray(view).tobytes()


def ckinspect_bytes(ckpt: Checkpoint, t: TensorInfo) -> bytes:
    """The same, as ckinspect reads them (io.values: any view, big-endian storages swapped as torch swaps)."""
    storage = ckpt.storages[t.storage_key]
    if t.bits % 8:  # packed: read as the bytes the (contiguous) view occupies
        t = TensorInfo(t.name, "uint8", (t.nbytes,), (1,), t.storage_key, t.byte_offset)
    with Blobs() as blobs:
        return b"".join(bytes(block.data.cast("B")) for block in raw_blocks(blobs, storage, t, 1 << 16))


def torch_counts(t: torch.Tensor) -> tuple[int, int]:
    """(NaN, non-finite) elements as torch counts them (complex: either part)."""
    if t.dtype in (torch.complex32,):
        t = t.to(torch.complex64)
    elif t.dtype.itemsize == 1 and t.is_floating_point():
        t = t.float()  # every float8 value is a float32 value; torch.isinf has no float8 kernel
    return int(torch.isnan(t).sum()), int((~torch.isfinite(t)).sum())


def read_as_torch(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=False, map_location="cpu")


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """dtype -> a little-endian, protocol-2, default-option save of each view: what diff compares against."""
    folder = tmp_path_factory.mktemp("parity-references")
    made: dict[tuple[str, str], tuple[Path, Checkpoint]] = {}

    def reference(case: tc.Case) -> tuple[Path, Checkpoint]:
        key = (case.dtype, case.view)
        if key not in made:
            path = folder / f"{case.dtype}-{case.view}.pt"
            tc.write_case(tc.Case(case.dtype, case.view), path)
            made[key] = (path, open_checkpoint(path))
        return made[key]

    return reference


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: tc.Case, tmp_path: Path, references) -> None:
    path = tmp_path / "case.pt"
    tc.write_case(case, path)
    expected = read_as_torch(path)
    ckpt = open_checkpoint(path)

    errors = [f.message for f in ckpt.findings if f.severity == "error"]
    assert errors == []
    assert any(f.code == "CRC_NOT_RECORDED" for f in ckpt.findings) == (case.format == "zip" and not case.crc)
    tensors = {t.name: t for t in ckpt.tensors}
    assert sorted(tensors) == sorted(expected)
    for name, e in expected.items():
        t = tensors[name]
        assert (t.dtype, t.shape, t.stride, t.storage_offset) == (
            str(e.dtype).removeprefix("torch."),
            tuple(e.shape),
            e.stride(),
            e.storage_offset(),
        )
        assert ckinspect_bytes(ckpt, t) == torch_bytes(e), name

    scan = scan_values(ckpt)
    assert [f.message for f in scan.findings if f.code == "CORRUPT"] == []
    for name, e in expected.items():
        if case.dtype in FLOATING:
            s = scan.stats[name]
            assert (s.nan, s.nonfinite) == torch_counts(e), name
        else:
            assert name not in scan.stats
    nonfinite = {f.tensor for f in scan.findings if f.code == "NONFINITE"}
    assert nonfinite == {n for n, e in expected.items() if case.dtype in FLOATING and torch_counts(e)[1]}

    _check_diff(case, path, ckpt, expected, references, tmp_path)
    _check_convert(case, path, expected, tmp_path)


def _check_diff(case, path, ckpt, expected, references, tmp_path) -> None:
    ref_path, ref = references(case)
    same = {k: torch_bytes(v) for k, v in read_as_torch(ref_path).items()} == {
        k: torch_bytes(v) for k, v in expected.items()}  # fmt: skip
    result = diff_checkpoints(ref, ckpt)
    assert result.identical == same, (result.changed, result.unreadable)
    if not same:
        return
    changed = tc.case_tensors(case, changed=True)
    if changed["w"].is_quantized:
        return  # no raw element to set; the dtype axis covers their bytes
    other = tmp_path / "changed.pt"
    tc.write_case(case, other, changed)
    assert "w" in {c.name for c in diff_checkpoints(ckpt, open_checkpoint(other)).changed}


def _check_convert(case, path, expected, tmp_path) -> None:
    from safetensors.torch import load_file

    for out, holds in ((tmp_path / "out.safetensors", IN_SAFETENSORS), (tmp_path / "out.pth", IN_TORCH_OUTPUT)):
        fmt = "safetensors" if out.suffix == ".safetensors" else "torch-zip"
        held = {n for n, e in expected.items() if str(e.dtype).removeprefix("torch.") in holds}
        left_out = sorted(set(expected) - held)
        if left_out:
            with pytest.raises(CkinspectError, match=rf"^refused: {fmt} cannot hold {len(left_out)} tensor\(s\)"):
                convert(path, out, announce=lambda _: None, refuse_left_out=True)
            assert not out.exists()
        if not held:
            with pytest.raises(CkinspectError, match=f"^nothing to write: every tensor was left out, as the {fmt}"):
                convert(path, out, announce=lambda _: None)
            assert not out.exists()
            continue
        result = convert(path, out, announce=lambda _: None)
        loaded = load_file(out) if fmt == "safetensors" else read_as_torch(out)
        assert sorted(loaded) == sorted(held)
        for name in held:
            assert torch_bytes(loaded[name]) == torch_bytes(expected[name]), name
        assert sorted(result.left_out) == left_out
        assert any(f"{len(left_out)} tensor(s) left out" in note for note in result.notes) == bool(left_out)
