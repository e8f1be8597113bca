"""The harness for tensors torch saves as several tensors (sparse COO coalesced, uncoalesced and in its legacy
3-tuple form, CSR, CSC, BSR, BSC, nested, per-channel quantized) or as none (meta): each is listed as one
entry with its layout, logical shape and parts, the parts' bytes are torch's own, NaN in them is counted,
diff compares them (never "identical" while one differs), convert writes them under their documented names."""

from __future__ import annotations

import importlib
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo  # noqa: F401 - with these imported, torch's weights_only reads NJTs and DTensors
import torch.distributed.tensor  # noqa: F401
import torch.nested  # noqa: F401

from ckinspect.analysis.diff import diff_checkpoints
from ckinspect.analysis.scan import scan_values
from ckinspect.formats import open_checkpoint
from ckinspect.model import COMPOSITE_PARTS, RAGGED
from ckinspect.ops.convert import convert
from tests.conftest import run_cli
from tests.parity import torch_cases as tc
from tests.parity.test_torch_parity import ckinspect_bytes, torch_bytes, torch_counts

LAYOUTS = {"coo": "sparse_coo", "coo_uncoalesced": "sparse_coo", "coo_legacy": "sparse_coo", "csr": "sparse_csr",
           "csc": "sparse_csc", "bsr": "sparse_bsr", "bsc": "sparse_bsc", "nested": "nested", "meta": "meta",
           "per_channel": "per_channel_affine", "jagged": "jagged", "jagged_lengths": "jagged",
           "dtensor": "wrapper_subclass"}  # fmt: skip
CASES = tc.composite_cases()


def torch_parts(kind: str, t: torch.Tensor) -> dict[str, torch.Tensor]:
    """The parts of a composite as torch itself hands them out."""
    layout = LAYOUTS[kind]
    if layout == "sparse_coo":
        return {"indices": t._indices(), "values": t._values()}
    if layout in ("sparse_csr", "sparse_bsr"):
        return {"crow_indices": t.crow_indices(), "col_indices": t.col_indices(), "values": t.values()}
    if layout in ("sparse_csc", "sparse_bsc"):
        return {"ccol_indices": t.ccol_indices(), "row_indices": t.row_indices(), "values": t.values()}
    if layout == "nested":
        buffer = torch.cat([c.reshape(-1) for c in t.unbind()])
        offsets = t._nested_tensor_storage_offsets()
        return {"buffer": buffer, "sizes": t._nested_tensor_size(), "strides": t._nested_tensor_strides(),
                "storage_offsets": offsets}  # fmt: skip
    if layout == "jagged":
        lengths = {} if t._lengths is None else {"lengths": t._lengths}
        return {"values": t._values, "offsets": t._offsets, **lengths}
    if layout == "wrapper_subclass":  # a DTensor: its local shard, and the rank map of its device mesh
        return {"_local_tensor": t._local_tensor, "_spec.mesh._rank_map": t._spec.mesh._rank_map}
    if layout == "per_channel_affine":
        return {"values": t, "scales": t.q_per_channel_scales(), "zero_points": t.q_per_channel_zero_points()}
    return {}


def _registered() -> list[object]:
    """What torch.nested, torch._dynamo and torch.distributed.tensor register at their import (another test may
    have cleared torch's safe globals in this process: the oracle must not depend on the order tests ran in)."""
    from ckinspect.formats.pickle_scan import TORCH_REGISTERED_BY_DEFAULT, TORCH_REGISTERED_BY_IMPORT

    names = [*TORCH_REGISTERED_BY_DEFAULT, *TORCH_REGISTERED_BY_IMPORT]
    return [getattr(importlib.import_module(n.rsplit(".", 1)[0]), n.rsplit(".", 1)[1]) for n in names]


def _weights_only_refuses(path: Path) -> bool:
    """torch's own safe loader, as the oracle of WEIGHTS_ONLY_REFUSED (once the imports ALLOWLIST_NEEDED names ran)."""
    before = torch.serialization.get_safe_globals()
    torch.serialization.add_safe_globals(_registered())
    try:
        torch.load(path, weights_only=True)
    except pickle.UnpicklingError:
        return True
    finally:  # exactly as it was (safe_globals() would also remove what torch.nested registered itself)
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(before)
    return False


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_composite(case: tc.CompositeCase, tmp_path: Path) -> None:
    path = tmp_path / "composite.pt"
    tc.write_composite(case, path)
    expected = torch.load(path, weights_only=False)["t"]
    ckpt = open_checkpoint(path)
    refused = _weights_only_refuses(path)  # this process imported what REGISTERED_BY_IMPORT names
    needs = ["ALLOWLIST_NEEDED"] if case.kind in tc.REGISTERED_BY_IMPORT else []
    refusal = ["WEIGHTS_ONLY_REFUSED"] if refused else []
    assert [f.code for f in ckpt.findings if f.severity != "info"] == needs + refusal

    (c,) = ckpt.composites
    layout = LAYOUTS[case.kind]
    shape = {"nested": (2, RAGGED, RAGGED), "jagged": (2, RAGGED, 3)}.get(layout) or tuple(expected.shape)
    assert (c.name, c.layout, c.shape, c.dtype) == ("t", layout, shape, str(expected.dtype).removeprefix("torch."))
    assert c.subclass == ("torch.distributed.tensor.DTensor" if case.kind == "dtensor" else "")
    parts = torch_parts(case.kind, expected)
    assert tuple(c.parts) == tuple(parts)
    assert tuple(parts) == (COMPOSITE_PARTS[layout][: len(parts)] if layout != "wrapper_subclass" else tuple(parts))
    tensors = {t.name: t for t in ckpt.tensors}
    assert sorted(tensors) == sorted(["dense", *(f"t.{p}" for p in parts)])
    for part, value in parts.items():
        assert c.parts[part] is tensors[f"t.{part}"]
        assert ckinspect_bytes(ckpt, c.parts[part]) == torch_bytes(value), part

    scan = scan_values(ckpt)
    for part, value in parts.items():
        if value.is_floating_point():
            s = scan.stats[f"t.{part}"]
            assert (s.nan, s.nonfinite) == torch_counts(value), part
    nonfinite = {f.tensor for f in scan.findings if f.code == "NONFINITE"}
    assert nonfinite == {f"t.{p}" for p, v in parts.items() if v.is_floating_point() and torch_counts(v)[1]}

    _check_diff(case, path, ckpt, tmp_path)
    _check_report_and_convert(case, path, parts, tmp_path)


def _check_diff(case, path, ckpt, tmp_path) -> None:
    same, changed = tmp_path / "same.pt", tmp_path / "changed.pt"
    tc.write_composite(tc.CompositeCase(case.kind), same)
    tc.write_composite(tc.CompositeCase(case.kind), changed, changed=True)
    assert diff_checkpoints(open_checkpoint(same), ckpt).identical
    result = diff_checkpoints(ckpt, open_checkpoint(changed))
    assert not result.identical
    if case.kind == "meta":
        assert [(x.name, x.reason) for x in result.changed] == [("t", "shape")]
    elif case.kind != "per_channel":  # its values are integers: the changed value rounds to another one
        changed_part = {"nested": "t.buffer", "dtensor": "t._local_tensor"}.get(case.kind, "t.values")
        assert [x.name for x in result.changed] == [changed_part]


def _check_report_and_convert(case, path, parts, tmp_path) -> None:
    proc = run_cli("--report", "--format", "json", "--quick", path)
    entry = json.loads(proc.stdout)["files"][0]
    (composite,) = entry["composite_tensors"]
    assert composite["layout"] == LAYOUTS[case.kind]
    assert {k: v["name"] for k, v in composite["parts"].items()} == {p: f"t.{p}" for p in parts}
    assert {t["name"]: t.get("part_of") for t in entry["tensors"]} == {"dense": None, **{f"t.{p}": "t" for p in parts}}

    out = tmp_path / "out.safetensors"
    result = convert(path, out, announce=lambda _: None)
    from safetensors.torch import load_file

    loaded = load_file(out)
    written = {f"t.{p}": v for p, v in parts.items() if not v.is_quantized}
    assert sorted(loaded) == sorted(["dense", *written])
    for name, value in written.items():
        assert torch_bytes(loaded[name]) == torch_bytes(value), name
    if case.kind == "meta":
        assert any(n.startswith("t: a meta tensor (float32, shape [4, 6]) holds no data") for n in result.notes)
    else:
        assert any(n.startswith(f"t ({LAYOUTS[case.kind]}, shape ") for n in result.notes)


@pytest.mark.parametrize("kind", sorted(tc.REGISTERED_BY_IMPORT))
def test_the_allowlist_hint_is_what_torch_needs(kind: str, tmp_path: Path) -> None:
    """ALLOWLIST_NEEDED for an NJT or a DTensor, checked against torch in a fresh process: after a plain
    `import torch`, torch.load(weights_only=True) refuses the file; after the import ckinspect names, it reads it."""
    path = tmp_path / "registered.pt"
    tc.write_composite(tc.CompositeCase(kind), path)
    (finding,) = [f for f in open_checkpoint(path).findings if f.severity != "info"]
    assert finding.code == "ALLOWLIST_NEEDED"
    hint = finding.message.split("`")[1]
    assert hint == f"import {', '.join(tc.REGISTERED_BY_IMPORT[kind])}, torch"
    probe = (
        "import sys, pickle, torch\n"
        "def load():\n"
        "    try:\n"
        "        torch.load(sys.argv[1], weights_only=True)\n"
        "    except pickle.UnpicklingError:\n"
        "        return 'refused'\n"
        "    return 'read'\n"
        f"before = load()\n{hint}\nprint(before, load())\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, timeout=300)
    assert proc.stdout.split() == ["refused", "read"], proc.stderr[-2000:]


def test_the_registered_globals_are_torchs() -> None:
    """Pinned to the installed torch, in a fresh process: what `import torch` alone allows (NJTs' classes, the
    device mesh's layouts), and what only the module ckinspect names registers (a torch upgrade that moves
    either fails here)."""
    from ckinspect.formats.pickle_scan import TORCH_REGISTERED_BY_DEFAULT, TORCH_REGISTERED_BY_IMPORT

    probe = (
        "import importlib, json, sys, torch\n"
        "from torch._weights_only_unpickler import _get_allowed_globals, _get_user_allowed_globals\n"
        "allowed = lambda: set(_get_allowed_globals()) | set(_get_user_allowed_globals())\n"
        "default = allowed()\n"
        "later = {m: sorted(set((importlib.import_module(m), allowed())[1]) - default) for m in sys.argv[1:]}\n"
        "print(json.dumps({'default': sorted(default), 'later': later}))\n"
    )
    modules = sorted(set(TORCH_REGISTERED_BY_IMPORT.values()))
    proc = subprocess.run([sys.executable, "-c", probe, *modules], capture_output=True, text=True, timeout=300)
    seen = json.loads(proc.stdout.splitlines()[-1])
    assert set(TORCH_REGISTERED_BY_DEFAULT) <= set(seen["default"])
    for name, module in TORCH_REGISTERED_BY_IMPORT.items():
        assert name not in seen["default"] and name in seen["later"][module], name


def test_the_text_and_markdown_reports_list_every_composite(tmp_path: Path) -> None:
    """Each composite is a row of its own in the text and Markdown reports (a meta tensor has no part in the
    tensor table, so that row is all a reader would see of it), named, with its layout, dtype and shape."""
    kinds = ("coo", "csr", "meta", "nested", "per_channel", "jagged", "dtensor")
    path = tmp_path / "composites.pt"
    with tc.one_rank():
        torch.save({kind: tc.composite_tensor(kind) for kind in kinds}, path)
    shapes = {"nested": "2×j×j", "jagged": "2×j×3"}
    kind_text = {k: LAYOUTS[k] for k in kinds} | {"dtensor": "DTensor (wrapper_subclass)"}
    text = run_cli("--report", path).stdout.splitlines()
    markdown = run_cli("--report", "--format", "markdown", path).stdout.splitlines()
    start = text.index("composite tensors (each part is also listed as a tensor)")
    rows, name = {}, None
    for line in text[start + 3 :]:  # a name wider than its column takes a line of its own above its row
        cells = [c.strip() for c in line.split("  ") if c.strip()]
        if len(cells) == 1:
            name = cells[0]
        elif len(cells) > 1:
            rows[name or cells[0]] = cells[-5:-2] if name else cells[1:4]
            name = None
        if line.startswith(("✗", "!", "✓")):
            break
    for kind in kinds:
        dtype = "qint8" if kind == "per_channel" else "float32"
        assert rows.get(kind) == [kind_text[kind], dtype, shapes.get(kind, "4×6")], kind
        assert sum(line.startswith(f"| `{kind}` | `{kind_text[kind]}` |") for line in markdown) == 1, kind
