"""Which checkpoints do these paths hold? Files, DCP folders and sharded sets, in a stable order.

A DCP folder or an `*.index.json` set is one checkpoint: its parts are not listed again. Temporaries
(`*.tmp`, `.metadata.tmp`) are interrupted saves that `ckinspect.analysis.leftovers` reports against the
checkpoint they belong to, so they are never checkpoints of their own when a folder is searched.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

from ckinspect.formats.sniff import sniff
from ckinspect.record import Record
from ckinspect.vocab import (
    FOUND_SUFFIXES,
    HF_CONFIG,
    HF_WEIGHTS,
    INDEX_SUFFIX,
    SINGLE_FILE_FORMATS,
    TMP_SUFFIX,
    CkinspectError,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Literal

    TargetKind = Literal["file", "dcp", "sharded"]


class TmpSuffix:
    """Names an interrupted atomic save leaves behind: `model.pt.tmp`, `.model.pt.x8k2.tmp`, `.metadata.tmp`."""

    SUFFIX = TMP_SUFFIX

    @classmethod
    def main_name(cls, tmp_name: str) -> str | None:
        """The file a temporary was going to replace, where its name says so (`model.pt.tmp` -> `model.pt`)."""
        if not tmp_name.endswith(cls.SUFFIX):
            return None
        return tmp_name[: -len(cls.SUFFIX)] or None


def is_temporary(path: str | os.PathLike[str]) -> bool:
    return Path(path).name.endswith(TmpSuffix.SUFFIX)


class Target(Record):
    path: Path
    kind: TargetKind  # "file", "dcp" or "sharded"


def model_folder_weights(path: str | os.PathLike[str]) -> Path | None:
    """The weights of a Hugging Face model folder (`config.json` beside `model.safetensors`, its sharded
    index, or the `.bin` forms), the preferred form first; None when `path` is not such a folder."""
    folder = Path(path)
    if not folder.is_dir() or not (folder / HF_CONFIG).is_file():
        return None
    return next((folder / name for name in HF_WEIGHTS if (folder / name).is_file()), None)


def find_checkpoints(paths: Iterable[str | os.PathLike[str]]) -> list[Target]:
    """Every checkpoint the paths hold. A file given by name is always a Target; folders are searched.

    Raises CkinspectError for a path that does not exist.
    """
    from ckinspect.io import folders

    found: list[Target] = []
    for raw in paths:
        if folders.known_missing(raw):
            raise CkinspectError(f"{Path(raw)}: no such file or folder")
        if not folders.names_folder(raw):  # one file (a URL: opened, and its absence reported, when it is read)
            path = folders.target(raw)
            found.append(Target(path, "sharded" if path.name.endswith(INDEX_SUFFIX) else "file"))
            continue
        folder = folders.target(raw)  # a URL prefix (a trailing slash): listed once, searched like a folder
        try:
            found.extend(_search(folder, visited=set()))
        except OSError as exc:
            raise CkinspectError(f"{folder}: cannot list folder ({exc.strerror or exc})") from None
    unique: dict[Path, Target] = {}
    for target in found:
        unique.setdefault(target.path, target)
    return list(unique.values())


def _search(folder: Path, visited: set[Path]) -> list[Target]:
    """Checkpoints in a folder on disk or under a listed URL prefix (io.folders)."""
    from ckinspect.io import folders

    real = folders.real(folder)
    if real in visited:  # a symlink loop
        return []
    visited.add(real)
    if sniff(folder) == "dcp":  # a local folder by its files, a listed prefix from its listing
        return [Target(folder, "dcp")]
    entries = folders.entries(folder)

    files = {e.name for e in entries if not e.is_dir}  # hidden files too: what they hold is judged like any other
    shards: set[str] = set()
    for name in files:
        if _is_checkpoint_index(name):
            shards |= _shard_names(folder / name)

    targets: list[Target] = []
    for entry in entries:
        if entry.is_dir:
            targets += _search_subfolder(entry.path, visited)
        elif entry.name in files:
            targets += _file_target(entry.path, shards)
    return targets


def _search_subfolder(path: Path, visited: set[Path]) -> list[Target]:
    if path.name.startswith("."):  # .ckinspect-quarantine, .git, .venv: hidden folders are not searched
        return []
    try:
        return _search(path, visited)
    except OSError:
        return []  # an unreadable subfolder does not stop the search of the rest


def _file_target(path: Path, shards: set[str]) -> list[Target]:
    """The file as a checkpoint (a sharded set by its index; not one of its shards, a temporary or a file
    that holds no checkpoint), or nothing."""
    if _is_checkpoint_index(path.name):
        return [Target(path, "sharded")]
    if path.name not in shards and not is_temporary(path) and _is_checkpoint_file(path):
        return [Target(path, "file")]
    return []


def _is_checkpoint_index(name: str) -> bool:
    """`model.safetensors.index.json`, `pytorch_model.bin.index.json`; not `tf_model.h5.index.json` (no reader)."""
    return name.endswith(INDEX_SUFFIX) and Path(name[: -len(INDEX_SUFFIX)]).suffix.lower() in FOUND_SUFFIXES


def _is_checkpoint_file(path: Path) -> bool:
    """By its suffix, or else by its content: any name (`latest`, `model_best.pth.tar`, `weights.dat`,
    a hidden file) holding what torch.load or pickle.load would read is judged."""
    if path.suffix.lower() in FOUND_SUFFIXES and not path.name.startswith("."):
        return True
    try:
        return sniff(path) in SINGLE_FILE_FORMATS
    except OSError:
        return False


def _shard_names(index_path: Path) -> set[str]:
    """Shard files in the index's own folder; an unreadable index claims none (its reader reports it)."""
    from ckinspect.io import folders

    try:
        weight_map = json.loads(folders.read_bytes(index_path)).get("weight_map", {})
        return {s for s in weight_map.values() if isinstance(s, str) and len(PurePosixPath(s).parts) == 1}
    except (OSError, ValueError, AttributeError, RecursionError):
        return set()
