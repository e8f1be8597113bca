"""The weights file beside a resume file: `<name>.pth` next to `<name>_resume.pth` (MiniMind's
lm_checkpoint, the bundled trainer). The two are written one after the other, so a kill between the two
saves leaves a weights file from another step than the resume file's model. Said as WEIGHTS_DIFFER on the
resume file, with which one is newer; only pairs whose values were compared are judged (never "same" unsaid).

    findings = weights_beside(ckpt, layout)     # with the value scan (reads both files' model tensors)
"""

from __future__ import annotations

from pathlib import Path

from ckinspect.io import folders
from ckinspect.model import Checkpoint, Finding, TensorInfo
from ckinspect.vocab import RESUME_SUFFIX

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    from ckinspect.analysis.layouts import Layout
    from ckinspect.io.blobs import Blobs

PAIRED_LAYOUTS = ("trainer", "minimind")  # layouts whose resume file has its weights file beside it
COMPARE_ELEMENTS = 1 << 20  # elements per block compared: memory stays flat whatever the tensor's size


def weights_path(resume: Path) -> Path | None:
    """`tiny_resume.pth` -> `tiny.pth`; None when the name is not a resume file's."""
    stem = resume.name[: -len(resume.suffix)] if resume.suffix else resume.name
    if not stem.endswith(RESUME_SUFFIX) or stem == RESUME_SUFFIX:
        return None
    return resume.with_name(stem[: -len(RESUME_SUFFIX)] + resume.suffix)


def weights_beside(ckpt: Checkpoint, layout: Layout) -> list[Finding]:
    """WEIGHTS_DIFFER when the weights file beside this resume file holds other weights than its model."""
    if layout.name not in PAIRED_LAYOUTS or not layout.is_resume or not folders.on_disk(ckpt.path):
        return []
    other = weights_path(Path(ckpt.path))
    if other is None or not other.is_file():
        return []
    weights = _open_weights(other)
    if weights is None:
        return []  # the weights file's own report says what is wrong with it
    prefix = layout.model_prefix or ""
    model = {t.name[len(prefix) :]: t for t in ckpt.tensors if t.group == "model"}
    differ = _differences(ckpt, model, weights)
    if not differ:
        return []
    return [Finding("WEIGHTS_DIFFER", _message(Path(ckpt.path), other, differ, len(model)), differ[0])]


def _open_weights(path: Path) -> Checkpoint | None:
    from ckinspect.analysis.anatomy import analyze
    from ckinspect.formats import open_checkpoint

    try:
        weights = analyze(open_checkpoint(path))
    except Exception:  # noqa: BLE001  # an unreadable neighbour is not this file's finding
        return None
    if any(f.code in ("CORRUPT", "UNSAFE_PICKLE") for f in weights.findings) or not weights.tensors:
        return None
    return weights


def _differences(ckpt: Checkpoint, model: dict[str, TensorInfo], weights: Checkpoint) -> list[str]:
    """Names (the weights file's) whose tensor is absent, shaped otherwise, or holds other values than the
    resume model's rounded to the weights file's dtype; names only one side has count too."""
    from ckinspect.io.blobs import Blobs

    held = {t.name: t for t in weights.tensors}
    differ = sorted(set(model).symmetric_difference(held))
    with Blobs() as blobs:
        for name in sorted(set(model) & set(held)):
            if not _same(blobs, ckpt, model[name], weights, held[name]):
                differ.append(name)
    return differ


def _same(blobs: Blobs, a_ckpt: Checkpoint, a: TensorInfo, b_ckpt: Checkpoint, b: TensorInfo) -> bool:
    """True when `a` (the resume model's tensor) rounded to `b`'s dtype is `b`, bit for bit. An unreadable
    tensor or a cast this module does not know counts as the same: nothing is said without comparing."""
    import numpy as np

    from ckinspect.io.blobs import UnreadableStorage

    if tuple(a.shape) != tuple(b.shape):
        return False
    cast = _cast(a.dtype, b.dtype)
    if cast is None:
        return True
    try:
        for x, y in zip(_blocks(blobs, a_ckpt, a, cast), _blocks(blobs, b_ckpt, b, None), strict=True):
            if not np.array_equal(x.view(np.uint8), y.view(np.uint8)):
                return False
    except (UnreadableStorage, OSError, ValueError, KeyError):
        return True
    return True


def _blocks(blobs: Blobs, ckpt: Checkpoint, t: TensorInfo, cast: Any) -> Iterator[Any]:
    from ckinspect.io.values import raw_blocks

    return raw_blocks(blobs, ckpt.storages[t.storage_key], t, COMPARE_ELEMENTS, logical=True, convert=cast)


def _cast(source: str, target: str) -> Any:
    """How the saver turned a `source` element into a `target` one (`v.half()`, `.to(bfloat16)`): the same
    IEEE round-to-nearest-even numpy and torch both use; None when this is not a rounding we reproduce."""
    if source == target:
        return lambda raw: raw.copy()
    if source == "float32" and target == "float16":
        return lambda raw: raw.astype("float16")
    if source == "float32" and target == "bfloat16":
        return _to_bfloat16
    return None


def _to_bfloat16(raw: Any) -> Any:
    """float32 -> bfloat16 bits, rounded to nearest even as torch rounds (NaN kept a quiet NaN)."""
    import numpy as np

    bits = raw.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(raw)
    if nan.any():
        rounded[nan] = ((bits[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded


def _message(resume: Path, weights: Path, differ: list[str], total: int) -> str:
    shown = ", ".join(differ[:3]) + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
    newer = _which_newer(resume, weights)
    return (f"{weights.name} beside it holds other weights than this resume file's model ({len(differ)} of "
            f"{max(total, len(differ))} tensors differ: {shown}); {newer}: a kill between the two saves "
            "leaves this, so the two files are not one step's model")  # fmt: skip


def _which_newer(resume: Path, weights: Path) -> str:
    try:
        gap = folders.mtime(weights) - folders.mtime(resume)
    except OSError:
        return "which is newer is not known"
    if gap > 0:
        return f"{weights.name} is newer (written {gap:.1f} s after this file)"
    if gap < 0:
        return f"{weights.name} is older (written {-gap:.1f} s before this file)"
    return "both were written at the same time"
