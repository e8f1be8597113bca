"""Runs without the frameworks: layouts written here with the names and records each framework uses,
so the recognisers' rules are checked in the default suite (tests/analysis/runs/test_frameworks.py does
the same on runs the real frameworks made)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from ckinspect.analysis.runs import last_good
from ckinspect.cli import main

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "samples"


def ds_tag(run: Path, step: int, dp: int = 2, version: str = "0.19.8", partition: int | None = None,
           ranks: list[int] | None = None) -> Path:  # fmt: skip
    """A DeepSpeed ZeRO-1 tag as engine.save_checkpoint names and fills it (the keys its loader reads)."""
    tag = run / f"global_step{step}"
    tag.mkdir(parents=True)
    weight = torch.full((4, 4), float(step))
    torch.save(
        {
            "module": {"layer.weight": weight},
            "optimizer": None,
            "lr_scheduler": {"last_epoch": step},
            "global_steps": step,
            "global_samples": step * 4,
            "dp_world_size": dp,
            "mp_world_size": 1,
            "ds_version": version,
            "ds_config": {"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": 2},
        },
        tag / "mp_rank_00_model_states.pt",
    )
    for rank in range(dp) if ranks is None else ranks:
        flat = torch.full((8,), float(rank))
        state = {
            "optimizer_state_dict": {
                "zero_stage": 1,
                "partition_count": [partition or dp],
                "ds_version": version,
                "base_optimizer_state": {
                    "state": {0: {"exp_avg": flat, "exp_avg_sq": flat, "step": torch.tensor(float(step))}},
                    "param_groups": [{"params": [0], "lr": 1e-3}],
                },  # fmt: skip
                "single_partition_of_fp32_groups": [flat],
            },
            "ds_config": {"zero_optimization": {"stage": 1}},
            "ds_version": version,
        }
        torch.save(state, tag / f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
    (run / "latest").write_text(tag.name)
    return tag


@pytest.fixture
def ds_run(tmp_path: Path) -> Path:
    run = tmp_path / "ds"
    for step in (10, 20, 30):
        ds_tag(run, step)
    return run


def names(run: Path) -> dict[str, tuple[str, list[str]]]:
    result = last_good(run, everything=True)
    return {c.path.name: (c.verdict, [f.code for f in c.all_findings()]) for c in result.checkpoints}


def test_deepspeed_layout_good_and_missing_rank(ds_run, capsys):
    assert main(["last-good", str(ds_run)]) == 0
    assert capsys.readouterr().out == f"{ds_run / 'global_step30'}\n"
    (ds_run / "global_step30" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    assert main(["last-good", str(ds_run)]) == 0
    assert capsys.readouterr().out == f"{ds_run / 'global_step20'}\n"
    verdict, codes = names(ds_run)["global_step30"]
    assert (verdict, codes) == ("incomplete", ["MISSING_PARTS"])


def test_deepspeed_parts_that_disagree(tmp_path):
    run = tmp_path / "ds"
    ds_tag(run, 10)
    ds_tag(run, 20, partition=4)  # a rank file partitioned for another world size
    result = last_good(run, everything=True)
    newest = result.checkpoints[-1]
    assert newest.verdict == "damaged"
    assert [f.message for f in newest.findings] == [
        "zero_pp_rank_0_mp_rank_00_optim_states.pt is partitioned 4 ways but mp_rank_00_model_states.pt records "
        "dp world size 2",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt is partitioned 4 ways but mp_rank_00_model_states.pt records "
        "dp world size 2",
    ]
    assert result.last_good is not None and result.last_good.path.name == "global_step10"


def test_deepspeed_rank_files_of_two_versions_disagree(tmp_path):
    run = tmp_path / "ds"
    tag = ds_tag(run, 10)
    other = ds_tag(tmp_path / "other", 10, version="0.14.0")
    shutil.copy(other / "zero_pp_rank_1_mp_rank_00_optim_states.pt", tag)
    result = last_good(run, everything=True)
    assert [f.code for f in result.checkpoints[0].findings] == ["PARTS_DISAGREE"]
    assert "written by DeepSpeed 0.14.0" in result.checkpoints[0].findings[0].message
    assert result.last_good is None


def test_deepspeed_latest_pointing_nowhere_is_a_run_finding(ds_run):
    (ds_run / "latest").write_text("global_step40")
    result = last_good(ds_run)
    assert [(f.code, f.severity) for f in result.findings] == [("MISSING_PARTS", "error")]
    assert result.last_good is not None and result.last_good.path.name == "global_step30"


def test_newest_first_reads_only_what_it_needs(ds_run):
    """Without --format json, a run is read newest first and stops at the first good checkpoint."""
    result = last_good(ds_run)
    assert [c.verdict for c in result.checkpoints] == ["", "", "good"]
    assert last_good(ds_run, everything=True).last_good == result.last_good


def test_single_file_with_a_tmp_of_another_save_beside_it(tmp_path, capsys):
    run = tmp_path / "interrupted"
    shutil.copytree(SAMPLES / "interrupted", run)
    assert main(["last-good", str(run)]) == 0
    assert capsys.readouterr().out == f"{run / 'tiny_resume.pth'}\n"
    verdicts = names(run)
    assert verdicts["tiny.pth"][0] == "not-resumable"  # fp16 weights for inference
    assert verdicts["tiny_resume.pth"] == ("good", ["LEFTOVER_TMP"])


def test_a_save_that_died_before_its_first_rename(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    data = (SAMPLES / "stopped-30" / "tiny_resume.pth").read_bytes()
    (run / "tiny_resume.pth.tmp").write_bytes(data[: len(data) // 2])
    assert main(["last-good", str(run)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"ckinspect: no good checkpoint in {run} (1 found; the newest, tiny_resume.pth, ")
    assert "LEFTOVER_TMP: tiny_resume.pth.tmp: the save died before its rename" in captured.err


def test_resume_incomplete_is_not_good(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(SAMPLES / "stopped-30" / "tiny_resume.pth", run / "a_resume.pth")
    shutil.copy(SAMPLES / "ablation-fresh-optimizer" / "tiny.pth", run / "b.pth")  # weights only
    assert main(["last-good", str(run), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["command"] == "last-good" and report["run"]["last_good"] == str(run / "a_resume.pth")
    weights = next(c for c in report["run"]["checkpoints"] if c["path"].endswith("b.pth"))
    assert weights["verdict"] == "not-resumable"
    assert weights["reasons"] == ["weights only: no optimizer state or step to resume from"]


def hf_checkpoint(run: Path, step: int, ranks: int = 2, files: tuple[str, ...] = ()) -> Path:
    folder = run / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    model = {"w": torch.full((4,), float(step))}
    from safetensors.torch import save_file

    save_file(model, folder / "model.safetensors")
    torch.save({"state": {0: {"exp_avg": torch.zeros(4), "step": torch.tensor(float(step))}},
                "param_groups": [{"params": [0], "lr": 0.1}]}, folder / "optimizer.pt")  # fmt: skip
    torch.save({"last_epoch": step, "_step_count": step + 1}, folder / "scheduler.pt")
    for rank in range(ranks):
        torch.save({"cpu": torch.get_rng_state()}, folder / f"rng_state_{rank}.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": 0.5}))
    for name in files:
        (folder / name).unlink()
    return folder


def test_hf_rank_file_never_written_is_seen_against_the_other_checkpoints(tmp_path):
    run = tmp_path / "hf"
    hf_checkpoint(run, 2)
    hf_checkpoint(run, 4)
    hf_checkpoint(run, 6, files=("rng_state_1.pth",))
    result = last_good(run, everything=True)
    newest = result.checkpoints[-1]
    assert [f.message for f in newest.findings] == [
        # its own names already say so (rng_state_0.pth is written only by a run of 2 or more processes)
        "rng_state_1.pth missing (rng_state_0.pth is there, which the Trainer writes only for a run of 2 or more "
        "processes; rank 1 resumes without its RNG state)",
        "1 rng file(s), where the run's 2 other checkpoint(s) each have 2: a part was never written",
    ]
    assert result.last_good is not None and result.last_good.path.name == "checkpoint-4"


def test_hf_staging_folder_and_missing_optimizer(tmp_path):
    run = tmp_path / "hf"
    hf_checkpoint(run, 2)
    hf_checkpoint(run, 4, files=("optimizer.pt",))
    staged = hf_checkpoint(run, 6)
    staged.rename(run / "tmp-checkpoint-6")
    verdicts = names(run)
    assert verdicts["tmp-checkpoint-6"] == ("incomplete", ["MISSING_PARTS"])
    assert verdicts["checkpoint-4"] == ("incomplete", ["RESUME_INCOMPLETE", "MISSING_PARTS"])
    assert verdicts["checkpoint-2"][0] == "good"


def test_report_shows_the_run_view(ds_run, capsys):
    (ds_run / "global_step30" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").write_bytes(b"")
    assert main(["--report", str(ds_run), "--quick", "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (run,) = report["runs"]
    assert run["last_good"] == str(ds_run / "global_step20")
    assert [(c["step"], c["verdict"]) for c in run["checkpoints"]] == [(10, "good"), (20, "good"), (30, "damaged")]
    assert run["checkpoints"][2]["reasons"][0].startswith("CORRUPT: zero_pp_rank_0_mp_rank_00_optim_states.pt: ")

    main(["--report", str(ds_run), "--quick"])
    text = capsys.readouterr().out
    assert re.search(r"^★ +global_step20 +deepspeed +20 ", text, re.MULTILINE)
    assert "3 checkpoint(s); last good: global_step20" in text
    main(["--report", str(ds_run), "--quick", "--format", "markdown"])
    markdown = capsys.readouterr().out
    assert f"### Run `{ds_run}`" in markdown
    assert "| ★ | `global_step20` | deepspeed | 20 |" in markdown


def test_report_sarif_and_junit_carry_what_the_runs_records_say(ds_run, capsys, monkeypatch, tmp_path):
    """MISSING_PARTS from a checkpoint's records and from `latest` reach SARIF and JUnit, as they reach
    the exit status: a missing rank file is no file the report could have judged."""
    from tests.report.test_junit import parse
    from tests.report.test_sarif import results, validate

    (ds_run / "global_step30" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    (ds_run / "latest").write_text("global_step40")
    monkeypatch.chdir(ds_run.parent)
    assert main(["--report", "ds", "--quick", "--format", "sarif"]) == 1
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert {r for r in results(doc) if r[3] == "error"} == {  # (each rank file alone is RESUME_INCOMPLETE)
        ("MISSING_PARTS", "ds/global_step30", None, "error"),
        ("MISSING_PARTS", "ds", None, "error"),
    }
    assert main(["--report", "ds", "--quick", "--format", "junit"]) == 1
    suite, cases = parse(capsys.readouterr().out, tmp_path)
    assert {name: failures for name, (failures, _) in cases.items() if failures} == {
        "ds/global_step30": ["MISSING_PARTS"],
        "ds": ["MISSING_PARTS"],
    }
    assert suite.failures == 2


def test_last_good_usage_errors_are_one_line(tmp_path, capsys):
    assert main(["last-good", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == f"ckinspect: {tmp_path / 'nowhere'}: no such file or folder\n"
    file = tmp_path / "x.pth"
    file.write_bytes(b"")
    assert main(["last-good", str(file)]) == 2
    assert capsys.readouterr().err == f"ckinspect: {file}: not a folder\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["last-good", str(empty)]) == 1
    assert capsys.readouterr().err == f"ckinspect: no checkpoint found in {empty}\n"


def test_the_value_check_reads_the_candidates_listing_not_its_files_again(ds_run, monkeypatch):
    """The default answer reads the candidate's values from the parts its structural pass listed: each
    file is opened once, and a NaN in the newest save still sends the answer one save back."""
    import ckinspect.analysis.inspect as inspect_module

    flat = torch.full((8,), 1.0)
    flat[3] = float("nan")
    rank1 = ds_run / "global_step30" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    state = torch.load(rank1, weights_only=False)
    state["optimizer_state_dict"]["base_optimizer_state"]["state"][0]["exp_avg_sq"] = flat
    torch.save(state, rank1)
    opened: list[str] = []
    real = inspect_module.open_checkpoint

    def counted(path, **kwargs):
        opened.append(f"{path.parent.name}/{path.name}")
        return real(path, **kwargs)

    monkeypatch.setattr(inspect_module, "open_checkpoint", counted)
    result = last_good(ds_run)
    assert result.last_good is not None and result.last_good.path.name == "global_step20"
    newest = result.checkpoints[-1]
    assert (newest.verdict, newest.values_checked) == ("damaged", True)
    assert [r.split(":")[0] for r in newest.reasons] == ["NONFINITE"]
    assert sorted(opened) == sorted(
        f"global_step{s}/{p.name}" for s in (20, 30) for p in (ds_run / f"global_step{s}").iterdir()
    )
