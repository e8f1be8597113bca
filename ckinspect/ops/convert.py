"""Convert a checkpoint: resume file -> weights, any safe torch file -> safetensors, legacy -> zip,
DCP folder -> one file; optionally cast floating tensors and keep only some groups.

The input is read by our readers (nothing executed); torch only builds tensors from those bytes
and writes the output through ckinspect.io.atomic. A file whose pickle names code-running globals
(UNSAFE_PICKLE) is refused unless the user passes trust=True, and then `announce` is told exactly
what torch.load call is about to run and which globals it will call, before it runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckinspect.io.reader import FileReader
from ckinspect.io.zipdir import ZipError, ZipMember, read_directory, read_member
from ckinspect.model import Checkpoint, Finding, StorageInfo, TensorInfo
from ckinspect.ops.rawtensors import SKIP, Built, StorageSource, count_values
from ckinspect.optional import require_torch
from ckinspect.record import Record, field
from ckinspect.vocab import NOT_WHOLE_CODES, CkinspectError

DTYPE_FLAGS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# Formats whose tree is no state dict (TorchScript module records, NumPy archives): converted by tensor name.
FLAT_STATE_FORMATS = ("torchscript", "numpy")


class ConvertResult(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    source: Path
    out: Path
    source_format: str
    out_format: str
    tensors: int = 0
    out_bytes: int = 0
    subtree: str = ""  # the part of the tree written, when --only narrowed it to one ("model")
    cast: int = 0
    left_out: list[str] = field(default_factory=list)  # tensors whose dtype the output format cannot hold
    notes: list[str] = field(default_factory=list)
    trusted_load: str = ""  # the torch.load call that was run under --trust


def convert(
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    dtype: str | None = None,
    only: list[str] | None = None,
    trust: bool = False,
    announce: Callable[[str], None] = print,
    refuse_left_out: bool = False,
) -> ConvertResult:
    """Write `source` as `out`. A tensor whose dtype the output format cannot hold (safetensors has no
    complex128, quantized or bits types) is left out and named in a note, and `left_out` lists them;
    `refuse_left_out=True` refuses the whole conversion instead, in one line naming them."""
    from ckinspect.formats import open_checkpoint

    source, out = Path(source), Path(out)
    _check_paths(source, out)
    ckpt = open_checkpoint(source)
    result = ConvertResult(source, out, ckpt.format, "safetensors" if out.suffix == ".safetensors" else "torch-zip")
    unsafe = _unsafe_unless_trusted(ckpt, source, trust)
    groups = _groups(ckpt)
    _check_only(only)
    tools = _Tools.choose(result, unsafe, dtype)  # torch only now: a refused file never pays for it
    select = _Selection(result, groups, only, tools.target, writable_dtypes(result.out_format))
    if refuse_left_out:
        _refuse_unwritable(ckpt, select)
    built = _trusted_build(ckpt, unsafe, select, announce) if unsafe else _safe_build(ckpt, select, tools)
    _note_dropped_and_composites(result, built)
    _note_left_out(result)
    tree, names = _narrowed(built, result) if only else (built.tree, built.tensors)
    if not names:
        raise CkinspectError(_nothing_to_write(result, groups, only))
    if dtype and result.cast:
        result.notes.append(
            f"cast {result.cast} floating tensor(s) to {DTYPE_FLAGS[dtype]} (0-dim scalars such as step counters kept)"
        )
    if result.out_format == "safetensors":
        result.out_bytes = _write_safetensors(result, tree, names, tools)
    else:
        from ckinspect.ops.torchio import save_torch

        result.out_bytes = save_torch(out, tree, built.fills)
    result.tensors = len(names)
    return result


def _check_only(only: list[str] | None) -> None:
    unknown = sorted(set(only or ()) - {"model", "optimizer", "rng", "other"})
    if unknown:
        raise CkinspectError(f"--only {', '.join(unknown)}: groups are model, optimizer, rng, other")


def _note_dropped_and_composites(result: ConvertResult, built: Any) -> None:
    """A note per value left out while building, and per composite tensor written as its parts."""
    for path, why in built.dropped:
        result.notes.append(f"{path}: {why}; left out")
    for path, composite in built.composites:
        written = [f"{path}.{part}" for part in composite.parts if f"{path}.{part}" not in result.left_out]
        if written:  # a part left out is named in the left-out note, not here
            result.notes.append(f"{path} ({composite.layout}, shape {list(composite.shape)}) written as its parts: "
                                f"{', '.join(written)}")  # fmt: skip


def _check_paths(source: Path, out: Path) -> None:
    if out.exists() and out.resolve() == source.resolve():
        raise CkinspectError("OUT must differ from IN")
    if out.is_dir():
        raise CkinspectError(f"{out} is a folder; name the output file (.pth or .safetensors)")


def _unsafe_unless_trusted(ckpt: Checkpoint, source: Path, trust: bool) -> list[Finding]:
    """The UNSAFE_PICKLE findings (empty for a safe file); refuses a damaged or tensor-less file, and an
    unsafe one unless trusted."""
    unsafe = [f for f in ckpt.findings if f.code == "UNSAFE_PICKLE"]
    if not unsafe:
        _refuse_unconvertible(ckpt, source)
    elif not trust:
        called = ", ".join(sorted({g for f in unsafe for g in _globals_in(f, ckpt)})) or unsafe[0].message
        raise CkinspectError(
            f"refused: {source} names globals that run code when loaded ({called}); "
            "nothing was executed. Pass --trust only if you know where this file comes from"
        )
    return unsafe


def _refuse_unconvertible(ckpt: Checkpoint, source: Path) -> None:
    """A safe file that cannot be converted: damaged (salvage it), or of a format that holds no tensors."""
    corrupt = [f for f in ckpt.findings if f.code in NOT_WHOLE_CODES]
    if corrupt:
        raise CkinspectError(f"{source} is damaged ({corrupt[0].message}); try `ckinspect salvage {source} OUT`")
    if ckpt.format in ("unknown", "pickle"):
        raise CkinspectError(f"{source}: format {ckpt.format} holds no tensors this tool can convert")


class _Tools(Record):
    """How tensors are built and written: as RawTensors (safetensors from a file our readers opened needs
    no torch) or as torch tensors (a torch output file, or a trusted torch.load). Same calls on both."""

    tensor_type: Any
    build: Any  # (tree, read, keep=, cast=) -> Built
    write_safetensors: Any  # (out, names, metadata) -> (bytes written, notes)
    target: Any  # the dtype floating tensors are cast to, in the tensor type's own terms; None keeps them

    @staticmethod
    def choose(result: ConvertResult, unsafe: list[Finding], dtype: str | None) -> _Tools:
        if result.out_format == "safetensors" and not unsafe:
            from ckinspect.ops.rawtensors import RawTensor, raw_tensors, raw_to_safetensors

            return _Tools(RawTensor, raw_tensors, raw_to_safetensors, DTYPE_FLAGS[dtype] if dtype else None)
        torch = require_torch("loading a trusted file (--trust)" if unsafe else "writing a torch file")
        from ckinspect.ops.torchio import rebuild_tree, tensors_to_safetensors, torch_dtype

        target = torch_dtype(DTYPE_FLAGS[dtype]) if dtype else None
        return _Tools(torch.Tensor, rebuild_tree, tensors_to_safetensors, target)


def writable_dtypes(out_format: str) -> frozenset[str]:
    """The dtypes an output holds: safetensors' own; for a torch file every torch dtype but the quantized
    ones, whose scale and zero point the reader does not carry over (it lists them, never rebuilds them)."""
    from ckinspect.dtypes import DTYPES, SAFETENSORS_DTYPES

    if out_format == "safetensors":
        return frozenset(SAFETENSORS_DTYPES.values())
    return frozenset(name for name, d in DTYPES.items() if d.kind != "quantized")


class _Selection(Record):
    """Which tensors go into the output (--only groups, dtypes the format holds) and what floating ones
    become (--dtype)."""

    result: ConvertResult
    groups: dict[str, str]
    only: list[str] | None
    target: Any  # the dtype to cast to, or None
    writable: frozenset[str] | None = None  # dtypes the output holds; None: any

    def wanted(self, name: str, info: TensorInfo) -> bool:
        return not self.only or self.groups.get(name, info.group) in self.only

    def keep(self, name: str, info: TensorInfo) -> bool:
        if not self.wanted(name, info):
            return False
        if self.writable is not None and info.dtype not in self.writable:
            self.result.left_out.append(name)
            return False
        return True

    def cast(self, name: str, t: Any) -> Any:
        if self.target is None or not t.is_floating_point() or t.dtype == self.target:
            return t
        if t.dim() == 0:
            return t  # step counters and scalars keep their dtype
        self.result.cast += 1
        return t.to(self.target)


def _unwritable(ckpt: Checkpoint, select: _Selection) -> list[TensorInfo]:
    if select.writable is None:
        return []
    return [t for t in ckpt.tensors if select.wanted(t.name, t) and t.dtype not in select.writable]


def _refuse_unwritable(ckpt: Checkpoint, select: _Selection) -> None:
    unwritable = _unwritable(ckpt, select)
    if unwritable:
        raise CkinspectError(
            f"refused: {select.result.out_format} cannot hold {len(unwritable)} tensor(s) of this file: "
            f"{_named(unwritable)}{_but_why(select.result.out_format)}; nothing was written"
        )


def _named(tensors: list[TensorInfo], shown: int = 5) -> str:
    listed = ", ".join(f"{t.name} ({t.dtype})" for t in tensors[:shown])
    return listed + (f" and {len(tensors) - shown} more" if len(tensors) > shown else "")


# Why a torch file leaves a tensor out (writable_dtypes): a quantized tensor is its integers and a quantizer
QUANTIZER_NOT_WRITTEN = "quantized: ckinspect reads their integers but does not rebuild the scale and zero point"


def _but_why(out_format: str) -> str:
    """What a torch file's left-out note adds (safetensors: the dtype says it all)."""
    return f"; {QUANTIZER_NOT_WRITTEN}" if out_format == "torch-zip" else ""


def _note_left_out(result: ConvertResult) -> None:
    if result.left_out:
        more = len(result.left_out) - 5
        shown = ", ".join(result.left_out[:5]) + (f" and {more} more" if more > 0 else "")
        result.notes.append(
            f"{len(result.left_out)} tensor(s) left out: the {result.out_format} output cannot hold their dtype "
            f"({shown}){_but_why(result.out_format)}; pass --refuse-left-out to refuse instead"
        )


def _nothing_to_write(result: ConvertResult, groups: dict[str, str], only: list[str] | None) -> str:
    if result.left_out:
        return (f"nothing to write: every tensor was left out, as the {result.out_format} output cannot hold "
                f"their dtype ({', '.join(result.left_out[:5])}){_but_why(result.out_format)}")  # fmt: skip
    if only:
        present = sorted(set(groups.values()))
        return (f"nothing to write: no tensors in group(s) {', '.join(only)} "
                f"(this file has {', '.join(present) or 'no tensors at all'})")  # fmt: skip
    if result.notes:  # what was there could not be written (a meta tensor, an object ...): say why
        return f"nothing to write: {result.source} holds no tensor that can be written ({result.notes[0]})"
    return f"nothing to write: {result.source} holds no tensors"


def _trusted_build(ckpt: Checkpoint, unsafe: list[Finding], select: _Selection, announce: Callable[[str], None]):
    """--trust: say exactly what is about to run, then run torch.load on it."""
    import torch

    source = select.result.source
    call = f"torch.load({str(source)!r}, map_location='cpu', weights_only=False)"
    called = ", ".join(sorted(set(_globals_in(unsafe[0], ckpt)))) or "see UNSAFE_PICKLE"
    announce(f"--trust: about to run {call}; its pickle will call: {called}")
    select.result.trusted_load = call
    try:
        loaded = torch.load(source, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - whatever the trusted pickle raised, say it in one line
        raise CkinspectError(f"torch.load of {source} failed: {type(exc).__name__}: {exc}") from exc
    return _built_from_objects(loaded, select.keep, select.cast)


def _safe_build(ckpt: Checkpoint, select: _Selection, tools: _Tools) -> Built:
    """The tree rebuilt from our own reading of the file, tensors from their raw bytes."""
    tree = ckpt.tree if ckpt.tree is not None else {t.name: t for t in ckpt.tensors}
    if ckpt.format in FLAT_STATE_FORMATS:  # module records / arrays: their tensors as one flat state dict
        tree = {t.name: t for t in ckpt.tensors}
        select.result.notes.append(f"{ckpt.format} tensors written as a flat state dict by name; nothing else kept")
    with _StorageReader(ckpt) as reader:
        built = tools.build(tree, reader.read, keep=select.keep, cast=select.cast)
    if built.missing:
        shown = ", ".join(n for n, _ in built.missing[:5])
        count = len(built.missing)
        source = select.result.source
        raise CkinspectError(f"{source}: {count} tensor(s) have no readable bytes ({shown}); try ckinspect salvage")
    return built


def _narrowed(built: Built, result: ConvertResult) -> tuple[Any, list[tuple[str, Any]]]:
    """With --only, the one subtree every kept tensor lies under (if any), names relative to it."""
    tree, names = built.tree, built.tensors
    prefix = _common_subtree(tree, [n for n, _ in names])
    if prefix:
        tree = _get(tree, prefix)
        names = [(n[len(prefix) + 1 :], t) for n, t in names]
        result.subtree = prefix
        result.notes.append(f"wrote the `{prefix}` subtree only (tensor names without the `{prefix}.` prefix)")
    return tree, names


def _write_safetensors(result: ConvertResult, tree: Any, names: list[tuple[str, Any]], tools: _Tools) -> int:
    """Tensors to safetensors; top-level scalars become its metadata, other values are left out (noted)."""
    scalars = _scalars(tree)
    reserved = {"format": "pt", "converted_from": result.source.name}
    metadata = {**{(f"checkpoint_{k}" if k in reserved else k): v for k, v in scalars.items()}, **reserved}
    skipped = count_values(tree, lambda o: isinstance(o, tools.tensor_type)) - len(scalars)
    if skipped > 0:
        result.notes.append(
            f"safetensors holds tensors only: {skipped} other value(s) (hyperparameters, config ...) left out"
        )
    if scalars:
        result.notes.append(f"top-level scalars kept as metadata: {', '.join(sorted(scalars))}")
    out_bytes, shared = tools.write_safetensors(result.out, names, metadata)
    result.notes += shared
    return int(out_bytes)


def _groups(ckpt: Checkpoint) -> dict[str, str]:
    """Tensor name -> group, from the anatomy's layouts."""
    from ckinspect.analysis.anatomy import analyze

    return {t.name: t.group for t in analyze(ckpt).tensors}


def _globals_in(finding, ckpt: Checkpoint) -> list[str]:
    from_msg = [g for g in ckpt.globals if g in finding.message]
    return from_msg or list(ckpt.globals)


class _StorageReader:
    """Raw bytes of a storage, from where the reader says they lie. Each file is opened once (a zip's
    directory parsed once, not once per compressed member); closed on leaving the `with`."""

    def __init__(self, ckpt: Checkpoint) -> None:
        self.ckpt = ckpt
        self._files: dict[Path, Any] = {}
        self._archives: dict[Path, tuple[FileReader, dict[str, ZipMember]] | None] = {}

    def __enter__(self) -> _StorageReader:
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self._files.values():
            handle.close()

    def read(self, info: TensorInfo) -> StorageSource | None:
        """Where the storage's bytes are (read only when the output is written, in bounded chunks), or
        None when they are not all there. A compressed member is inflated (and CRC-checked) whole."""
        storage: StorageInfo | None = self.ckpt.storages.get(info.storage_key)
        if storage is None:
            return None
        path = Path(storage.file)
        if storage.deflated is not None:  # a deflated member: streamed as it is written (io.values)
            return StorageSource(storage) if _inflates_whole(storage) else None
        if storage.extents is not None:  # a tensor in chunks (DCP, sharded): assembled in C order as it is written
            return StorageSource(storage) if storage.extents.whole else None
        if storage.offset is not None:
            handle = self._file(path)
            whole = storage.offset + storage.nbytes <= os.fstat(handle.fileno()).st_size
            return StorageSource(storage) if whole else None
        if storage.member:
            archive = self._archive(path)
            member = None if archive is None else archive[1].get(storage.member)
            if archive is None or member is None:
                return None
            try:
                return StorageSource(data=read_member(archive[0], member, verify=True))
            # a damaged member (bad CRC, unknown method, cut short, a mangled local name): the tensor is missing
            except ZipError:
                return None
        return None

    def _file(self, path: Path) -> Any:
        handle = self._files.get(path)
        if handle is None:
            handle = self._files[path] = open(path, "rb")  # noqa: SIM115 - closed in __exit__
        return handle

    def _archive(self, path: Path) -> tuple[FileReader, dict[str, ZipMember]] | None:
        """The zip's reader and its members by name (the last of a repeated name wins, as it did with zipfile)."""
        if path not in self._archives:
            try:
                handle = self._file(path)
                reader = FileReader(handle.fileno(), os.fstat(handle.fileno()).st_size)
                self._archives[path] = (reader, {m.name: m for m in read_directory(reader)[0]})
            except (ZipError, OSError):  # not a zip, or no readable directory
                self._archives[path] = None
        return self._archives[path]


def _inflates_whole(storage: StorageInfo) -> bool:
    """Whether a deflated member inflates to its declared size and CRC-32, checked before anything is written
    (one streamed pass, memory flat), so a damaged one is a tensor without bytes, named, as a stored one is."""
    from ckinspect.io.blobs import Blobs, UnreadableStorage
    from ckinspect.io.values import inflated_pieces

    try:
        with Blobs() as blobs:
            for _ in inflated_pieces(blobs, storage, 0, storage.nbytes, 1 << 20):
                pass
    except UnreadableStorage:
        return False
    return True


def _built_from_objects(obj: Any, keep, cast):
    """--trust path: the object torch.load returned, walked like the reader's tree."""
    import torch

    built = Built(None)

    def walk(o, path):
        if isinstance(o, torch.Tensor):
            info = TensorInfo(path, str(o.dtype).removeprefix("torch."), tuple(o.shape), tuple(o.stride()), "")
            if not keep(path, info):
                return SKIP
            t = cast(path, o)
            built.tensors.append((path, t))
            return t
        if isinstance(o, dict):
            out = type(o)() if type(o) is not dict and hasattr(type(o), "__setitem__") else {}
            for k, v in o.items():
                c = walk(v, f"{path}.{k}" if path else str(k))
                if c is not SKIP:
                    out[k] = c
            return out
        if isinstance(o, (list, tuple)):
            items = [walk(v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(o)]
            kept = [None if c is SKIP else c for c in items]
            return type(o)(kept) if type(o) in (list, tuple) else kept
        return o

    built.tree = walk(obj, "")
    return built


def _common_subtree(tree: Any, names: list[str]) -> str:
    """The top-level entry that holds every one of these tensors ("" when they span several).

    Only one level deep: `--only optimizer` keeps the whole optimizer state_dict (state and
    param_groups), which is what `optimizer.load_state_dict` wants.
    """
    firsts = {n.split(".", 1)[0] for n in names}
    if len(firsts) != 1 or any("." not in n for n in names):
        return ""
    (first,) = firsts
    return first if isinstance(_get(tree, first), dict) else ""


def _get(tree: Any, dotted: str) -> Any:
    node = tree
    for part in dotted.split("."):
        if isinstance(node, dict):
            match = next((k for k in node if str(k) == part), None)
            if match is None:
                return None
            node = node[match]
        elif isinstance(node, (list, tuple)) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _scalars(tree: Any) -> dict[str, str]:
    if not isinstance(tree, dict):
        return {}
    return {str(k): str(v) for k, v in tree.items() if isinstance(v, (int, float, str, bool))}
