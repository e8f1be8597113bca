"""Every ALLOWLIST_NEEDED remedy is checked by running exactly the hint's code, then torch.load(weights_only=True)."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
import torch

from ckinspect.formats import open_checkpoint
from ckinspect.formats.pickle_findings import PLAIN_PICKLE_LOAD, allowlist_hint
from ckinspect.formats.pickle_scan import GlobalRef


def hint_of(ckpt) -> tuple[str, str]:
    """(the code that allows the globals, the call that then loads the file), as the message writes them."""
    (finding,) = [f for f in ckpt.findings if f.code == "ALLOWLIST_NEEDED"]
    setup, call = re.findall(r"`([^`]*)`", finding.message)
    return setup, call


def load_with_hint(path, hint: tuple[str, str]):
    setup, call = hint
    namespace: dict = {}
    try:
        exec(setup, namespace)  # exactly what the message tells the user to run
        return eval(call.replace("PATH", repr(str(path))), namespace)
    finally:
        torch.serialization.clear_safe_globals()


def check_remedy(ckpt, path) -> None:
    """A hint loads the file as written; without one, the message says why no allowlist helps, and it is so."""
    (finding,) = [f for f in ckpt.findings if f.code == "ALLOWLIST_NEEDED"]
    if "`" in finding.message:
        load_with_hint(path, hint_of(ckpt))
        return
    assert "no allowlist makes torch's weights_only unpickler read it" in finding.message
    every_global = [GlobalRef(*name.rsplit(".", 1), "benign") for name in ckpt.globals]
    with pytest.raises(pickle.UnpicklingError, match="Unsupported operand"):  # allowed or not: it cannot read it
        load_with_hint(path, (allowlist_hint(every_global, path.read_bytes()), PLAIN_PICKLE_LOAD))


def test_torch_refuses_before_and_loads_after_the_hint(tmp_path):
    path = tmp_path / "resume.pt"
    rng = np.random.RandomState(0).get_state()
    torch.save({"w": torch.ones(2), "np_rng": rng, "counts": np.arange(4, dtype=np.int16), "lr": np.float32(0.5)}, path)
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)
    hint = hint_of(open_checkpoint(path))
    assert "numpy.dtypes.UInt32DType" in hint[0] and "numpy.dtypes.Int16DType" in hint[0]
    assert hint[1] == "torch.load(PATH, weights_only=True)"
    loaded = load_with_hint(path, hint)
    assert np.array_equal(loaded["np_rng"][1], rng[1]) and loaded["counts"].dtype == np.int16


def test_a_numpy_1_pickle_is_allowed_under_the_name_it_uses(tmp_path):
    """numpy 1.x wrote numpy.core.multiarray: on numpy 2 the object lives in numpy._core, paired with the old name."""
    data = pickle.dumps({"a": np.arange(3.0)}, protocol=2).replace(b"numpy._core.multiarray", b"numpy.core.multiarray")
    path = tmp_path / "old.pkl"
    path.write_bytes(data)
    hint = hint_of(open_checkpoint(path))
    assert '(numpy._core.multiarray._reconstruct, "numpy.core.multiarray._reconstruct")' in hint[0]
    assert "_weights_only_unpickler" in hint[1]  # torch.load reads no plain pickle: torch's unpickler does
    with pytest.raises(pickle.UnpicklingError):
        load_with_hint(path, ("import torch", hint[1]))
    assert load_with_hint(path, hint)["a"].tolist() == [0.0, 1.0, 2.0]


def test_no_allowlist_hint_beside_unsafe_globals(tmp_path):
    """Allowing the benign names would not make torch load a pickle that also names unsafe ones."""
    path = tmp_path / "mixed.pkl"
    path.write_bytes(pickle.dumps({"a": np.arange(3.0), "f": print}, protocol=2))
    codes = {f.code for f in open_checkpoint(path).findings}
    assert codes == {"UNSAFE_PICKLE"}


def test_a_pickle_torch_cannot_read_gets_no_hint_that_fails(tmp_path):
    """Protocol 4 (STACK_GLOBAL, MEMOIZE, FRAME): torch's unpickler reads none of it, whatever is allowed."""
    path = tmp_path / "p4.pkl"
    path.write_bytes(pickle.dumps({"a": np.arange(3.0)}, protocol=4))
    ckpt = open_checkpoint(path)
    check_remedy(ckpt, path)
    assert "STACK_GLOBAL" in ckpt.findings[0].message
