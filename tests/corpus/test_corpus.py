"""The real corpus (tests/corpus/manifest.json): every file read as torch (or numpy) reads it.

For each file torch loads: the same tensors by name, dtype, shape and bytes, and never UNSAFE_PICKLE or
CORRUPT. For every file: the format, tensor count and finding codes the manifest records. The files are
fetched from the package index into a cache on first use (tests/corpus/fetch.py).
"""

from __future__ import annotations

import pytest

from ckinspect.analysis.inspect import inspect_path
from tests.corpus.compare import our_tensors, torch_tensors, verdict
from tests.corpus.fetch import ensure_corpus, load_manifest

pytestmark = pytest.mark.corpus

ENTRIES = [(f"{p['spec']}:{e['path']}", e) for p in load_manifest()["packages"] for e in p["files"]]


@pytest.fixture(scope="module")
def corpus():
    return ensure_corpus()


def test_the_corpus_is_what_the_issue_asks_for():
    packages = {p["spec"].split("==")[0] for p in load_manifest()["packages"]}
    assert len(ENTRIES) >= 30 and len(packages) >= 8
    formats = {e["expect"]["format"] for _, e in ENTRIES}
    assert {"torch-legacy", "torch-zip", "torchscript", "pickle", "numpy"} <= formats


@pytest.mark.parametrize("entry", [e for _, e in ENTRIES], ids=[i for i, _ in ENTRIES])
def test_file_reads_as_torch_reads_it(corpus, entry, request):
    path = corpus[request.node.callspec.id]
    ckpt = inspect_path(path, quick=False)
    expect = entry["expect"]
    assert ckpt.format == expect["format"]
    assert len(ckpt.tensors) == expect["tensors"]
    assert verdict(ckpt) == expect["codes"], [f.message for f in ckpt.findings]
    if "ALLOWLIST_NEEDED" in expect["codes"]:  # the remedy works, run exactly as the message writes it
        from tests.formats.test_allowlist_hint import check_remedy

        check_remedy(ckpt, path)
    if entry["torch"] == "none":
        return
    codes = set(verdict(ckpt))
    assert not codes & {"UNSAFE_PICKLE", "CORRUPT"}, "torch reads this file: no refusal, no damage"
    theirs = torch_tensors(path, entry["torch"], [t.name for t in ckpt.tensors])
    ours = our_tensors(ckpt)
    if entry["torch"] == "jit":  # TorchScript constants are not reachable by name through torch's API
        ours = {k: v for k, v in ours.items() if not k.startswith("CONSTANTS.")}
    assert sorted(ours) == sorted(theirs)
    for name, (dtype, shape, raw) in theirs.items():
        assert ours[name][:2] == (dtype, shape), name
        assert ours[name][2] == raw, f"{name}: bytes differ"


def test_two_torchscript_releases_differ_where_torch_says_they_do(corpus):
    """silero-vad 5.1.2 against 6.0.0: the tensors diff calls changed are exactly those torch finds unequal."""
    import torch

    from ckinspect.analysis.diff import diff_checkpoints

    a, b = (corpus[f"silero-vad=={v}:silero_vad/data/silero_vad.jit"] for v in ("5.1.2", "6.0.0"))
    result = diff_checkpoints(inspect_path(a, quick=True), inspect_path(b, quick=True))
    sa, sb = (torch.jit.load(str(p), map_location="cpu").state_dict() for p in (a, b))
    unequal = {k for k in sa if k in sb and (sa[k].shape != sb[k].shape or not torch.equal(sa[k], sb[k]))}
    assert unequal and {c.name for c in result.changed} - {"_state", "_context"} == unequal
    assert not result.identical
