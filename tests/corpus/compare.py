"""ckinspect's reading of each corpus file against torch's own (and numpy's, for NumPy files).

python -m tests.corpus.compare      # fetch what is missing, print the Markdown table of the corpus
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ckinspect.analysis.diff import value_blocks
from ckinspect.analysis.inspect import inspect_path
from ckinspect.io.blobs import Blobs
from ckinspect.model import Checkpoint
from tests.corpus.fetch import ensure_corpus, load_manifest

# (dtype, shape, raw bytes in C order) per tensor name
Tensors = dict[str, tuple[str, tuple[int, ...], bytes]]


def _torch_bytes(t: Any) -> bytes:
    import torch

    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def _torch_entry(t: Any) -> tuple[str, tuple[int, ...], bytes]:
    return str(t.dtype).removeprefix("torch."), tuple(t.shape), _torch_bytes(t)


def _walk(obj: Any, path: str, out: Tensors) -> None:
    import torch

    if isinstance(obj, torch.Tensor):
        out[path or "tensor"] = _torch_entry(obj)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _walk(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _walk(v, f"{path}.{i}" if path else str(i), out)


def torch_tensors(path: Path, how: str, ours: list[str] = ()) -> Tensors:
    """What torch (or numpy) reads: torch.load(weights_only=True) / torch.jit.load / np.load."""
    import torch

    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    out: Tensors = {}
    if how == "load":
        _walk(torch.load(path, map_location="cpu", weights_only=True), "", out)
    elif how == "jit":
        module = torch.jit.load(str(path), map_location="cpu")
        for name, t in module.state_dict().items():
            out[name] = _torch_entry(t)
        for name in ours:  # tensor attributes that are neither parameters nor buffers (RNN states ...)
            if name in out or name.startswith("CONSTANTS."):
                continue
            node: Any = module
            for part in name.split("."):
                node = getattr(node, part, None)
            if isinstance(node, torch.Tensor):
                out[name] = _torch_entry(node)
    elif how == "numpy":
        loaded = np.load(path, allow_pickle=False)
        arrays = {k: loaded[k] for k in loaded.files} if hasattr(loaded, "files") else {"tensor": loaded}
        for name, array in arrays.items():
            out[name] = (_numpy_name(array.dtype), tuple(array.shape), np.ascontiguousarray(array).tobytes())
    return out


def _numpy_name(dtype: Any) -> str:
    from ckinspect.dtypes import NUMPY_CODES

    return NUMPY_CODES.get(dtype.str[1:], dtype.str)


def our_tensors(ckpt: Checkpoint, names: set[str] | None = None) -> Tensors:
    out: Tensors = {}
    with Blobs() as blobs:
        for t in ckpt.tensors:
            if names is not None and t.name not in names:
                continue
            raw = b"".join(block.tobytes() for block in value_blocks(blobs, ckpt, t)) if t.numel else b""
            out[t.name] = (t.dtype, tuple(t.shape), raw)
    return out


def verdict(ckpt: Checkpoint) -> list[str]:
    return sorted({f.code for f in ckpt.findings if f.severity in ("error", "warning")})


def rows() -> list[dict[str, Any]]:
    files = ensure_corpus()
    out = []
    for package in load_manifest()["packages"]:
        for entry in package["files"]:
            path = files[f"{package['spec']}:{entry['path']}"]
            ckpt = inspect_path(path, quick=False)
            theirs = (
                torch_tensors(path, entry["torch"], [t.name for t in ckpt.tensors])
                if entry["torch"] != "none"
                else None
            )
            out.append({"spec": package["spec"], "path": entry["path"], "format": ckpt.format, "reader": entry["torch"],
                        "theirs": None if theirs is None else len(theirs), "ours": len(ckpt.tensors),
                        "verdict": ", ".join(verdict(ckpt)) or "clean"})  # fmt: skip
    return out


def main() -> int:
    print("| package | path in package | format | read by | theirs | ours | verdict |")
    print("|---|---|---|---|---|---|---|")
    for r in rows():
        theirs = "refused" if r["theirs"] is None else r["theirs"]
        print(
            f"| {r['spec']} | {r['path']} | {r['format']} | {r['reader']} | {theirs} | {r['ours']} | {r['verdict']} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
