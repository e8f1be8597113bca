"""The transformers callback in real Trainer runs (tiny GPT-2 on CPU): a good run is left as it was, a
run whose weights go NaN stops at its first NaN save, a run killed mid-save resumes from last_good."""

from __future__ import annotations

import hashlib
import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import ckinspect
from tests.conftest import REPO, cli_env

pytest.importorskip("transformers")

from ckinspect.integrations.transformers import CkinspectCallback  # noqa: E402
from tests.integrations.runs import HF_STEPS, Started, hf_nan_after, hf_trainer  # noqa: E402

pytestmark = pytest.mark.frameworks


def _digests(out: Path, names=("model.safetensors", "optimizer.pt", "scheduler.pt", "rng_state.pth")) -> dict:
    return {
        f"{folder.name}/{name}": hashlib.sha256((folder / name).read_bytes()).hexdigest()
        for folder in sorted(out.glob("checkpoint-*"))
        for name in names
    }


def test_a_good_run_is_left_as_it_was(tmp_path, caplog):
    hf_trainer(tmp_path / "plain", []).train()
    callback = CkinspectCallback(fail_on="error")
    with caplog.at_level(logging.INFO, logger="ckinspect"):
        hf_trainer(tmp_path / "judged", [callback]).train()
    assert sorted(p.name for p in (tmp_path / "judged").iterdir()) == sorted(
        p.name for p in (tmp_path / "plain").iterdir()
    )
    for step in (2, 4, 6):  # no file of ours in the checkpoints
        assert sorted(p.name for p in (tmp_path / "judged" / f"checkpoint-{step}").iterdir()) == sorted(
            p.name for p in (tmp_path / "plain" / f"checkpoint-{step}").iterdir()
        )
    assert _digests(tmp_path / "judged") == _digests(tmp_path / "plain")  # same weights, moments, RNG
    assert [(c.path.name, c.verdict, c.values_checked) for c in callback.verdicts] == [
        ("checkpoint-2", "good", True),
        ("checkpoint-4", "good", True),
        ("checkpoint-6", "good", True),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        f"ckinspect: {tmp_path / 'judged' / f'checkpoint-{s}'} (step {s}): good" for s in (2, 4, 6)
    ]


def test_nan_weights_stop_the_run_at_the_first_nan_save(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ckinspect.CheckpointRejected) as raised:
        hf_trainer(out, [hf_nan_after(4), CkinspectCallback(fail_on="error")]).train()
    rejected = raised.value
    assert rejected.candidate.path == out / "checkpoint-4"
    assert rejected.candidate.verdict == "damaged"
    assert rejected.findings[0].code == "NONFINITE"
    assert str(rejected) == (
        f"{out / 'checkpoint-4'}: damaged: NONFINITE: model.safetensors: transformer.h.0.mlp.c_fc.weight: "
        "1 NaN and 0 Inf among 256 values"
    )
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]  # no further save
    assert ckinspect.last_good(out) == out / "checkpoint-2"


def test_without_fail_on_the_nan_save_is_logged_and_training_goes_on(tmp_path, caplog):
    out = tmp_path / "run"
    callback = CkinspectCallback(fail_on=None)
    with caplog.at_level(logging.INFO, logger="ckinspect"):
        hf_trainer(out, [hf_nan_after(4), callback]).train()
    assert [(c.path.name, c.verdict) for c in callback.verdicts] == [
        ("checkpoint-2", "good"),
        ("checkpoint-4", "damaged"),
        ("checkpoint-6", "damaged"),
    ]
    bad = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(bad) == 2 and "damaged: NONFINITE" in bad[0].getMessage()


def test_a_run_killed_mid_save_resumes_from_last_good_and_continues(tmp_path):
    from transformers.trainer_utils import get_last_checkpoint

    out = tmp_path / "run"
    killed = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("hf_killed.py")), str(out), "6"],
        capture_output=True, text=True, cwd=REPO, env=cli_env({"OMP_NUM_THREADS": "1"}), timeout=600,
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert get_last_checkpoint(str(out)) == str(out / "checkpoint-6")  # what the Trainer would resume from
    torn = ckinspect.judge_checkpoint(out / "checkpoint-6")
    assert torn.verdict != "good"

    resume = ckinspect.last_good(out)
    assert resume == out / "checkpoint-4"
    started = Started()
    callback = CkinspectCallback(fail_on="error")
    hf_trainer(out, [started, callback]).train(resume_from_checkpoint=resume)
    assert started.step == 4
    assert [(c.path.name, c.verdict) for c in callback.verdicts] == [("checkpoint-6", "good")]
    assert ckinspect.last_good(out) == out / "checkpoint-6"
    assert json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["global_step"] == HF_STEPS


def _two_ranks(out: Path, nan_after: int) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    return subprocess.run(
        [*command, str(Path(__file__).with_name("hf_ranks.py")), str(out), str(nan_after)],
        capture_output=True, text=True, cwd=REPO, env=cli_env({"OMP_NUM_THREADS": "1"}), timeout=600,
    )  # fmt: skip


@pytest.mark.torchrun
def test_two_ranks_every_rank_file_judged_and_a_nan_save_ends_the_job(tmp_path):
    good = _two_ranks(tmp_path / "good", 0)
    assert good.returncode == 0, good.stderr[-3000:]
    verdicts = json.loads((tmp_path / "good" / "verdicts.json").read_text())
    assert [(Path(v["path"]).name, v["verdict"]) for v in verdicts] == [(f"checkpoint-{s}", "good") for s in (2, 4, 6)]
    assert all({"rng_state_0.pth", "rng_state_1.pth"} <= set(v["parts"]) for v in verdicts)  # both ranks' files

    bad = _two_ranks(tmp_path / "bad", 4)
    assert bad.returncode != 0
    assert "CheckpointRejected" in bad.stderr and "checkpoint-4: damaged: NONFINITE" in bad.stderr
    assert sorted(p.name for p in (tmp_path / "bad").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    assert ckinspect.last_good(tmp_path / "bad") == tmp_path / "bad" / "checkpoint-2"


def test_rotated_saves_are_judged_before_the_trainer_deletes_them(tmp_path, monkeypatch):
    """save_total_limit=1: each save removes the one before, which the callback has judged by then, however
    slow the judge (here 1 s more than it takes: the steps in between take milliseconds)."""
    import time

    from ckinspect.integrations import verifier

    judge = verifier.judge_checkpoint

    def slow(*args, **kwargs):
        time.sleep(1)
        return judge(*args, **kwargs)

    monkeypatch.setattr(verifier, "judge_checkpoint", slow)
    out = tmp_path / "run"
    callback = CkinspectCallback(fail_on="error")
    hf_trainer(out, [callback], save_total_limit=1).train()
    assert [(c.path.name, c.verdict) for c in callback.verdicts] == [(f"checkpoint-{s}", "good") for s in (2, 4, 6)]
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-6"]
