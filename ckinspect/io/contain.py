"""Paths a file names (a repair manifest, a shard index, a DCP `.metadata`) kept inside the target.

Whoever wrote the file chose those paths: an absolute path, a `..`, or a symlink on the way would
send a read or a write outside the folder the user named. Each is refused, never followed.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from ckinspect.vocab import CkinspectError


class OutsideTarget(CkinspectError):
    """A path named by a file would leave the folder it must stay in (or pass through a symlink)."""


def inside(base: str | os.PathLike[str], relative: object) -> Path:
    """`base/relative`, when `relative` is a plain relative path whose every existing step below `base`
    is a real directory or file (not a symlink). Raises OutsideTarget otherwise; touches nothing."""
    pure = _plain_relative(relative)
    from ckinspect.io.remote import is_url

    if is_url(base):  # an object store has no symlinks: a plain relative key below the prefix
        if not pure.parts or pure.parts == (".",):
            raise OutsideTarget(f"{relative!r} names the folder itself, not a file in it")
        return base.joinpath(*pure.parts)  # type: ignore[union-attr]  # a RemotePath
    current = Path(base)
    for part in pure.parts:
        current = current / part
        if current.is_symlink():
            raise OutsideTarget(f"{relative!r}: {part!r} is a symlink; not followed")
    if current == Path(base):
        raise OutsideTarget(f"{relative!r} names the folder itself, not a file in it")
    return current


def _plain_relative(relative: object) -> PurePosixPath:
    """`relative` as a relative path that stays below its folder; OutsideTarget otherwise."""
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise OutsideTarget(f"{relative!r} is not a file name")
    pure = PurePosixPath(relative.replace("\\", "/"))  # a Windows separator is no way around the check
    if pure.is_absolute() or ".." in pure.parts or (pure.parts and pure.parts[0].endswith(":")):
        raise OutsideTarget(f"{relative!r} leaves its folder")
    return pure


def refuse_symlink(path: str | os.PathLike[str]) -> Path:
    """`path` itself, when it is not a symlink (a quarantine folder, a manifest)."""
    path = Path(path)
    if path.is_symlink():
        raise OutsideTarget(f"{path} is a symlink; not followed")
    return path
