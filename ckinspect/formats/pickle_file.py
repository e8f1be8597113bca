"""Plain pickle files (.pkl, or a .pt that is neither a torch zip nor a legacy torch file).

Scanned, never loaded by pickle: the static scan names every global; only when all of them are
allowed or benign (and the file is of a size we can hold) is it decoded by the restricted
unpickler, to list what it holds.
"""

from __future__ import annotations

import os
from pathlib import Path

from ckinspect.formats.joblib_walk import JoblibError, JoblibStream, names_joblib, walk_joblib
from ckinspect.formats.opening import reading
from ckinspect.formats.pickle_findings import PLAIN_PICKLE_LOAD, check_views, decode, record_globals, set_tree
from ckinspect.formats.pickle_scan import scan_file, scan_stream
from ckinspect.formats.tree import no_gc
from ckinspect.io.reader import PositionedReader
from ckinspect.io.remote import as_path
from ckinspect.model import Checkpoint, StorageInfo, TensorInfo

MAX_DECODE_BYTES = 256 << 20  # larger plain pickles are scanned only: decoding holds the whole object tree


@no_gc()  # tens of thousands of small objects without cycles: collector passes are pure overhead
def read_pickle(path: str | os.PathLike[str], reader: PositionedReader | None = None) -> Checkpoint:
    """Scan a plain pickle (decoded only when every global is allowed or benign). Never raises for bad content:
    problems become CORRUPT / UNSAFE_PICKLE / ALLOWLIST_NEEDED findings; OSError only if it cannot be opened."""
    path = as_path(path)  # a URL stays one: its bytes come from `reader`
    with reading(path, "pickle", reader) as (ckpt, opened):
        size = opened.size
        if size == 0:
            ckpt.add("CORRUPT", f"{path.name} is empty")
            return ckpt
        if size > MAX_DECODE_BYTES:  # scanned a window at a time, never decoded: memory stays flat
            return _scan_and_decode(ckpt, None, path, size, scan_file(opened, 0, size))
        data = opened.read_at(0, size)
    return _scan_and_decode(ckpt, data, path, size, scan_stream(data))


def _scan_and_decode(ckpt: Checkpoint, data, path: Path, size: int, scans) -> Checkpoint:
    where = path.name
    if scans[0].error is not None and size <= MAX_DECODE_BYTES and names_joblib(data, scans[0].end):
        return _read_joblib(ckpt, data, path, scans)
    unsafe = record_globals(ckpt, [g for s in scans for g in s.globals], where, data, PLAIN_PICKLE_LOAD)
    first = scans[0]
    if first.error is not None:
        ckpt.add("CORRUPT", f"{where}: not a readable pickle: {first.error}")
        return ckpt
    ckpt.metadata["pickles"] = _readable(scans)
    if unsafe or data is None:
        return ckpt
    tree = decode(ckpt, data[first.start : first.end], first, where)
    set_tree(ckpt, tree)
    return ckpt


def _readable(scans) -> int:
    return sum(1 for s in scans if s.error is None)


def _read_joblib(ckpt: Checkpoint, data, path: Path, scans) -> Checkpoint:
    """A pickle that stops where joblib's raw array blocks begin: walked as joblib writes it."""
    try:
        stream = walk_joblib(data)
    except JoblibError as exc:
        why = f"a joblib pickle, but its array blocks do not read as joblib writes them: {exc}"
        ckpt.add("CORRUPT", f"{path.name}: {why}")
        record_globals(ckpt, [g for s in scans for g in s.globals], path.name)
        return ckpt
    _adopt_joblib(ckpt, stream, path)
    return ckpt


def _adopt_joblib(ckpt: Checkpoint, stream: JoblibStream, path: Path) -> None:
    """A joblib stream: its globals judged like any pickle's, its plain arrays listed as tensors in place."""
    ckpt.metadata["joblib_arrays"] = len(stream.blocks)
    record_globals(ckpt, stream.globals, path.name)
    for index, block in enumerate(stream.blocks):
        dtype = block.tensor_dtype
        if dtype is None:
            continue
        key = f"joblib/{index}"
        shape = block.shape
        stride = _contiguous_strides(shape[::-1])[::-1] if block.fortran else _contiguous_strides(shape)
        ckpt.storages[key] = StorageInfo(key, dtype, block.nbytes, path, block.offset)
        ckpt.tensors.append(TensorInfo(f"joblib_arrays.{index}", dtype, shape, stride, key, 0, "other"))
    if stream.end < ckpt.file_bytes:
        ckpt.metadata["trailing_bytes"] = ckpt.file_bytes - stream.end
    check_views(ckpt)


def _contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
