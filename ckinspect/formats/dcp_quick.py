"""The --quick listing of a DCP save from the compiled decoder's columns (dcp_metadata.Columns).

The same listing dcp._Lister makes from the general decoder's records, finding for finding and in the same
order, with the per-chunk work done over arrays: a 70B + AdamW save over 1024 ranks holds 2.2 million chunks
in 2,906 entries. Each sharded tensor's chunks are checked at once (a storage record named, within its data
file, long enough for the chunk); a chunk that fails goes through the _Lister's own checks one by one, which
say what is wrong. Each data file's items are then checked once (sorted, no overlap; the first begins and the
last ends as torch.save writes them). `lister` is a dcp._Lister: the data files it opened, its messages.
"""

from __future__ import annotations

import math

from ckinspect import steps
from ckinspect.formats import dcp_cover
from ckinspect.io.zipdir import zip_ends
from ckinspect.model import StorageInfo, TensorInfo, contiguous_strides

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from ckinspect.formats.dcp_metadata import Columns
    from ckinspect.model import Checkpoint

# what a .metadata that decodes may still get wrong, per entry (as dcp._entries_tree catches them)
MALFORMED = (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError)
_EXACT_NUMEL = 1 << 55  # numel * bits stays within int64 below this


class ColumnListing:
    """Lists the entries of `cols` into `ckpt` through `lister` (see the module's docstring)."""

    def __init__(self, ckpt: Checkpoint, lister: Any, cols: Columns, chunk_name: Callable[..., str]) -> None:
        import numpy as np

        self.np = np
        self.ckpt, self.lister, self.cols, self.chunk_name = ckpt, lister, cols, chunk_name
        # per path id: the data file's size once opened (-1: not opened, outside the folder or missing)
        self.file_size = np.full(len(cols.paths), -1, dtype=np.int64)
        self.opened = np.zeros(len(cols.paths), dtype=bool)
        # the items placed, in the order they were listed: (path ids, offsets, lengths, chunks) arrays
        self.extents: list[tuple[Any, Any, Any, Any]] = []
        self.entry_first: list[int] = []  # first chunk of each entry with chunks, for naming a chunk
        self.entry_fqn: list[str] = []
        self.entry_count: list[int] = []

    def tree(self, index: str, planner_keys: Callable[[Any], Any], place: Callable[..., None]) -> dict[str, Any]:
        ckpt, cols = self.ckpt, self.cols
        planner = cols.planner if isinstance(cols.planner, dict) else {}
        tree: dict[str, Any] = {}
        covered = self.covered()
        for done, (fqn, is_bytes, dtype, size, first, count, item) in enumerate(cols.entries):
            if not done % steps.EVERY:  # a folder of many ranks: the TUI shows how far the listing is
                steps.step(f"entries of {index}", done, len(cols.entries))
            try:
                if is_bytes:
                    where = cols.where(item)
                    value = self.lister.bytes_entry(fqn, {} if where is None else {(fqn, None): where})
                else:
                    value = self.tensor_entry(fqn, dtype, size, first, count)
                    if not covered[done]:  # where the _Lister says it: after the entry's own chunks
                        dcp_cover.add_finding(ckpt, self.lister.folder.name, fqn, size, count)
                place(tree, planner_keys(planner.get(fqn)) or fqn.split("."), value)
            except MALFORMED as exc:
                ckpt.add("CORRUPT", f"{index}: entry {fqn} is malformed ({type(exc).__name__})", fqn)
        self.check_files()
        return tree

    def covered(self) -> Any:
        """Whether each entry's chunks cover its shape exactly once (bytes entries: no), all at once."""
        cols = self.cols
        entries = cols.entries
        return dcp_cover.exact_covers([None if e[1] else e[3] for e in entries], [e[4] for e in entries],
                                      [e[5] for e in entries], cols.offsets_index, cols.offsets_pool,
                                      cols.sizes_index, cols.sizes_pool)  # fmt: skip

    def tensor_entry(self, fqn: str, dtype: str, size: tuple[int, ...], first: int, count: int) -> Any:
        if count:
            self.entry_first.append(first)
            self.entry_fqn.append(fqn)
            self.entry_count.append(count)
        if count > 1:
            self.ckpt.metadata.setdefault("dcp_sharded", {})[fqn] = list(size)
            whole = self.sharded(fqn, dtype, size, first, count)
            self.ckpt.tensors.append(whole)
            return whole
        if count == 0:
            return {}
        tensor = self.single(fqn, dtype, first)
        if tensor is not None:
            self.ckpt.tensors.append(tensor)
        return tensor

    def single(self, fqn: str, dtype: str, chunk: int) -> TensorInfo | None:
        """A tensor of one chunk, as _Lister._declared_tensor lists it."""
        lister, cols = self.lister, self.cols
        placed = lister._placed(cols.where(int(cols.chunk_item[chunk])), fqn)
        if placed is None:
            return None
        relative, offset, length = placed
        sizes = cols.sizes(chunk)
        nbytes = (int(cols.chunk_numel[chunk]) * lister._bits(dtype) + 7) >> 3
        if length < nbytes:
            lister._short_item(relative, offset, length, fqn, nbytes)
            return None
        key = f"{relative}@{offset}/0"  # torch.save of one tensor names its storage "0": as the full read keys it
        self.ckpt.storages[key] = StorageInfo(key, dtype, nbytes, lister.paths[relative], None, None, fqn)
        np = self.np
        pid = cols.item_path[cols.chunk_item[chunk : chunk + 1]]
        self.extents.append((pid, np.array([offset]), np.array([length]), np.array([chunk])))
        return TensorInfo(fqn, dtype, sizes, contiguous_strides(sizes), key, 0)

    def _open(self, path_ids: Any) -> None:
        """Open the data files these path ids name, in the order they come (as _Lister opens them: each at the
        first chunk that names it with a valid span)."""
        np = self.np
        path_ids = path_ids[~self.opened[path_ids]]
        if not path_ids.size:
            return
        ids, first = np.unique(path_ids, return_index=True)
        for pid in ids[np.argsort(first, kind="stable")].tolist():
            self.opened[pid] = True
            reader = self.lister._reader(self.cols.paths[pid])
            if reader is not None and not isinstance(reader, str):
                self.file_size[pid] = reader.size

    def sharded(self, fqn: str, dtype: str, size: tuple[int, ...], first: int, count: int) -> TensorInfo:
        """A tensor of many chunks as one entry of its global shape, as _Lister._sharded_tensor lists it."""
        np, cols, lister = self.np, self.cols, self.lister
        bits = lister._bits(dtype)
        stop = first + count
        items = cols.chunk_item[first:stop]
        named = items >= 0
        if len(cols.item_path):
            at = np.where(named, items, 0)
            path, offset, length = cols.item_path[at], cols.item_offset[at], cols.item_length[at]
        else:  # no storage record at all: no chunk is named
            path = offset = length = np.zeros(count, dtype=np.int64)
        span = named & (offset >= 0) & (length >= 0)
        self._open(path[span])
        file_size = self.file_size[path]
        placed = span & (file_size >= 0) & (offset + length <= file_size)
        numel = cols.chunk_numel[first:stop]
        if len(numel) and int(np.abs(numel).max()) >= _EXACT_NUMEL:
            need = np.array([(int(n) * bits + 7) >> 3 for n in numel.tolist()], dtype=object)
        else:
            need = (numel * bits + 7) >> 3
        good = placed & (length >= need)
        chunks = np.arange(first, stop)
        first_file = None
        if good.all():
            self.extents.append((path, offset, length, chunks))
            first_file = cols.paths[int(path[0])] if count else None
        else:
            first_file = self._one_by_one(fqn, first, placed, good, path, offset, length, need)
        key = f"dcp:{fqn}"  # not a place in a file: torch.save names an item's storage `<file>@<offset>/0`
        file = lister.paths[first_file] if first_file is not None else lister.folder
        nbytes = (math.prod(size) * bits + 7) >> 3
        self.ckpt.storages[key] = StorageInfo(key, dtype, nbytes, file, None, None, f"{count} chunks")
        return TensorInfo(fqn, dtype, size, contiguous_strides(size), key, 0)

    def _one_by_one(self, fqn: str, first: int, placed: Any, good: Any, path: Any, offset: Any, length: Any,
                    need: Any) -> str | None:  # fmt: skip
        """The chunks of a tensor some of which fail, in order: each failure through the _Lister's checks (its
        message), each good chunk kept. Returns the data file of the first good chunk."""
        cols, lister = self.cols, self.lister
        first_file = None
        for i in range(len(placed)):
            chunk = first + i
            if not placed[i]:
                name = self.chunk_name(fqn, cols.offsets(chunk), cols.sizes(chunk))
                found = lister.item(name, cols.where(int(cols.chunk_item[chunk])))
                assert found is None  # noqa: S101 - a chunk the arrays did not place fails item()'s checks too
                continue
            relative = cols.paths[int(path[i])]
            if not good[i]:
                name = self.chunk_name(fqn, cols.offsets(chunk), cols.sizes(chunk))
                lister._short_item(relative, int(offset[i]), int(length[i]), name, int(need[i]))
                continue
            self.extents.append((path[i : i + 1], offset[i : i + 1], length[i : i + 1], self.np.array([chunk])))
            first_file = first_file or relative
        return first_file

    def _extent_name(self, chunk: int) -> str:
        """A chunk as the messages name it: its tensor's name, with its box when the tensor has several."""
        import bisect

        at = bisect.bisect_right(self.entry_first, chunk) - 1
        fqn = self.entry_fqn[at]
        if self.entry_count[at] == 1:
            return fqn
        return self.chunk_name(fqn, self.cols.offsets(chunk), self.cols.sizes(chunk))

    def check_files(self) -> None:
        """As _Lister.check_files: once per data file, in the order the files were opened, over all items at
        once (sorted by file, then place: a stable sort, so equal places keep the order they were listed in).
        At 1024 ranks each array here is 18 MB: only what the checks read is sorted (the chunks' numbers only
        where a message names one), so that a listing does not touch a hundred megabytes of copies."""
        np, ckpt, cols, name = self.np, self.ckpt, self.cols, self.lister.folder.name
        if not self.extents:
            return
        path, offsets, lengths = (np.concatenate([e[k] for e in self.extents]) for k in range(3))
        order = np.lexsort((lengths, offsets, path))
        ends = np.add(offsets, lengths, out=lengths)[order]  # in place order, as path and offsets next
        path, offsets = path[order], offsets[order]
        starts = np.r_[0, np.flatnonzero(path[1:] != path[:-1]) + 1]
        stops = np.r_[starts[1:], len(path)]
        overlaps = np.flatnonzero((path[1:] == path[:-1]) & (offsets[1:] < ends[:-1])) + 1
        group = {int(path[s]): (int(s), int(e)) for s, e in zip(starts, stops, strict=True)}
        pid_of = {cols.paths[pid]: pid for pid in group}
        chunk = _ChunkAt(np, self.extents, order)
        files = [(relative, *group[pid_of[relative]]) for relative in self.lister.extents if relative in pid_of]
        runs = [(self.lister.readers[relative], int(offsets[start]), int(ends[stop - 1])) for relative, start, stop
                in files]  # fmt: skip
        for (relative, start, stop), end in zip(files, zip_ends(runs), strict=True):  # every file opened, in order
            at = np.searchsorted(overlaps, start)
            if at < len(overlaps) and overlaps[at] < stop:
                i = int(overlaps[at])
                what = self._extent_name(chunk(i))
                ckpt.add("CORRUPT", f"{name}/{relative}: {what} at byte {int(offsets[i])} overlaps the item "
                                    "before it", what)  # fmt: skip
            if end is False:  # None: raw bytes, nothing more to check without reading values
                what = self._extent_name(chunk(stop - 1))
                ckpt.add("CORRUPT", f"{name}/{relative}: {what}, its last item, does not end as torch.save ends "
                                    "a file (no end-of-directory record)", what)  # fmt: skip


class _ChunkAt:
    """The chunk number of the item at a place in check_files' sorted order; the numbers are gathered into one
    array the first time a message asks for one."""

    def __init__(self, np: Any, extents: list[tuple[Any, Any, Any, Any]], order: Any) -> None:
        self.np, self.extents, self.order = np, extents, order
        self.chunks: Any = None

    def __call__(self, i: int) -> int:
        if self.chunks is None:
            self.chunks = self.np.concatenate([e[3] for e in self.extents])
        return int(self.chunks[self.order[i]])
