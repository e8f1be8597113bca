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
