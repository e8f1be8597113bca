"""One definition of "good" on runs the real frameworks made (issue 27): last-good, `--verify`, the run view
(TUI and `--report`) and watch give the same answer; a candidate whose values hold NaN is stepped back
from; framework bookkeeping (Lightning's default ModelCheckpoint `kth_value = inf`) is no damage."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from ckinspect.analysis.inspect import inspect_path
from ckinspect.analysis.runs import last_good
from ckinspect.cli import main
from ckinspect.jobs.watch import Follower
from tests.analysis.runs.fixtures import framework_run

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]


def poison(path: Path, container: str, name: str | None = None) -> str:
    """Put a NaN into one weight of a real framework's file, saved back with torch as the framework does."""
    data = torch.load(path, map_location="cpu", weights_only=False)
    weights = data[container] if container else data
    key = name or next(k for k, v in weights.items() if torch.is_floating_point(v))
    weights[key] = weights[key].clone()
    weights[key].view(-1)[0] = float("nan")
    torch.save(data, path)
    return key


def answers(run: Path, capsys) -> dict[str, str | None]:
    """The newest good checkpoint as each consumer sees it."""
    out: dict[str, str | None] = {}
    status = main(["last-good", str(run)])
    out["last-good"] = capsys.readouterr().out.strip() if status == 0 else None
    status = main(["last-good", str(run), "--verify"])
    out["--verify"] = capsys.readouterr().out.strip() if status == 0 else None
    view = last_good(run, everything=True)  # what the TUI's run view calls
    out["run view"] = str(view.last_good.path) if view.last_good else None
    main(["--report", str(run), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    if report.get("runs"):  # a folder of single files (Lightning's) is a file listing, not a run view
        out["--report"] = report["runs"][0]["last_good"]
    events = Follower(run, settle=30.0, clock=time.time).poll(once=True)
    latest = {e.checkpoint.path: e for e in events}  # a save judged again (REJUDGED): its latest verdict
    good = [e.checkpoint for e in latest.values() if e.kind != "in-progress" and e.checkpoint.good]
    out["watch"] = str(max(good, key=lambda c: c.step or -1).path) if good else None
    return out


def test_lightning_default_checkpoint_callback_is_no_damage(tmp_path, capsys):
    run = framework_run("lightning", tmp_path)
    newest = run / "epoch=0-step=6.ckpt"
    assert main(["--report", str(newest), "--format", "json"]) == 0
    findings = json.loads(capsys.readouterr().out)["files"][0]["findings"]
    assert [(f["code"], f["severity"]) for f in findings] == [("BOOKKEEPING_SENTINEL", "info")]
    assert "kth_value" in findings[0]["message"] and "ModelCheckpoint" in findings[0]["message"]
    (kth,) = [t for t in inspect_path(newest, quick=True).tensors if t.name.endswith(".kth_value")]
    assert kth.group == "other"
    assert set(answers(run, capsys).values()) == {str(newest)}


def test_lightning_nan_weights_are_stepped_back_from_everywhere(tmp_path, capsys):
    run = framework_run("lightning", tmp_path)
    poison(run / "epoch=0-step=6.ckpt", "state_dict")
    previous = str(run / "epoch=0-step=4.ckpt")
    assert set(answers(run, capsys).values()) == {previous}
    # --quick keeps the structure-only answer, and says on stderr that the values were not read
    assert main(["last-good", str(run), "--quick"]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == str(run / "epoch=0-step=6.ckpt")
    assert "--quick: structure only; the values of epoch=0-step=6.ckpt were not read" in out.err
    main(["last-good", str(run), "--format", "json"])
    listed = {Path(c["path"]).name: c for c in json.loads(capsys.readouterr().out)["run"]["checkpoints"]}
    assert listed["epoch=0-step=6.ckpt"]["verdict"] == "damaged"
    assert listed["epoch=0-step=6.ckpt"]["values_checked"] is True
    assert any(r.startswith("NONFINITE: state_dict.") for r in listed["epoch=0-step=6.ckpt"]["reasons"])


def test_hf_trainer_nan_in_model_file_is_stepped_back_from(tmp_path, capsys):
    run = framework_run("hf-trainer", tmp_path)
    folders = sorted(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    newest = folders[-1]
    from safetensors.torch import load_file, save_file

    weights = load_file(newest / "model.safetensors")
    name = next(iter(weights))
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] = float("nan")
    save_file(weights, newest / "model.safetensors", metadata={"format": "pt"})
    assert main(["last-good", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(folders[-2])


# ------------------------------------------------------------------------------------ parts agree on the step


def test_hf_trainer_stale_optimizer_inside_a_newer_checkpoint_disagrees(tmp_path, capsys):
    run = framework_run("hf-trainer", tmp_path)
    newest = run / "checkpoint-6"
    shutil.copy2(run / "checkpoint-4" / "optimizer.pt", newest / "optimizer.pt")  # step 4's file, its own time
    assert main(["last-good", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "checkpoint-4")
    main(["last-good", str(run), "--format", "json"])
    listed = {Path(c["path"]).name: c for c in json.loads(capsys.readouterr().out)["run"]["checkpoints"]}
    assert listed["checkpoint-6"]["verdict"] == "damaged"
    assert listed["checkpoint-6"]["reasons"] == [
        "PARTS_DISAGREE: optimizer.pt records step 4 (its optimizer's per-parameter step) but trainer_state.json's "
        "global_step is 6: the parts come from different saves"
    ]
    # the scheduler from another save too
    shutil.copy2(run / "checkpoint-2" / "optimizer.pt", newest / "optimizer.pt")
    shutil.copy2(run / "checkpoint-2" / "scheduler.pt", newest / "scheduler.pt")
    main(["last-good", str(run), "--format", "json"])
    listed = {Path(c["path"]).name: c for c in json.loads(capsys.readouterr().out)["run"]["checkpoints"]}
    assert [r.split(" (")[0] for r in listed["checkpoint-6"]["reasons"]] == [
        "PARTS_DISAGREE: optimizer.pt records step 2",
        "PARTS_DISAGREE: scheduler.pt records step 2",
    ]
    assert listed["checkpoint-4"]["verdict"] == "good"


def test_lightning_optimizer_state_from_another_save_disagrees(tmp_path, capsys):
    run = framework_run("lightning", tmp_path)
    newest, older = run / "epoch=0-step=6.ckpt", run / "epoch=0-step=4.ckpt"
    data = torch.load(newest, map_location="cpu", weights_only=False)
    data["optimizer_states"] = torch.load(older, map_location="cpu", weights_only=False)["optimizer_states"]
    torch.save(data, newest)
    assert main(["--report", str(newest), "--format", "json"]) == 1
    findings = json.loads(capsys.readouterr().out)["files"][0]["findings"]
    (error,) = [f for f in findings if f["severity"] == "error"]
    assert error["code"] == "PARTS_DISAGREE"
    assert error["message"].startswith("global_step is 6 but the optimizer's per-parameter step is 4 ")
    assert main(["last-good", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(older)


# ------------------------------------------------------------------- across a save, and across the run


def test_dcp_rank_file_rewritten_after_its_metadata_is_not_good(tmp_path, capsys):
    run = framework_run("dcp", tmp_path)  # the bundled trainer under torchrun, 2 gloo ranks
    newest = run / "tiny_step000006"
    committed = (newest / ".metadata").stat().st_mtime
    os.utime(newest / "__1_0.distcp", (committed + 30, committed + 30))  # rank 1 saved the step again
    assert main(["last-good", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "tiny_step000004")
    main(["last-good", str(run), "--format", "json"])
    listed = {Path(c["path"]).name: c for c in json.loads(capsys.readouterr().out)["run"]["checkpoints"]}
    assert listed["tiny_step000006"]["reasons"] == [
        "WRITTEN_AFTER_COMMIT: __1_0.distcp modified after .metadata, which the save writes last: rewritten since "
        "the save committed, so the parts may not belong together"
    ]


def test_hf_trainer_part_rewritten_after_trainer_state_is_not_good(tmp_path, capsys):
    run = framework_run("hf-trainer", tmp_path)
    newest = run / "checkpoint-6"
    committed = (newest / "trainer_state.json").stat().st_mtime
    os.utime(newest / "optimizer.pt", (committed + 30, committed + 30))
    assert main(["last-good", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "checkpoint-4")


def test_a_run_mixed_with_another_models_checkpoints_is_not_crossed(tmp_path, capsys):
    """A restart with a wider model overwrote the newest save; the older ones are the first run's. When the
    newest is damaged, last-good must not name the first run's checkpoint (its shapes do not load)."""
    run = framework_run("lightning", tmp_path)
    newest = run / "epoch=0-step=6.ckpt"
    data = torch.load(newest, map_location="cpu", weights_only=False)
    data["state_dict"] = {k: torch.zeros(*(2 * d for d in v.shape)) for k, v in data["state_dict"].items()}
    data.pop("optimizer_states")  # the other model's save: weights only, so not itself a resume point
    torch.save(data, newest)
    assert main(["last-good", str(run)]) == 1
    err = capsys.readouterr().err
    main(["last-good", str(run), "--format", "json"])
    listed = {Path(c["path"]).name: c for c in json.loads(capsys.readouterr().out)["run"]["checkpoints"]}
    for name in ("epoch=0-step=4.ckpt", "epoch=0-step=2.ckpt"):
        assert listed[name]["verdict"] == "not-resumable"
        assert listed[name]["reasons"][0].startswith(
            "MIXED_RUN: its model differs from epoch=0-step=6.ckpt's, the run's newest: 4 tensor(s) of other shapes"
        )
    assert "no good checkpoint" in err


# ------------------------------------------------------- Lightning's loop counters against the optimizer


def _with_loops_of(newest: Path, older: Path, key: str | None = None) -> None:
    """`newest` saved again with the loop state of `older` (all of it, or one of `loops.fit_loop`'s entries)."""
    data = torch.load(newest, map_location="cpu", weights_only=False)
    theirs = torch.load(older, map_location="cpu", weights_only=False)["loops"]
    if key is None:
        data["loops"] = theirs
    else:
        data["loops"]["fit_loop"][key] = theirs["fit_loop"][key]
    torch.save(data, newest)


def _report(path: Path, capsys) -> tuple[int, list[tuple[str, str]]]:
    status = main(["--report", str(path), "--format", "json"])
    findings = json.loads(capsys.readouterr().out)["files"][0]["findings"]
    return status, [(f["code"], f["message"]) for f in findings if f["severity"] != "info"]


def test_lightning_healthy_runs_with_accumulation_validation_and_two_optimizers_are_no_damage(tmp_path, capsys):
    """Gradient accumulation (the optimizer steps on every other batch and on an epoch's odd last one),
    saves mid-epoch, after validation and at epoch end, a step scheduler, ReduceLROnPlateau, EarlyStopping;
    manual optimization with two optimizers (global_step counts both): the counters move apart by design,
    and every save is good."""
    run = framework_run("lightning-loops", tmp_path)
    for name, newest in (("accum", "end-epoch=2-step=15.ckpt"), ("manual", "end-epoch=1-step=28.ckpt")):
        assert main(["--report", str(run / name), "--format", "json"]) == 0
        files = json.loads(capsys.readouterr().out)["files"]
        assert len(files) == {"accum": 16, "manual": 16}[name]
        for entry in files:
            assert {f["code"] for f in entry["findings"]} <= {"BOOKKEEPING_SENTINEL"}, entry["path"]
        assert main(["last-good", str(run / name)]) == 0
        assert capsys.readouterr().out.strip() == str(run / name / newest)
    # saved before the first validation: EarlyStopping's best_score is still inf (ReduceLROnPlateau's `best`
    # too, a plain float): bookkeeping, in the `other` group, never damage
    first = run / "accum" / "steps-epoch=0-step=2.ckpt"
    assert main(["--report", str(first), "--format", "json"]) == 0
    (early,) = [
        f for f in json.loads(capsys.readouterr().out)["files"][0]["findings"] if "EarlyStopping" in f["tensor"]
    ]
    assert (early["code"], early["severity"]) == ("BOOKKEEPING_SENTINEL", "info")
    assert early["tensor"].endswith(".best_score") and "EarlyStopping's best monitored score" in early["message"]
    (best,) = [t for t in inspect_path(first, quick=True).tensors if t.name == early["tensor"]]
    assert best.group == "other"


def test_lightning_loop_state_of_another_save_disagrees(tmp_path, capsys):
    """A save whose loop state is another save's (the trainer would resume at step 10 of epoch 1 with the
    optimizer of step 15): held against the optimizer's own step and the epoch; last-good steps back."""
    run = framework_run("lightning-loops", tmp_path) / "accum"
    newest = run / "end-epoch=2-step=15.ckpt"
    _with_loops_of(newest, run / "end-epoch=1-step=10.ckpt")
    assert _report(newest, capsys) == (1, [
        ("PARTS_DISAGREE", "the loops record 10 optimizer steps (loops.fit_loop.epoch_loop.automatic_optimization."
         "optim_progress.optimizer.step.total.completed) but the optimizer's per-parameter step is 15 "
         "(optimizer_states.0.state.*.step) and global_step is 15: the loop state comes from another save"),
        ("PARTS_DISAGREE", "epoch is 2 but the loops record epoch 1 (loops.fit_loop.epoch_progress.current.completed): "
         "the loop state comes from another save"),
    ])  # fmt: skip
    assert main(["last-good", str(run)]) == 0
    assert "step=14" in Path(capsys.readouterr().out.strip()).name


def test_lightning_batch_progress_behind_the_optimizer_disagrees(tmp_path, capsys):
    """Batch progress of an early save beside an optimizer that has stepped more often than there were batches."""
    run = framework_run("lightning-loops", tmp_path) / "accum"
    newest = run / "end-epoch=2-step=15.ckpt"
    _with_loops_of(newest, run / "steps-epoch=0-step=4.ckpt", "epoch_loop.batch_progress")
    assert _report(newest, capsys) == (1, [
        ("PARTS_DISAGREE", "the optimizer has stepped 15 times but the loops record 8 training batches processed "
         "(loops.fit_loop.epoch_loop.batch_progress.total.processed), and each step takes at least one: the loop "
         "state comes from another save"),
    ])  # fmt: skip


@pytest.mark.parametrize(
    ("mode", "newest", "older", "message"),
    [
        ("accum", "end-epoch=2-step=15.ckpt", "end-epoch=0-step=5.ckpt",
         "the loops record 5 batches that stepped (loops.fit_loop.epoch_loop.state_dict._batches_that_stepped) but "
         "15 optimizer steps (loops.fit_loop.epoch_loop.automatic_optimization.optim_progress.optimizer.step.total."
         "completed), one for each: the loop state comes from another save"),
        ("manual", "end-epoch=1-step=28.ckpt", "end-epoch=0-step=14.ckpt",
         "the loops record 9 batches that stepped (loops.fit_loop.epoch_loop.state_dict._batches_that_stepped) but "
         "18 training batches processed (loops.fit_loop.epoch_loop.batch_progress.total.processed), one for each: "
         "the loop state comes from another save"),
    ],
)  # fmt: skip
def test_lightning_batches_that_stepped_of_another_save_disagree(tmp_path, capsys, mode, newest, older, message):
    """Only the epoch loop's own state (`_batches_that_stepped`, the step its loggers log at) from an older
    save: every other counter agrees, that one does not (automatic: one per optimizer step; manual: per batch)."""
    run = framework_run("lightning-loops", tmp_path) / mode
    _with_loops_of(run / newest, run / older, "epoch_loop.state_dict")
    assert _report(run / newest, capsys) == (1, [("PARTS_DISAGREE", message)])


def test_lightning_manual_optimization_loops_of_another_save_disagree(tmp_path, capsys):
    """Two optimizers under manual optimization: global_step is the loops' count of every optimizer's step."""
    run = framework_run("lightning-loops", tmp_path) / "manual"
    newest = run / "end-epoch=1-step=28.ckpt"
    _with_loops_of(newest, run / "end-epoch=0-step=14.ckpt")
    assert _report(newest, capsys) == (1, [
        ("PARTS_DISAGREE", "the loops record 14 optimizer steps (loops.fit_loop.epoch_loop.manual_optimization."
         "optim_step_progress.total.completed) but global_step is 28: the loop state comes from another save"),
        ("PARTS_DISAGREE", "epoch is 1 but the loops record epoch 0 (loops.fit_loop.epoch_progress.current.completed): "
         "the loop state comes from another save"),
    ])  # fmt: skip
    assert main(["last-good", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(run / "steps-epoch=1-step=28.ckpt")  # the other save of step 28


def test_lightning_manual_optimization_of_the_raw_optimizer_is_no_damage(tmp_path, capsys):
    """One optimizer stepped raw under manual optimization (`self.optimizers(use_pl_optimizer=False).step()`):
    global_step stays 0 while the optimizer's step grows, by design; no save is damaged."""
    run = framework_run("lightning-loops", tmp_path) / "raw"
    newest = run / "epoch=1.ckpt"
    data = torch.load(newest, map_location="cpu", weights_only=False)
    steps = {int(s["step"]) for s in data["optimizer_states"][0]["state"].values()}
    assert (data["global_step"], steps) == (0, {18})  # 9 batches a epoch, stepped raw on each
    for path in (run / "epoch=0.ckpt", newest):
        assert _report(path, capsys) == (0, [])
    assert main(["last-good", str(run)]) == 0
    assert capsys.readouterr().out.strip() == str(newest)


def test_lightning_scheduler_state_of_another_save_disagrees(tmp_path, capsys):
    """The schedulers of step 10 (StepLR stepped 10 times, ReduceLROnPlateau once) in the save of step 15,
    whose loops counted 17 scheduler steps (15 + 2): the LR the run resumes with is another save's."""
    run = framework_run("lightning-loops", tmp_path) / "accum"
    newest = run / "end-epoch=2-step=15.ckpt"
    data = torch.load(newest, map_location="cpu", weights_only=False)
    older = torch.load(run / "end-epoch=1-step=10.ckpt", map_location="cpu", weights_only=False)
    data["lr_schedulers"] = older["lr_schedulers"]
    torch.save(data, newest)
    assert _report(newest, capsys) == (1, [
        ("PARTS_DISAGREE", "the schedulers' last_epoch come to 11 (10 + 1) (lr_schedulers.*.last_epoch) but the loops "
         "record 17 scheduler steps (loops.fit_loop.epoch_loop.scheduler_progress.total.completed): the scheduler "
         "state comes from another save"),
    ])  # fmt: skip
