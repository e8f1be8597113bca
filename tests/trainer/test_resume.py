"""A run stopped at 30 and resumed ends bit-identical to 60 straight steps; each missing piece of
state makes it end elsewhere."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO, cli_env
from trainer import FORMAT
from trainer.__main__ import main
from trainer.checkpoint import load
from trainer.data import Batches, Position
from trainer.experiment import eval_loss, logit_drift, max_abs_diff, optimizer_share, render
from trainer.model import ModelConfig, build_model, infer_config
from trainer.train import convert_step, deterministic, get_lr


def _resume(folder):
    return load(folder / "tiny_resume.pth")


def _assert_identical(a, b):
    assert a["model"].keys() == b["model"].keys()
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    for pid, state in a["optimizer"]["state"].items():
        for key, tensor in state.items():
            assert torch.equal(tensor, b["optimizer"]["state"][pid][key]), (pid, key)
    for mine, theirs in zip(a["rng"], b["rng"], strict=True):
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert (a["step"], a["epoch"], a["epoch_step"]) == (b["step"], b["epoch"], b["epoch_step"])


@pytest.mark.parametrize("order", ["random", "epoch"])
def test_stop_at_30_and_resume_is_bit_identical_to_60_straight(runs, order):
    straight, resumed = _resume(runs[order] / "straight"), _resume(runs[order] / "resumed")
    _assert_identical(straight, resumed)
    assert straight["step"] == 60 and straight["run"]["order"] == order
    assert max_abs_diff(straight, resumed) == (0.0, 0.0)


def test_epoch_order_resume_lands_mid_epoch_and_crosses_epochs(runs):
    stopped, straight = _resume(runs["epoch"] / "stopped"), _resume(runs["epoch"] / "straight")
    per_epoch = Batches("epoch", 0, 8, 64).batches_per_epoch
    assert (stopped["epoch"], stopped["epoch_step"]) == divmod(30, per_epoch)
    assert stopped["epoch"] >= 1 and stopped["epoch_step"] > 0  # the skip is exercised, not trivially 0
    assert (straight["epoch"], straight["epoch_step"]) == divmod(60, per_epoch)


def test_epoch_order_skips_seen_batches_by_position_alone():
    walked = Batches("epoch", 3, 8, 64)
    for _ in range(27):
        walked.next()
    jumped = Batches("epoch", 3, 8, 64)
    jumped.position = Position(walked.position.epoch, walked.position.epoch_step)
    for _ in range(20):
        a, b = walked.next(), jumped.next()
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_resume_file_has_everything_a_resume_needs(runs):
    ck = _resume(runs["random"] / "stopped")
    assert ck["format"] == FORMAT
    assert {"model", "optimizer", "epoch", "epoch_step", "step", "world_size", "rng", "config", "run"} <= ck.keys()
    assert (ck["step"], ck["world_size"], ck["run"]["steps"]) == (30, 1, 60)
    assert all(t.dtype == torch.float32 for t in ck["model"].values())
    assert set(ck["rng"][0]) == {"torch", "batch"}
    weights = load(runs["random"] / "stopped" / "tiny.pth")
    assert weights.keys() == ck["model"].keys() and all(t.dtype == torch.float16 for t in weights.values())
    # tied embeddings stay one storage in both files
    assert weights["output.weight"].data_ptr() == weights["tok_embeddings.weight"].data_ptr()
    assert ck["model"]["output.weight"].data_ptr() == ck["model"]["tok_embeddings.weight"].data_ptr()
    assert 0.6 < optimizer_share(ck) < 0.7  # AdamW's two moments: twice the weights


@pytest.mark.parametrize("ablation", ["fresh-optimizer", "rewound-data", "from-fp16"])
def test_each_ablation_ends_measurably_away_from_straight(runs, ablation):
    straight, end = _resume(runs["random"] / "straight"), _resume(runs[ablation])
    dw, _ = max_abs_diff(straight, end)
    assert dw > 1e-5
    assert eval_loss(end["model"], end["config"]) != eval_loss(straight["model"], straight["config"])
    assert end["run"]["ablations"] == [ablation]


def test_get_lr_warms_up_then_decays_to_a_tenth():
    assert get_lr(0, 60) == pytest.approx(3e-3 / 6)
    assert get_lr(5, 60) == pytest.approx(3e-3)
    assert get_lr(60, 60) == pytest.approx(3e-4)
    assert all(get_lr(s, 60) >= get_lr(s + 1, 60) for s in range(5, 60))


def test_world_size_change_converts_the_step_as_minimind_does():
    assert convert_step(30, 2, 1) == 60
    assert convert_step(30, 1, 2) == 15
    assert convert_step(31, 1, 2) == 15
    assert convert_step(30, 2, 2) == 30


def test_logit_drift_of_fp16_weights_is_small_but_nonzero(runs):
    ck = _resume(runs["random"] / "straight")
    drift = logit_drift(ck["model"], ck["config"], dtype=torch.float16, seed=0)
    assert 0.0 < drift["max_abs"] < 1e-2 and 0.0 < drift["mean_abs"] <= drift["max_abs"]
    assert drift["top1_agreement"] > 0.95 and drift["positions"] == 8 * 64
    same = logit_drift(ck["model"], ck["config"], other_state=load(runs["random"] / "straight" / "tiny.pth"))
    assert same == drift  # rounding in memory and the fp16 file on disk are the same thing
    rng_before = torch.get_rng_state()
    logit_drift(ck["model"], ck["config"])
    assert torch.equal(torch.get_rng_state(), rng_before)


@pytest.mark.slow  # two more real training runs (30 steps here, 30 more in a fresh process)
def test_cli_stop_and_resume_from_the_command_line(tmp_path, runs):
    """The issue's 'done when', as a user types it: the stop through the CLI's `main` in this process, the
    resume in a real `python -m trainer` process (the straight run is the in-process one: same defaults)."""
    assert main(["train", "--out", str(tmp_path / "B"), "--steps", "60", "--stop-after", "30"]) == 0
    proc = subprocess.run(
        [sys.executable, "-m", "trainer", "train", "--out", "B", "--steps", "60", "--resume", "B/tiny_resume.pth"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=cli_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "resume: step 30" in proc.stdout
    _assert_identical(_resume(runs["random"] / "straight"), _resume(tmp_path / "B"))
    assert sorted(p.name for p in (tmp_path / "B").iterdir()) == ["tiny.pth", "tiny_resume.pth"]


def test_user_errors_are_one_line_and_exit_2(tmp_path, runs, capsys):
    assert main(["train", "--out", str(tmp_path), "--steps", "60", "--resume", str(tmp_path / "nope.pth")]) == 2
    assert "no resume file" in capsys.readouterr().err
    stopped = runs["random"] / "stopped" / "tiny_resume.pth"
    assert main(["train", "--out", str(tmp_path), "--steps", "60", "--resume", str(stopped), "--order", "epoch"]) == 2
    assert "--order epoch differs" in capsys.readouterr().err
    assert main(["train", "--out", str(tmp_path), "--steps", "20", "--resume", str(stopped)]) == 2
    assert "nothing to do" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_every_file_the_trainer_writes_loads_weights_only(runs):
    # the DCP row's folders hold .distcp parts and a .metadata (trainer.checkpoint.load_dcp reads them)
    files = [p for folder in runs.values() for p in folder.rglob("*") if p.is_file() and "dcp" not in p.parts]
    assert len(files) >= 14 and all(p.suffix == ".pth" for p in files)
    for path in files:
        assert torch.load(path, weights_only=True) is not None


def test_committed_samples_load_weights_only_and_resumed_matches_straight():
    samples = REPO / "samples"
    for path in samples.rglob("*.pth"):
        assert torch.load(path, weights_only=True) is not None
    _assert_identical(_resume(samples / "straight-60"), _resume(samples / "resumed-60"))
    for ablation in ("fresh-optimizer", "rewound-data", "from-fp16"):
        dw, _ = max_abs_diff(_resume(samples / "straight-60"), _resume(samples / f"ablation-{ablation}"))
        assert dw > 0.0
    interrupted = samples / "interrupted"
    tmp = interrupted / "tiny_resume.pth.tmp"
    assert (interrupted / "tiny_resume.pth").read_bytes() == (samples / "stopped-30" / "tiny_resume.pth").read_bytes()
    assert 0 < tmp.stat().st_size < (interrupted / "tiny_resume.pth").stat().st_size
    with pytest.raises(RuntimeError, match="failed finding central directory"):
        torch.load(tmp, weights_only=True)
    assert math.isfinite(_resume(samples / "straight-60")["loss"])


def test_verify_reports_exact_resume_and_nonzero_ablations(experiment):
    result, _ = experiment
    rows = {row["run"]: row for row in result["rows"]}
    assert rows["resumed"]["max_abs_dw"] == rows["resumed"]["max_abs_dopt"] == rows["resumed"]["loss_gap"] == 0.0
    assert rows["epoch/resumed"]["max_abs_dw"] == rows["epoch/resumed"]["max_abs_dopt"] == 0.0
    assert rows["dcp"]["max_abs_dw"] == rows["dcp"]["max_abs_dopt"] == rows["dcp"]["loss_gap"] == 0.0
    for ablation in ("fresh-optimizer", "rewound-data", "from-fp16"):
        assert rows[ablation]["max_abs_dw"] > 0.0 and rows[ablation]["loss_gap"] != 0.0
    sizes = result["file_bytes"]
    assert sizes["fp16_weights"] < sizes["fp32_weights"] < sizes["resume"]
    assert 300_000 < sizes["resume"] < 600_000
    assert 0.6 < result["optimizer_share"] < 0.7
    assert result["logit_drift"]["max_abs"] > 0.0 and result["logit_drift"]["top1_agreement"] > 0.95
    assert result["ok"]
    table = render(result)
    assert "stop 30 + resume  " in table and "stop 30 + resume (DCP sharded save)" in table and "PASS" in table
    json.dumps(result)  # --json prints exactly this


def test_a_weights_only_file_maps_back_to_its_config(runs):
    weights = load(runs["random"] / "straight" / "tiny.pth")
    assert infer_config(weights) == ModelConfig()
    assert infer_config({"w": torch.zeros(3)}) is None
    rebuilt = build_model(infer_config(weights))
    rebuilt.load_state_dict({k: v.float() for k, v in weights.items()})


def test_epoch_order_gives_each_rank_its_own_share_of_the_permutation():
    ranks = [Batches("epoch", 0, 8, 64, rank=r, world_size=2) for r in range(2)]
    assert ranks[0].batches_per_epoch == ranks[1].batches_per_epoch == (ranks[0].windows // 2) // 8
    shares = [set(b._rank_indices(0).tolist()) for b in ranks]
    assert not shares[0] & shares[1]
    assert len(shares[0]) == len(shares[1]) == ranks[0].windows // 2
    assert shares[0] | shares[1] <= set(range(ranks[0].windows))


def test_deterministic_settings_are_scoped_to_the_run():
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # not 1 already (the suite's xdist workers run torch on one thread)
    try:
        threads, det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
        with deterministic(1):
            assert torch.get_num_threads() == 1 and torch.are_deterministic_algorithms_enabled()
        assert (torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()) == (threads, det) == (2, det)
    finally:
        torch.set_num_threads(before)
