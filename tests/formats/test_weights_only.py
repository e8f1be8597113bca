"""WEIGHTS_ONLY_REFUSED against the installed torch: torch.load(weights_only=True) refuses a file that names
nothing unsafe exactly when ckinspect says it would, over every pickle protocol and torch.save's options (zip
and legacy); and the opcode set ckinspect keeps is the one the installed torch's weights_only unpickler
implements."""

from __future__ import annotations

import ast
import collections
import inspect
import pickle
import textwrap
import warnings

import pytest
import torch
import torch._weights_only_unpickler as weights_only

from ckinspect.formats import open_checkpoint
from ckinspect.formats.pickle_findings import TORCH_UNPICKLER_OPCODES, WEIGHTS_ONLY_TORCH


def test_the_opcode_set_is_the_installed_torchs():
    # Unpickler.load dispatches on `key[0] == NAME[0]` or `key[0] in [NAME[0], ...]`: every NAME it names
    tree = ast.parse(textwrap.dedent(inspect.getsource(weights_only.Unpickler.load)))
    implemented = {
        node.value.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id.isupper()
        and isinstance(node.slice, ast.Constant) and node.slice.value == 0
    }  # fmt: skip
    assert torch.__version__.startswith(WEIGHTS_ONLY_TORCH + "."), (
        f"torch {torch.__version__}: re-read torch/_weights_only_unpickler.py and update TORCH_UNPICKLER_OPCODES "
        "and WEIGHTS_ONLY_TORCH in ckinspect/formats/pickle_findings.py"
    )
    assert implemented == TORCH_UNPICKLER_OPCODES


class _Slots:
    pass


def _objects() -> dict[str, object]:
    od = collections.OrderedDict(w=torch.zeros(2), b=torch.ones(3, dtype=torch.int64))
    od._metadata = {"": {"version": 1}}  # type: ignore[attr-defined]  # a state dict's BUILD
    return {
        "state_dict": {"a.weight": torch.zeros(3), "a.bias": torch.ones(2, 2)},
        "module_state": od,
        "resume": {
            "model": {"w": torch.zeros(4)},
            "step": 7,
            "lr": 1e-3,
            "name": "run",
            "betas": (0.9, 0.99),
            "flags": [True, False, None],
            "neg": -3,
            "big": 2**70,
            "empty": {},
        },  # fmt: skip
        "bytes": {"blob": b"\x00\x01", "t": torch.zeros(1)},
        "long_text": {"k" * 300: torch.zeros(1), "v": "x" * 70_000},
        "huge_int": {"n": 2**3000},  # LONG4 beyond protocol 2's LONG1
        "shared": [torch.zeros(2)] * 3 + [{"x": 1}] * 300,  # memo past 256 entries: LONG_BINPUT/GET
        "set": {"s": {1, 2, 3}},
    }


def _torch_refuses(path, weights_only: bool = True) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            torch.load(path, weights_only=weights_only)
        except Exception as exc:  # noqa: BLE001 - whatever torch raises is a refusal
            return f"{type(exc).__name__}: {str(exc).splitlines()[-1][:200]}"
    return None


def _codes(path) -> list[str]:
    return [f.code for f in open_checkpoint(path).findings]


@pytest.mark.parametrize("zipped", [True, False], ids=["zip", "legacy"])
@pytest.mark.parametrize("protocol", range(6))
def test_torch_refuses_a_safe_file_exactly_when_the_finding_says_so(tmp_path, protocol, zipped):
    for name, obj in _objects().items():
        path = tmp_path / f"{name}.pt"
        torch.save(obj, path, pickle_protocol=protocol, _use_new_zipfile_serialization=zipped)
        refused, codes = _torch_refuses(path), _codes(path)
        assert not {"UNSAFE_PICKLE", "ALLOWLIST_NEEDED"} & set(codes), (name, codes)
        if "CORRUPT" in codes:  # protocol 0 spells a persistent id as text: torch reads it in no mode either
            assert protocol == 0 and refused and _torch_refuses(path, weights_only=False), (name, codes)
            continue
        assert ("WEIGHTS_ONLY_REFUSED" in codes) == (refused is not None), (name, protocol, refused, codes)
        if protocol == 2 and name != "huge_int":  # torch.save's default protocol: read, but for LONG4
            assert refused is None and codes == [], (name, refused, codes)


@pytest.mark.parametrize("protocol", range(6))
def test_a_plain_pickle_is_not_a_file_torch_load_reads(tmp_path, protocol):
    # torch.load reads torch.save files only: for a plain pickle, ALLOWLIST_NEEDED says what torch's
    # unpickler would need (and which opcodes it lacks), and nothing else is said
    path = tmp_path / "plain.pkl"
    path.write_bytes(pickle.dumps({"a": [1, 2.5, "x", None, True], "t": (1, 2), "b": b"xy"}, protocol=protocol))
    assert _torch_refuses(path) is not None  # not a torch.save file, whatever its protocol
    assert "WEIGHTS_ONLY_REFUSED" not in _codes(path)


def test_an_unsafe_file_is_unsafe_not_refused(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"f": print}, path, pickle_protocol=4)  # builtins.print: outside the allowlist
    assert "UNSAFE_PICKLE" in _codes(path) and "WEIGHTS_ONLY_REFUSED" not in _codes(path)


def test_the_finding_says_what_to_do(tmp_path):
    path = tmp_path / "p4.pt"
    torch.save({"w": torch.zeros(2)}, path, pickle_protocol=4)
    (finding,) = open_checkpoint(path).findings
    assert finding.code == "WEIGHTS_ONLY_REFUSED" and finding.severity == "warning"
    assert "FRAME" in finding.message and "protocol 4" in finding.message
    assert "weights_only=False only if you trust" in finding.message and "pickle protocol 2" in finding.message


def _genops_unreadable(data: bytes) -> list[str]:
    """pickletools' own walk: the opcodes torch's unpickler lacks, first met first, up to STOP."""
    import pickletools

    seen: list[str] = []
    for op, _arg, _pos in pickletools.genops(data):
        if op.name not in TORCH_UNPICKLER_OPCODES and op.name not in seen:
            seen.append(op.name)
    return seen


@pytest.mark.parametrize("protocol", range(6))
def test_the_opcodes_torch_lacks_are_found_whichever_run_a_pickle_gets(monkeypatch, protocol):
    # small pickles are walked with no string lengths in the run, big ones with 64: the same answer either way
    from ckinspect.formats import pickle_findings

    for name, obj in _objects().items():
        data = pickle.dumps({**{"s" * n: "x" * n for n in (0, 1, 63, 64, 65, 255, 256)}, "obj": obj}, protocol)
        expected = _genops_unreadable(data)
        got = {}
        for small in (0, 1 << 62):  # every pickle big, every pickle small
            monkeypatch.setattr(pickle_findings, "_SMALL_PICKLE", small)
            got[small] = pickle_findings.torch_unreadable_opcodes(data)
        assert got[0] == got[1 << 62] == expected, (name, protocol)
