"""Leftover temporaries of interrupted saves: find them, and judge each against its main file.

A save done right writes `<name>.tmp` (or a unique `.<name>.XXXX.tmp`), fsyncs it, then renames it
over `<name>`. A crash leaves the tmp behind: partial if the crash came mid-write, complete if it
came between the fsync and the rename. Whether the tmp or the main file is the one to keep is
judged from the bytes: the structure (zip directory, member CRCs, safetensors offsets, a pickle
that ends) and the step counter inside, never from mtime alone. Nothing here imports torch.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickletools
import struct
from pathlib import Path

from ckinspect.analysis.anatomy import analyze
from ckinspect.formats import open_checkpoint
from ckinspect.io import folders
from ckinspect.io.remote import as_path
from ckinspect.io.zipdir import LOCAL_SIG, STORED, ZipError, data_offset, member_chunks, read_directory
from ckinspect.record import Record
from ckinspect.vocab import (
    DCP_METADATA,
    NOT_WHOLE_CODES,
    PAIRED_SUFFIXES,
    QUARANTINE_DIR,
    SINGLE_FILE_FORMATS,
    STEP_KEYS,
    TMP_SUFFIX,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

SKIP_DIRS = {QUARANTINE_DIR, ".git", "__pycache__"}
SMALL_MEMBER = 1 << 20  # members up to this size get their CRC checked even in a quick check


class Leftover(Record):
    tmp: Path
    main: Path
    guessed: bool = False  # the main's name is a guess: no sibling told us its extension

    @property
    def folder(self) -> Path:
        return self.tmp.parent


class Integrity(Record):
    """What reading a file's structure says: whole or not, and why not."""

    ok: bool
    format: str
    problem: str = ""  # one phrase when not ok: "no readable zip directory at its end: cut short?"
    _checkpoint: Any = None  # the reader's view, when it was opened (not part of the verdict)

    @property
    def checkpoint(self) -> Any:
        return self._checkpoint


class TmpStatus(Record):
    leftover: Leftover
    main_exists: bool
    main_intact: bool
    tmp_complete: bool
    main_step: int | None
    tmp_step: int | None
    newer: str  # "tmp" | "main" | "same" | "unknown"
    main_problem: str = ""
    tmp_problem: str = ""
    identical: bool = False  # tmp and main hold the same bytes
    tmp_danger: str = ""  # the tmp's UNSAFE_PICKLE message: it must never be promoted

    def explain(self) -> str:
        tmp, main = self.leftover.tmp.name, self.leftover.main.name
        tmp_part = f"complete{_step(self.tmp_step)}" if self.tmp_complete else f"partial ({self.tmp_problem})"
        if not self.main_exists:
            main_part = "missing"
        elif self.main_intact:
            main_part = f"intact{_step(self.main_step)}"
        else:
            main_part = f"damaged ({self.main_problem})"
        verdict = {
            "tmp": "the tmp is newer",
            "main": "the main file is newer",
            "same": "both hold the same checkpoint" + (" byte for byte" if self.identical else ""),
            "unknown": "which is newer cannot be told from their content",
        }[self.newer]
        if not (self.tmp_complete and self.main_exists and self.main_intact):
            verdict = ""
        return f"{tmp} is {tmp_part}; {main} is {main_part}" + (f": {verdict}" if verdict else "")


def _step(step: int | None) -> str:
    return "" if step is None else f", step {step}"


# ---------------------------------------------------------------------------------------- finding


def main_for_tmp(tmp: Path) -> Leftover | None:
    """The main file a temporary was meant to become, or None when it is not a save's temporary."""
    name = tmp.name
    if not name.endswith(TMP_SUFFIX) or name == TMP_SUFFIX:
        return None
    folder = tmp.parent
    if name == DCP_METADATA + TMP_SUFFIX:
        return Leftover(tmp, folder / DCP_METADATA)
    stem = name[: -len(TMP_SUFFIX)]
    target = _mkstemp_target(tmp, stem)
    if target is not None:
        return Leftover(tmp, folder / target)
    if _has_checkpoint_suffix(stem) or _checkpoint_pair(tmp, folder / stem):
        return Leftover(tmp, folder / stem)
    return _beside_its_main(tmp, stem)


def _mkstemp_target(tmp: Path, stem: str) -> str | None:
    """ckinspect.io.atomic / tempfile.mkstemp style: .<name>.<random>.tmp names the checkpoint <name>."""
    if not (tmp.name.startswith(".") and "." in stem[1:]):
        return None
    target, _, _random = stem[1:].rpartition(".")
    if target and (_has_checkpoint_suffix(target) or _checkpoint_pair(tmp, tmp.parent / target)):
        return target
    return None


def _beside_its_main(tmp: Path, stem: str) -> Leftover | None:
    """<stem>.tmp beside <stem>.pt: the extension is not in the tmp's name."""
    folder = tmp.parent
    siblings = [folder / (stem + s) for s in PAIRED_SUFFIXES if folders.is_file(folder / (stem + s))]
    if len(siblings) == 1:
        return Leftover(tmp, siblings[0])
    if not siblings and _looks_like_checkpoint(tmp):
        return Leftover(tmp, folder / stem, guessed=True)
    return None


def _has_checkpoint_suffix(name: str) -> bool:
    return name.endswith(PAIRED_SUFFIXES) or name == DCP_METADATA


def _checkpoint_pair(tmp: Path, main: Path) -> bool:
    """An extension-less main counts when one of the two holds checkpoint bytes (not a report.json's tmp)."""
    return folders.is_file(main) and (_looks_like_checkpoint(tmp) or _looks_like_checkpoint(main))


def _looks_like_checkpoint(path: Path) -> bool:
    try:
        head = folders.read_bytes(path, 8)
    except OSError:
        return False
    if head.startswith((LOCAL_SIG, b"\x80")) or _safetensors_header_len(head) is not None:
        return True
    from ckinspect.formats.sniff import sniff  # by content: an old-protocol pickle or a legacy tar counts too

    return sniff(path) in SINGLE_FILE_FORMATS


def find_leftovers(path: str | os.PathLike[str]) -> list[Leftover]:
    """Leftover temporaries of `path`: a checkpoint file (its siblings), a tmp itself, or a folder (recursive).
    A URL's siblings are those of the prefix listing this command took (io.folders); a lone URL has none."""
    path = as_path(path)
    if folders.is_dir(path):
        return _leftovers_under(path)
    if path.name.endswith(TMP_SUFFIX):
        leftover = main_for_tmp(path)
        return [leftover] if leftover is not None and folders.exists(path) else []
    return _leftovers_beside(path)


def _leftovers_beside(path: Path) -> list[Leftover]:
    """The temporaries beside a checkpoint file that were meant to become it."""
    parent = path.parent
    if not folders.is_dir(parent):
        return []
    tmps = (main_for_tmp(tmp) for tmp in folders.files_ending(parent, TMP_SUFFIX))
    return [leftover for leftover in tmps if leftover is not None and leftover.main.name == path.name]


def _leftovers_under(folder: Path) -> list[Leftover]:
    """Every save's temporary in a folder and below it."""
    tmps = (main_for_tmp(root / name) for root, files in folders.walk(folder, skip=SKIP_DIRS)
            for name in files if name.endswith(TMP_SUFFIX))  # fmt: skip
    return [leftover for leftover in tmps if leftover is not None]


def unfinished_saves(paths: Sequence[str | os.PathLike[str]], known: set[Path]) -> dict[Path, list[Leftover]]:
    """Saves that died before their first rename: tmps whose main file does not exist, by the path
    of the checkpoint each was going to become (a DCP folder, for its `.metadata`).

    Discovery never makes a tmp a checkpoint of its own, yet such a tmp may be the only copy of the
    newest checkpoint. Left out: tmps among `known` (a tmp the user named is reported as itself) and
    checkpoints among `known` (a DCP folder without `.metadata` is listed by its .distcp files, whose
    checks report the tmp).
    """
    found: dict[Path, list[Leftover]] = {}
    for path in paths:
        for leftover in find_leftovers(path):
            if folders.exists(leftover.main) or leftover.tmp in known:
                continue
            entry = leftover.main.parent if leftover.main.name == DCP_METADATA else leftover.main
            if entry not in known and leftover not in found.get(entry, []):
                found.setdefault(entry, []).append(leftover)
    return found


# ------------------------------------------------------------------------------------ classifying


def classify(leftover: Leftover, full_crc: bool = False) -> TmpStatus:
    """Judge the pair from their bytes. `full_crc` checks every zip member's CRC, not only small ones."""
    tmp_check = check_integrity(leftover.tmp, full_crc=full_crc)
    main_exists = folders.is_file(leftover.main)
    missing = Integrity(False, "missing", "missing")
    main_check = check_integrity(leftover.main, full_crc=full_crc) if main_exists else missing
    tmp_step = read_step(leftover.tmp, tmp_check.checkpoint) if tmp_check.ok else None
    main_step = read_step(leftover.main, main_check.checkpoint) if main_check.ok else None
    steps_differ = tmp_step is not None and main_step is not None and tmp_step != main_step
    # reading both files whole is only worth it when their steps do not already tell them apart
    from ckinspect.io.blobs import files_differ  # (mmap and threads: not for the listings that find no tmp)

    identical = (
        tmp_check.ok and main_check.ok and not steps_differ and files_differ(leftover.tmp, leftover.main) is False
    )
    if identical:
        newer = "same"
    elif tmp_step is not None and main_step is not None:
        newer = "tmp" if tmp_step > main_step else "main" if main_step > tmp_step else "same"
    else:
        newer = "unknown"
    return TmpStatus(
        leftover=leftover,
        main_exists=main_exists,
        main_intact=main_check.ok,
        tmp_complete=tmp_check.ok,
        main_step=main_step,
        tmp_step=tmp_step,
        newer=newer,
        main_problem=main_check.problem,
        tmp_problem=tmp_check.problem,
        identical=identical,
        tmp_danger=danger_of(tmp_check.checkpoint),
    )


def danger_of(ckpt: Any) -> str:
    """The first UNSAFE_PICKLE message of an opened checkpoint ("" when none or not opened)."""
    for finding in getattr(ckpt, "findings", ()):
        if finding.code == "UNSAFE_PICKLE":
            return finding.message
    return ""


def check_integrity(path: Path, full_crc: bool = False) -> Integrity:
    """Is this file a whole checkpoint? Judged from its structure, by format."""
    try:
        size = folders.size(path)
        head = folders.read_bytes(path, 8)
    except OSError as exc:
        return Integrity(False, "unreadable", f"cannot read: {exc.strerror or exc}")
    if size == 0:
        return Integrity(False, "empty", "empty file")
    if head.startswith(LOCAL_SIG):
        return _check_zip(path, size, full_crc)
    if _safetensors_header_len(head) is not None:
        return _check_safetensors(path, size)
    if path.name in (DCP_METADATA, DCP_METADATA + TMP_SUFFIX):
        return _check_dcp_metadata(path)
    return _check_with_reader(path)


def _check_zip(path: Path, size: int, full_crc: bool) -> Integrity:
    with folders.opened(path) as reader:
        try:
            members, _cd_start = read_directory(reader)
        except ZipError:
            return Integrity(False, "torch-zip", "no readable zip directory at its end: cut short?")
        if not any(m.name.endswith("data.pkl") for m in members):
            return Integrity(False, "torch-zip", "no data.pkl in the zip")
        for member in members:
            if member.compress_type != STORED and member.file_size > SMALL_MEMBER:
                continue
            try:
                data_start = data_offset(reader, member)
            except ZipError:
                where = f"member {member.name} has no local header at {member.header_offset}"
                return Integrity(False, "torch-zip", where)
            if data_start + member.compressed_size > size:
                return Integrity(False, "torch-zip", f"member {member.name} runs past the end of the file")
            if full_crc or member.file_size <= SMALL_MEMBER:
                try:
                    for _chunk in member_chunks(reader, member, data_start, verify=True):
                        pass
                # what a reader cannot get past: bad CRC, cut short, an unknown method, a bad deflate stream,
                # encrypted, a local header that names another member
                except ZipError as exc:
                    return Integrity(False, "torch-zip", f"member {member.name}: {exc}")
    # the reader checks that data.pkl parses and names only storages that are present
    return _check_with_reader(path, fallback_format="torch-zip")


def _safetensors_header_len(head: bytes) -> int | None:
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head[:8])
    return n if 2 <= n <= 100_000_000 else None


def _check_safetensors(path: Path, size: int) -> Integrity:
    with folders.opened(path) as reader:
        n = struct.unpack("<Q", reader.read_at(0, 8))[0]
        raw = reader.read_at(8, n)
    if len(raw) < n:
        return Integrity(False, "safetensors", f"header cut short ({len(raw)} of {n} bytes)")
    try:
        header = json.loads(raw)
    except ValueError:
        return Integrity(False, "safetensors", "header is not JSON")
    if not isinstance(header, dict) or not raw.lstrip().startswith(b"{"):
        return Integrity(False, "safetensors", "header is not a JSON object")
    entries = [v for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    spans = sorted(tuple(v["data_offsets"]) for v in entries if "data_offsets" in v)
    end = 0
    for begin, stop in spans:
        if begin != end or stop < begin:
            return Integrity(False, "safetensors", f"tensor offsets do not add up at byte {begin}")
        end = stop
    have = size - 8 - n
    if have < end:
        return Integrity(False, "safetensors", f"buffer cut short: {have} of {end} bytes")
    if have > end:
        return Integrity(False, "safetensors", f"{have - end} bytes after the last tensor")
    return Integrity(True, "safetensors")


def _check_pickle_stream(path: Path, fmt: str) -> Integrity:
    """A pickle is whole when its opcodes parse through to STOP (nothing executed)."""
    try:
        data = folders.read_bytes(path)
        last = None
        for op, _arg, _pos in pickletools.genops(data):
            last = op
    except Exception as exc:  # noqa: BLE001 - genops raises ValueError and friends on a cut stream
        return Integrity(False, fmt, f"pickle cut short or damaged ({type(exc).__name__})")
    if last is None or last.name != "STOP":
        return Integrity(False, fmt, "pickle does not end")
    return Integrity(True, fmt)


def _check_dcp_metadata(path: Path) -> Integrity:
    """A DCP index is whole when its pickle ends and the folder reads through it without CORRUPT.

    A `.metadata.tmp` is read as the folder's index in place of `.metadata`, so a tmp whose .distcp
    files are missing or cut short is not taken for a save that only lacked its rename.
    """
    from ckinspect.formats.dcp import read_dcp

    stream = _check_pickle_stream(path, "dcp")
    if not stream.ok:
        return stream
    try:
        return _verdict(read_dcp(path.parent, metadata_name=path.name), "dcp")
    except Exception as exc:  # noqa: BLE001 - as open_checkpoint does: a reader failure is a verdict, not a crash
        return Integrity(False, "dcp", f"unreadable DCP index ({type(exc).__name__}: {exc})")


def _verdict(ckpt, fmt: str) -> Integrity:
    corrupt = [f.message for f in ckpt.findings if f.code in NOT_WHOLE_CODES]
    if corrupt or ckpt.format == "unknown":
        return Integrity(False, ckpt.format, corrupt[0] if corrupt else "not a checkpoint", ckpt)
    return Integrity(True, ckpt.format, "", ckpt)


def _check_with_reader(path: Path, fallback_format: str = "unknown") -> Integrity:
    return _verdict(open_checkpoint(path), fallback_format)


def read_step(path: Path, ckpt: Any = None) -> int | None:
    """The training step the checkpoint says it was saved at, if it says (`ckpt`: already opened)."""
    ckpt = ckpt if ckpt is not None else open_checkpoint(path)
    with contextlib.suppress(Exception):  # a layout that does not fit must not hide the raw step
        ckpt = analyze(ckpt)
    for key in ("step", *STEP_KEYS):
        value = ckpt.metadata.get(key)
        if _is_int(value):
            return int(value)
    return _step_in_tree(ckpt.tree)


def _step_in_tree(tree, depth: int = 0) -> int | None:
    if not isinstance(tree, dict) or depth > 2:
        return None
    for key in STEP_KEYS:
        if _is_int(tree.get(key)):
            return int(tree[key])
    for key in ("trainer_state", "state", "meta", "metadata", "extra_state"):
        found = _step_in_tree(tree.get(key), depth + 1)
        if found is not None:
            return found
    return None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
