"""What kind of file is this? Decided from the first bytes (and a zip's directory), never the name alone.

`sniff` picks the reader; `describe` says, for the CORRUPT message, what a non-checkpoint looks like.
Both read at most a few KB (plus a zip's central directory) and never raise for odd content.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from ckinspect.io.reader import PositionedReader, ReaderFile
from ckinspect.io.zipdir import EOCD_SIG, LOCAL_SIG, ZipError, local_name, read_directory
from ckinspect.vocab import HF_TRAINER_STATE

HEAD_BYTES = 4096

# torch's legacy format opens with this number pickled on its own (torch/serialization.py MAGIC_NUMBER).
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_LEGACY_LONG1 = b"\x8a\x0a" + LEGACY_MAGIC.to_bytes(10, "little")
_LEGACY_TEXT = b"L" + str(LEGACY_MAGIC).encode() + b"L\n"  # protocols 0 and 1

ZIP_MAGIC = (LOCAL_SIG, EOCD_SIG)
NPY_MAGIC = b"\x93NUMPY"
LFS_POINTER = b"version https://git-lfs.github.com/spec/"
# Opcodes a protocol 0/1 pickle may start with: MARK, EMPTY_DICT/LIST/TUPLE, GLOBAL, NONE, INT, LONG, STRING ...
_OLD_PICKLE_OPENERS = frozenset(b"(}])cNILSVFGJKM")


def is_dcp_folder(path: Path) -> bool:
    """A torch.distributed.checkpoint folder (on disk or under a listed prefix): `.metadata`, rank-local
    `__<rank>.metadata` and/or `*.distcp` shards."""
    from ckinspect.io import folders

    try:
        if folders.is_file(path / ".metadata"):
            return True
        if folders.files_ending(path, ".distcp"):
            return True
        return any(_is_rank_metadata(p.name) for p in folders.files_ending(path, ".metadata"))
    except OSError:
        return False


def _is_rank_metadata(name: str) -> bool:
    return name.startswith("__") and name.endswith(".metadata") and name[2:-9].isdigit()


def sniff(path: str | os.PathLike[str], reader: PositionedReader | None = None) -> str:
    """One of torch-zip, torch-legacy, safetensors, pickle, numpy, dcp, sharded, unknown, wherever the path
    lives (io.folders). `reader`: the file already open (the dispatcher's), so it is not opened twice."""
    from ckinspect.io import folders

    path = folders.as_path(path)
    if reader is None:
        if folders.is_dir(path):
            return "dcp" if is_dcp_folder(path) else "unknown"
        if path.name.endswith(".index.json"):
            return "sharded"
        try:
            with folders.opened(path) as opened:
                return sniff_file(opened, path)
        except OSError:
            return "unknown"
    return sniff_file(reader, path)


def sniff_file(reader: PositionedReader, path: Path) -> str:
    """What one open file holds, from its first bytes; where reads cost no request (`reader.fd`), also
    from its zip directory, its tar members or a scan of the whole file, as torch.load would look."""
    head = reader.small_read(0, HEAD_BYTES)
    kind = sniff_bytes(head, reader.size, reader if reader.fd is not None else None)
    if (
        kind == "unknown"
        and path.suffix.lower() == ".safetensors"
        and describe_bytes(head, reader.size) == "binary data"
    ):
        # Unrecognisable bytes under a safetensors name: let its reader say precisely what is wrong.
        return "safetensors"
    return kind


def sniff_bytes(head: bytes, size: int, reader: PositionedReader | None = None) -> str:
    """The kind from the first bytes; `reader` (a local file's) lets the zip, tar and pickle checks read on."""
    if head.startswith(ZIP_MAGIC):
        if _zip_has_data_pkl(head, reader):
            return "torch-zip"
        return "numpy" if _is_npz(reader) else "unknown"
    if is_legacy_tar(head, reader):  # torch's legacy loader tries tar before the stacked pickles
        return "torch-legacy"
    if head.startswith(NPY_MAGIC):
        return "numpy"
    if _is_legacy(head):
        return "torch-legacy"
    if _looks_like_safetensors(head, size):
        return "safetensors"
    if _looks_like_pickle(head, size, reader):
        return "pickle"
    return "unknown"


def _zip_has_data_pkl(head: bytes, reader: PositionedReader | None) -> bool:
    # torch.save writes `<archive>/data.pkl` first: its local header answers without the directory
    name = local_name(head)
    if name is not None and (name == b"data.pkl" or name.endswith(b"/data.pkl")):
        return True
    if reader is not None:
        try:
            members, _ = read_directory(reader)
            # miniz matches names without regard to case; a zip with pickles but no data.pkl is judged too
            return any(m.name.lower() == "data.pkl" or m.name.lower().endswith((".pkl", "/data.pkl")) for m in members)
        except (ZipError, OSError):
            pass  # no readable directory: look for the member's name in the first bytes
    return b"/data.pkl" in head


LEGACY_TAR_MEMBERS = ("storages", "tensors", "pickle")  # what torch's legacy tar loader unpickles
_MAX_TAR_MEMBERS = 100_000


def tar_checksum_ok(block: bytes) -> bool:
    """The first 512 bytes are a tar header whose checksum adds up (what tarfile checks first)."""
    if len(block) < 512:
        return False
    field = block[148:156].split(b"\0", 1)[0].strip()
    try:
        expected = int(field or b"x", 8)
    except ValueError:
        return False
    unsigned = sum(block[:148]) + 8 * 32 + sum(block[156:512])
    signed = unsigned - 256 * sum(1 for b in block[:148] + block[156:512] if b >= 128)
    return expected in (unsigned, signed)


def is_legacy_tar(head: bytes, reader: PositionedReader | None) -> bool:
    """A tar that torch.load would hand to its legacy tar loader: it holds storages, tensors or pickle."""
    if reader is None or not tar_checksum_ok(head[:512]):
        return False
    import tarfile  # deferred: only a file that starts with a tar header gets here

    try:
        with tarfile.open(fileobj=ReaderFile(reader), mode="r:") as tar:  # type: ignore[call-overload]  # read, seek, tell
            for count, info in enumerate(tar):
                if info.name in LEGACY_TAR_MEMBERS or count > _MAX_TAR_MEMBERS:
                    return True
    except (tarfile.TarError, OSError, ValueError, EOFError, UnicodeDecodeError):
        return False
    return False


def _is_npz(reader: PositionedReader | None) -> bool:
    """np.savez: a zip whose members are all `.npy` arrays."""
    if reader is None:
        return False
    try:
        members, _ = read_directory(reader)
    except (ZipError, OSError):
        return False
    return bool(members) and all(m.name.endswith(".npy") for m in members)


def _is_legacy(head: bytes) -> bool:
    if head.startswith(_LEGACY_TEXT):
        return True
    if len(head) < 2 or head[0] != 0x80:
        return False
    rest = head[2:]
    if rest[:1] == b"\x95":  # FRAME (protocol 4+): 8-byte length, then the opcodes
        rest = rest[9:]
    return rest.startswith(_LEGACY_LONG1)


def _looks_like_safetensors(head: bytes, size: int) -> bool:
    # 8-byte length, then the JSON object. Oversized or truncated headers still count: the
    # reader then reports exactly what is wrong rather than "not a checkpoint".
    if len(head) < 9 or head[8:9] != b"{":
        return False
    header_len = int.from_bytes(head[:8], "little")
    # random bytes with a '{' at byte 8 almost never also have a length that fits the file or 32 bits
    return header_len >= 2 and (header_len <= size - 8 or header_len < (1 << 32))


def _looks_like_pickle(head: bytes, size: int, reader: PositionedReader | None) -> bool:
    if len(head) >= 2 and head[0] == 0x80 and head[1] <= 5:  # PROTO 0 and 1 are legal too
        return True
    if reader is not None and _names_code(reader, size):
        return True
    if not head or head[0] not in _OLD_PICKLE_OPENERS:
        return False
    # Protocol 0/1 opcodes are printable: only a stream the pickle scanner walks through to its end
    # counts, whatever its size and whatever bytes its Python 2 strings hold. Text fails at once.
    from ckinspect.formats.pickle_scan import scan_stream  # deferred: listing a safetensors file never needs it

    if size <= len(head):
        return _scans_to_end(scan_stream(head), size)
    return reader is not None and _whole_file_scans_to_end(reader)


def _whole_file_scans_to_end(reader: PositionedReader) -> bool:
    """The whole file walked by the pickle scanner, mapped (a file the OS holds; else not looked at)."""
    import mmap

    from ckinspect.formats.pickle_scan import scan_stream

    if reader.fd is None:
        return False
    try:
        with mmap.mmap(reader.fd, 0, access=mmap.ACCESS_READ) as data:
            return _scans_to_end(scan_stream(data), len(data))
    except (OSError, ValueError):
        return False


def _scans_to_end(scans: list, size: int) -> bool:
    return bool(scans) and all(s.error is None for s in scans) and scans[-1].end == size


def _names_code(reader: PositionedReader, size: int) -> bool:
    """Whatever it looks like, pickle.load would import something that runs code from it (scanned a
    window at a time): it is judged as a pickle, not described as text or binary data."""
    from ckinspect.formats.pickle_scan import scan_file

    try:
        scans = scan_file(reader, 0, size, limit=1)
    except OSError:
        return False
    # dangerous, or a name the scan could not even resolve (a 3 MiB GLOBAL line, a computed STACK_GLOBAL)
    return bool(scans) and any(g.dangerous or g.module.startswith("<") for g in scans[0].globals)


# --- describe -------------------------------------------------------------------------------

_COMPRESSED = (
    (b"\x1f\x8b", "a gzip archive"),
    (b"BZh", "a bzip2 archive"),
    (b"\xfd7zXZ\x00", "an xz archive"),
    (b"\x28\xb5\x2f\xfd", "a zstd archive"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file"),
    (b"GGUF", "a GGUF model file"),
    (b"\x7fELF", "an ELF executable"),
    (b"%PDF", "a PDF document"),
    (b"\x89PNG", "a PNG image"),
)


def describe(path: str | os.PathLike[str]) -> str:
    """What a file that is no checkpoint looks like, from its first few KB: "empty", "text", ...; a folder
    (on disk or under a listed prefix) by the names it holds."""
    from ckinspect.io import folders

    path = folders.as_path(path)
    if folders.is_dir(path):
        return _describe_folder(path)
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(HEAD_BYTES)
    except OSError as exc:
        return f"an unreadable file ({exc.strerror or exc})"
    return describe_bytes(head, size)


def _describe_folder(path: Path) -> str:
    from ckinspect.io import folders

    try:
        names = {entry.name for entry in folders.entries(path)}
    except OSError as exc:
        return f"an unreadable folder ({exc.strerror or exc})"
    if HF_TRAINER_STATE in names:
        return "a Hugging Face Trainer checkpoint folder (report the folder to list its files)"
    if any(name.endswith(".index.json") for name in names):
        return "a folder holding a sharded set (open its *.index.json)"
    return "a folder without .metadata or *.distcp"


def describe_bytes(head: bytes, size: int) -> str:
    if size == 0 or not head:
        return "empty"
    if known := _describe_magic(head):
        return known
    if not head.strip(b"\x00"):
        return "zero bytes (a preallocated or unwritten file)"
    text = _as_text(head, truncated=size > len(head))
    if text is not None:
        return _describe_text(text)
    if _entropy(head) > (7.2 if len(head) >= 1024 else 6.5):
        return "random bytes"
    return "binary data"


def _describe_magic(head: bytes) -> str | None:
    """What a file's first bytes name outright (a pointer, an archive, a compressed stream), else None."""
    if head.startswith(LFS_POINTER):
        return "a git-lfs pointer (run `git lfs pull`)"
    if head.startswith(ZIP_MAGIC):
        return "a zip archive without data.pkl"
    if len(head) > 262 and head[257:262] == b"ustar":
        return "a tar archive"
    return next((what for magic, what in _COMPRESSED if head.startswith(magic)), None)


def _describe_text(text: str) -> str:
    stripped = text.lstrip("\ufeff \t\r\n").lower()
    if stripped.startswith(("<!doctype html", "<html")) or "<html" in stripped[:512] or "<body" in stripped:
        return "an HTML page"
    if stripped.startswith(("{", "[")):
        return "JSON text"
    return "text"


def _as_text(head: bytes, truncated: bool) -> str | None:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # a multi-byte character cut by the read limit is still text
        if not (truncated and exc.start >= len(head) - 3):
            return None
        text = head[: exc.start].decode("utf-8")
    printable = sum(ch.isprintable() or ch in "\t\r\n\f" for ch in text)
    return text if text and printable / len(text) > 0.95 else None


def _entropy(data: bytes) -> float:
    """Shannon entropy in bits per byte (8.0 for uniformly random bytes)."""
    if len(data) < 256:
        return 0.0  # too little to tell
    counts = [0] * 256
    for byte in data:
        counts[byte] += 1
    n = len(data)
    return -sum(c / n * math.log2(c / n) for c in counts if c)
