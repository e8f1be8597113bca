"""One set of model and optimizer container keys (vocab): the layouts, the diff's role guess and the check
for a file that says it holds no optimizer all read the same keys. Once they were three lists that
disagreed: `opt_state` was an optimizer to layouts but not to diff, `opt: None` no "no optimizer" to checks."""

from __future__ import annotations

from ckinspect.analysis.checks import states_no_optimizer
from ckinspect.analysis.diff import roles
from ckinspect.model import Checkpoint, TensorInfo
from ckinspect.vocab import MODEL_KEYS, OPTIMIZER_KEYS


def _ckpt(*names: str) -> Checkpoint:
    ckpt = Checkpoint(path="x.pt", format="torch-zip", file_bytes=0)  # type: ignore[arg-type]
    ckpt.tensors = [TensorInfo(name, "float32", (2,), (1,), str(i), 0) for i, name in enumerate(names)]
    return ckpt


def test_diff_guesses_roles_from_the_same_containers_as_the_layouts():
    for key in sorted(OPTIMIZER_KEYS):
        assert roles(_ckpt(f"{key}.state.0.exp_avg", "net.w"))[f"{key}.state.0.exp_avg"] == "optimizer", key
    for key in sorted(MODEL_KEYS):
        assert roles(_ckpt(f"{key}.layer.weight", "optimizer.state.0.exp_avg"))[f"{key}.layer.weight"] == "model", key


def test_an_empty_optimizer_under_any_container_key_says_no_optimizer():
    assert [key for key in sorted(OPTIMIZER_KEYS) if not states_no_optimizer({key: None})] == []
    assert not states_no_optimizer({"notes": None})


def _says_as_before(top, depth=4):
    """states_no_optimizer as it was before it skipped leaves by type: every value asked for its fields."""
    from collections.abc import Mapping

    from ckinspect.analysis.checks import _says_no_optimizer

    for key, value in top.items():
        if not isinstance(key, str):
            continue
        if _says_no_optimizer(key.lower(), value):
            return True
        fields = value if isinstance(value, Mapping) else getattr(value, "fields", None)
        if depth > 1 and isinstance(fields, Mapping) and _says_as_before(fields, depth - 1):
            return True
    return False


def test_a_file_says_no_optimizer_wherever_it_says_so_as_before():
    from types import SimpleNamespace

    from ckinspect.formats.unpickler import Opaque

    record = Opaque()  # a decoded record (argparse.Namespace ...): walked through its fields
    record.__setstate__({"Save_Optimizer": False})
    state_dict = {f"layers.{i}.w": TensorInfo("", "float32", (2,), (1,), str(i), 0) for i in range(50)}
    cases = [
        {"module": state_dict, "optimizer": TensorInfo("", "float32", (2,), (1,), "o", 0)},
        {"module": state_dict, "Optimizer": []},
        {"config": {"train": {"checkpoint": {"SAVE_WEIGHTS_ONLY": True}}}},
        {"config": {"train": {"checkpoint": {"deeper": {"save_optimizer": False}}}}},
        {"args": record},
        {"args": SimpleNamespace(fields={"save_optimizer": False})},
        {"shapes": [(1, 2)], "opt": (), 3: None, "lr": 0.1, "name": "x", "raw": b"", "on": True},
        {"module": state_dict, "opt": {}},
    ]
    answers = [states_no_optimizer(top) for top in cases]
    assert answers == [_says_as_before(top) for top in cases]
    assert answers == [False, True, True, False, True, True, False, True]
