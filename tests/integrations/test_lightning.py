"""The Lightning callback in real Lightning runs (CPU, a two-layer model): a good run is left as it was,
NaN weights stop the run at the first NaN checkpoint, a checkpoint torn by a crash is passed over by
last_good and the run resumes from the one before and continues."""

from __future__ import annotations

import logging

import pytest

import ckinspect

pytest.importorskip("lightning")

import torch  # noqa: E402

from ckinspect.integrations.lightning import CkinspectCallback  # noqa: E402
from tests.helpers.torch_files import cut  # noqa: E402
from tests.integrations.runs import lightning_data, lightning_module, lightning_trainer  # noqa: E402

pytestmark = pytest.mark.frameworks
NAMES = ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "epoch=0-step=6.ckpt"]


def _tensors(path):
    saved = torch.load(path, weights_only=False)  # our own test file
    return saved["state_dict"], saved["optimizer_states"][0]["state"]


def test_a_good_run_is_left_as_it_was(tmp_path, caplog):
    lightning_trainer(tmp_path / "plain", []).fit(lightning_module(), lightning_data())
    callback = CkinspectCallback(fail_on="error")
    with caplog.at_level(logging.INFO, logger="ckinspect"):
        lightning_trainer(tmp_path / "judged", [callback]).fit(lightning_module(), lightning_data())
    assert (
        sorted(p.name for p in (tmp_path / "judged").iterdir())
        == sorted(p.name for p in (tmp_path / "plain").iterdir())
        == NAMES
    )
    for name in NAMES:
        (weights, moments), (plain_weights, plain_moments) = (
            _tensors(tmp_path / "judged" / name),
            _tensors(tmp_path / "plain" / name),
        )
        assert all(torch.equal(weights[k], plain_weights[k]) for k in plain_weights)
        assert all(torch.equal(moments[i][k], plain_moments[i][k]) for i in plain_moments for k in plain_moments[i])
        assert "callbacks" not in torch.load(tmp_path / "judged" / name, weights_only=False) or not any(
            "Ckinspect" in key for key in torch.load(tmp_path / "judged" / name, weights_only=False)["callbacks"]
        )
    assert [(c.path.name, c.verdict, c.framework) for c in callback.verdicts] == [
        (n, "good", "lightning") for n in NAMES
    ]
    assert sum("good" in r.getMessage() for r in caplog.records if r.name == "ckinspect") == 3


def test_nan_weights_stop_the_run_at_the_first_nan_checkpoint(tmp_path):
    with pytest.raises(ckinspect.CheckpointRejected) as raised:
        lightning_trainer(tmp_path, [CkinspectCallback(fail_on="error")]).fit(
            lightning_module(nan_after=3), lightning_data()
        )
    rejected = raised.value
    assert rejected.candidate.path == tmp_path / "epoch=0-step=4.ckpt"
    assert rejected.findings[0].code == "NONFINITE" and "net.0.weight" in str(rejected)
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == NAMES[:2]  # no checkpoint after the bad one
    assert ckinspect.last_good(tmp_path) == tmp_path / NAMES[0]


def test_a_torn_checkpoint_is_passed_over_and_the_run_resumes(tmp_path):
    lightning_trainer(tmp_path, []).fit(lightning_module(), lightning_data())
    # Lightning renames a complete temporary file into place, without an fsync: a power cut right after
    # leaves the newest file short
    cut(tmp_path / NAMES[2], 0.5)
    resume = ckinspect.last_good(tmp_path)
    assert resume == tmp_path / NAMES[1]
    callback = CkinspectCallback(fail_on="error")
    trainer = lightning_trainer(tmp_path, [callback], max_steps=8)
    trainer.fit(lightning_module(), lightning_data(), ckpt_path=resume)
    assert trainer.global_step == 8
    assert [(c.path.name, c.verdict) for c in callback.verdicts] == [
        ("epoch=0-step=6-v1.ckpt", "good"),
        ("epoch=0-step=8.ckpt", "good"),
    ]
    assert ckinspect.last_good(tmp_path) == tmp_path / "epoch=0-step=8.ckpt"


def test_removed_checkpoints_are_judged_before_lightning_removes_them(tmp_path, monkeypatch):
    """save_top_k=1: each save removes the one before, which the callback has judged by then, however slow
    the judge (here 1 s more than it takes)."""
    import time

    from ckinspect.integrations import verifier

    judge = verifier.judge_checkpoint

    def slow(*args, **kwargs):
        time.sleep(1)
        return judge(*args, **kwargs)

    monkeypatch.setattr(verifier, "judge_checkpoint", slow)
    callback = CkinspectCallback(fail_on="error")
    lightning_trainer(tmp_path, [callback], keep=1).fit(lightning_module(), lightning_data())
    assert [(c.path.name, c.verdict) for c in callback.verdicts] == [(n, "good") for n in NAMES]
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == NAMES[2:]
