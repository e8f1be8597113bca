"""Small checkpoint files for the CI-format tests, written without torch (the torch-free CI venv runs them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ckinspect.io.safetensors_write import Entry, write_safetensors

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "samples"

# a tensor name a hostile file could carry: an ANSI colour, a bidi override, a newline
HOSTILE_NAME = "layer\x1b[31m.\u202eexe.\nweight"
# protocol-0 pickle of os.system("echo pwned"): what a malicious checkpoint does on load
SYSTEM_PICKLE = b"cos\nsystem\n(S'echo pwned'\ntR."


def safetensors_file(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    entries = [
        Entry(name, str(array.dtype), array.shape, (lambda a=array: [np.ascontiguousarray(a).tobytes()]))
        for name, array in tensors.items()
    ]
    write_safetensors(path, entries)
    return path


def clean_weights(path: Path) -> Path:
    return safetensors_file(path, {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.ones(3, np.float32)})


def nonfinite_weights(path: Path) -> Path:
    """NONFINITE on a tensor whose name holds control characters and a bidi override."""
    bad = np.array([1.0, np.nan, np.inf, 2.0], dtype=np.float32)
    return safetensors_file(path, {HOSTILE_NAME: bad, "ok": np.ones(3, np.float32)})


def hostile_pickle(path: Path) -> Path:
    path.write_bytes(SYSTEM_PICKLE)
    return path


def damaged_run(run: Path) -> Path:
    """A run folder whose checkpoints fail in the ways last-good must see: an unsafe pickle, weights only, a
    truncated resume file (step 60), a DCP save that never wrote `.metadata` (step 90); the one good
    checkpoint is `i/tiny_resume.pth` (step 30), with a partial tmp of a later save beside it."""
    import shutil

    (run / "b").mkdir(parents=True)
    shutil.copytree(SAMPLES / "interrupted", run / "i")
    (run / "i" / "tiny.pth").unlink()
    (run / "b" / "tiny_resume.pth").write_bytes((SAMPLES / "resumed-60" / "tiny_resume.pth").read_bytes()[:20000])
    hostile_pickle(run / "evil.pkl")
    clean_weights(run / "c.safetensors")
    (run / "step000090").mkdir()
    (run / "step000090" / "__0_0.distcp").write_bytes(b"junk")
    return run
