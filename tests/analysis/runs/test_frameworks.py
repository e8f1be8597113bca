"""last-good on runs made by the real frameworks, whole and then damaged the ways real incidents report:
a rank file missing, a zero-byte shard, a leftover tmp, a pointer (`latest`, the tracker) naming what is
not there, a state file never written. Each time last-good must step back to the right checkpoint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ckinspect.cli import main
from tests.analysis.runs.fixtures import framework_run

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]


def last_good(run: Path, capsys) -> tuple[int, str]:
    status = main(["last-good", str(run)])
    return status, capsys.readouterr().out.strip()


def listing(run: Path, capsys) -> dict:
    main(["last-good", str(run), "--format", "json"])
    return json.loads(capsys.readouterr().out)["run"]


def verdict(run_json: dict, name: str) -> dict:
    return next(c for c in run_json["checkpoints"] if Path(c["path"]).name == name)


def codes(entry: dict) -> set[str]:
    return {f["code"] for f in entry["findings"]}


def truncate(path: Path) -> None:
    path.write_bytes(b"")


def halve(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# ------------------------------------------------------------------------------------------- DeepSpeed


def test_deepspeed_whole_run(tmp_path, capsys):
    run = framework_run("deepspeed", tmp_path)
    assert (run / "latest").read_text().strip() == "global_step6"
    assert last_good(run, capsys) == (0, str(run / "global_step6"))
    newest = verdict(listing(run, capsys), "global_step6")
    assert newest["verdict"] == "good" and newest["step"] == 6
    assert sorted(Path(p["path"]).name for p in newest["parts"]) == [
        "mp_rank_00_model_states.pt",
        "zero_pp_rank_0_mp_rank_00_optim_states.pt",
        "zero_pp_rank_1_mp_rank_00_optim_states.pt",
    ]
    # DeepSpeed's own classes in its ZeRO files are named, and not held against the checkpoint
    assert any("deepspeed.runtime.fp16.loss_scaler.LossScaler" in n for n in newest["notes"])


@pytest.mark.parametrize(
    ("damage", "code"),
    [
        ("missing rank file", "MISSING_PARTS"),
        ("zero-byte shard", "CORRUPT"),
        ("leftover tmp", "LEFTOVER_TMP"),
        ("model states never written", "MISSING_PARTS"),
    ],
)
def test_deepspeed_damaged_steps_back(tmp_path, capsys, damage, code):
    run = framework_run("deepspeed", tmp_path)
    tag = run / "global_step6"
    if damage == "missing rank file":
        (tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    elif damage == "zero-byte shard":
        truncate(tag / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    elif damage == "leftover tmp":
        rank1 = tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
        os.replace(rank1, rank1.with_name(rank1.name + ".tmp"))
    else:
        (tag / "mp_rank_00_model_states.pt").unlink()
    assert last_good(run, capsys) == (0, str(run / "global_step4"))
    newest = verdict(listing(run, capsys), "global_step6")
    assert newest["verdict"] != "good" and code in codes(newest)
    if damage == "missing rank file":
        assert any(
            "zero_pp_rank_1_mp_rank_00_optim_states.pt is missing (dp world size 2" in r for r in newest["reasons"]
        )


def test_deepspeed_latest_names_a_missing_tag(tmp_path, capsys):
    run = framework_run("deepspeed", tmp_path)
    (run / "latest").write_text("global_step8")
    assert last_good(run, capsys) == (0, str(run / "global_step6"))
    found = listing(run, capsys)["findings"]
    assert [(f["code"], f["message"]) for f in found] == [
        ("MISSING_PARTS", f"{run.name}/latest names tag global_step8, which is not there")
    ]


def test_deepspeed_ranks_of_another_world_size_disagree(tmp_path, capsys):
    run = framework_run("deepspeed", tmp_path)
    # rank 1's ZeRO file of a step-4 save copied over step 6's: same world size, so only their content could tell;
    # an extra rank file beyond the recorded dp world size is what a save at another world size leaves
    extra = run / "global_step6" / "zero_pp_rank_2_mp_rank_00_optim_states.pt"
    extra.write_bytes((run / "global_step4" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").read_bytes())
    assert last_good(run, capsys) == (0, str(run / "global_step4"))
    assert "PARTS_DISAGREE" in codes(verdict(listing(run, capsys), "global_step6"))


def test_deepspeed_rank_file_of_an_older_step_disagrees(tmp_path, capsys):
    run = framework_run("deepspeed", tmp_path)
    # a crash between ranks' saves: rank 1's ZeRO file in global_step6 is still the one of step 4 (same world
    # size, same DeepSpeed: only the optimizer state's own step tells)
    stale = run / "global_step6" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    stale.write_bytes((run / "global_step4" / stale.name).read_bytes())
    assert last_good(run, capsys) == (0, str(run / "global_step4"))
    newest = verdict(listing(run, capsys), "global_step6")
    assert newest["verdict"] == "damaged"
    assert newest["reasons"] == [
        "PARTS_DISAGREE: zero_pp_rank_1_mp_rank_00_optim_states.pt records optimizer step 4 "
        "(optimizer_state_dict.base_optimizer_state.state.*.step) but mp_rank_00_model_states.pt records "
        "global_steps 6 (0 skipped): the parts come from different saves"
    ]
    # the untouched saves still agree, rank for rank
    assert verdict(listing(run, capsys), "global_step4")["verdict"] == "good"


@pytest.mark.remote
def test_deepspeed_rank_file_of_an_older_step_disagrees_in_s3_as_on_disk(tmp_path):
    """The same stale rank file, the run uploaded to a real S3 API server (moto on 127.0.0.1): the optimizer's
    one-element step is read by a range request, so the bucket gets the folder's verdict, reason for reason."""
    from tests.conftest import run_cli
    from tests.helpers.remote_servers import moto_s3, put_objects

    run = framework_run("deepspeed", tmp_path)
    stale = run / "global_step6" / "zero_pp_rank_1_mp_rank_00_optim_states.pt"
    stale.write_bytes((run / "global_step4" / stale.name).read_bytes())
    local = run_cli("last-good", run, "--format", "json")
    with moto_s3() as env:
        put_objects(env, "ckpts", {f"ds/{p.relative_to(run).as_posix()}": p for p in run.rglob("*") if p.is_file()})
        remote = run_cli("last-good", "s3://ckpts/ds/", "--format", "json", env=env)
        path = run_cli("last-good", "s3://ckpts/ds/", env=env)
    assert local.returncode == remote.returncode == path.returncode == 0, remote.stderr
    assert path.stdout == "s3://ckpts/ds/global_step4\n"

    def judged(text: str, root: str) -> dict[str, tuple[str, list[str]]]:
        listed = json.loads(text)["run"]["checkpoints"]
        return {c["path"].replace(root, "RUN"): (c["verdict"], c["reasons"]) for c in listed}

    on_disk, in_s3 = judged(local.stdout, str(run)), judged(remote.stdout, "s3://ckpts/ds")
    assert on_disk["RUN/global_step6"][0] == "damaged"
    assert on_disk["RUN/global_step6"][1][0].startswith(
        "PARTS_DISAGREE: zero_pp_rank_1_mp_rank_00_optim_states.pt records optimizer step 4"
    )
    assert in_s3 == on_disk


def test_deepspeed_samples_and_steps_disagree(tmp_path, capsys):
    run = framework_run("deepspeed", tmp_path)
    # the model states of step 4 under the tag of step 6, renamed by hand: its own counters still say step 4
    tag = run / "global_step6"
    (tag / "mp_rank_00_model_states.pt").write_bytes((run / "global_step4" / "mp_rank_00_model_states.pt").read_bytes())
    newest = verdict(listing(run, capsys), "global_step6")
    assert newest["verdict"] == "damaged"
    assert "PARTS_DISAGREE: tag global_step6 but mp_rank_00_model_states.pt records global_steps 4" in newest["reasons"]
    assert (
        "PARTS_DISAGREE: zero_pp_rank_0_mp_rank_00_optim_states.pt records optimizer step 6 "
        "(optimizer_state_dict.base_optimizer_state.state.*.step) but mp_rank_00_model_states.pt records "
        "global_steps 4 (0 skipped): the parts come from different saves"
    ) in newest["reasons"]


# --------------------------------------------------------------------------------------------- HF Trainer


def test_hf_trainer_whole_run(tmp_path, capsys):
    run = framework_run("hf-trainer", tmp_path)
    assert last_good(run, capsys) == (0, str(run / "checkpoint-6"))
    newest = verdict(listing(run, capsys), "checkpoint-6")
    assert newest["verdict"] == "good" and newest["step"] == 6
    roles = {Path(p["path"]).name: (p["role"], p["loaded_on_resume"]) for p in newest["parts"]}
    assert roles["rng_state_1.pth"] == ("rng", True)
    # training_args.bin pickles TrainingArguments: reported, but Trainer never loads it on resume
    assert roles["training_args.bin"] == ("settings", False)
    assert any(n.startswith("never loaded on resume") and "training_args.bin" in n for n in newest["notes"])


@pytest.mark.parametrize(
    ("damage", "code"),
    [
        ("missing rank file", "MISSING_PARTS"),
        ("zero-byte shard", "CORRUPT"),
        ("leftover tmp", "LEFTOVER_TMP"),
        ("trainer_state.json never written", "MISSING_PARTS"),
        ("optimizer cut short", "CORRUPT"),
    ],
)
def test_hf_trainer_damaged_steps_back(tmp_path, capsys, damage, code):
    run = framework_run("hf-trainer", tmp_path)
    folder = run / "checkpoint-6"
    if damage == "missing rank file":
        (folder / "rng_state_1.pth").unlink()
    elif damage == "zero-byte shard":
        truncate(folder / "model.safetensors")
    elif damage == "leftover tmp":
        os.replace(folder / "scheduler.pt", folder / "scheduler.pt.tmp")
    elif damage == "trainer_state.json never written":
        (folder / "trainer_state.json").unlink()
    else:
        halve(folder / "optimizer.pt")
    assert last_good(run, capsys) == (0, str(run / "checkpoint-4"))
    newest = verdict(listing(run, capsys), "checkpoint-6")
    assert newest["verdict"] != "good" and code in codes(newest)


def test_hf_trainer_folder_whose_state_disagrees(tmp_path, capsys):
    run = framework_run("hf-trainer", tmp_path)
    state = json.loads((run / "checkpoint-6" / "trainer_state.json").read_text())
    state["global_step"] = 8
    (run / "checkpoint-6" / "trainer_state.json").write_text(json.dumps(state))
    assert last_good(run, capsys) == (0, str(run / "checkpoint-4"))
    assert "PARTS_DISAGREE" in codes(verdict(listing(run, capsys), "checkpoint-6"))


def test_hf_trainer_rank_rng_file_missing_in_every_save(tmp_path, capsys):
    run = framework_run("hf-trainer", tmp_path)
    # rank 1 never wrote its RNG state (a disk full on that node, every save): no neighbour has it to compare
    # with, but rng_state_0.pth alone is what only a run of 2 or more processes writes (rng_state.pth otherwise)
    for folder in run.glob("checkpoint-*"):
        (folder / "rng_state_1.pth").unlink()
    status, out = last_good(run, capsys)
    assert (status, out) == (1, "")
    newest = verdict(listing(run, capsys), "checkpoint-6")
    assert newest["verdict"] == "incomplete"
    assert newest["reasons"] == [
        "MISSING_PARTS: rng_state_1.pth missing (rng_state_0.pth is there, which the Trainer writes only for "
        "a run of 2 or more processes; rank 1 resumes without its RNG state)"
    ]


# -------------------------------------------------------------------------------------------- Accelerate


def test_accelerate_whole_run(tmp_path, capsys):
    run = framework_run("accelerate", tmp_path)
    assert last_good(run, capsys) == (0, str(run / "checkpoints" / "checkpoint_2"))
    newest = verdict(listing(run, capsys), "checkpoint_2")
    assert {Path(p["path"]).name for p in newest["parts"]} >= {"random_states_0.pkl", "random_states_1.pkl"}


@pytest.mark.parametrize(
    ("damage", "code"),
    [
        ("missing rank file", "MISSING_PARTS"),
        ("zero-byte shard", "CORRUPT"),
        ("leftover tmp", "LEFTOVER_TMP"),
        ("scheduler never written", "MISSING_PARTS"),
    ],
)
def test_accelerate_damaged_steps_back(tmp_path, capsys, damage, code):
    run = framework_run("accelerate", tmp_path)
    folder = run / "checkpoints" / "checkpoint_2"
    if damage == "missing rank file":
        (folder / "random_states_1.pkl").unlink()
    elif damage == "zero-byte shard":
        truncate(folder / "optimizer.bin")
    elif damage == "leftover tmp":
        (folder / "model.safetensors.tmp").write_bytes((folder / "model.safetensors").read_bytes()[:100])
    else:
        (folder / "scheduler.bin").unlink()
    assert last_good(run, capsys) == (0, str(run / "checkpoints" / "checkpoint_1"))
    newest = verdict(listing(run, capsys), "checkpoint_2")
    assert newest["verdict"] != "good" and code in codes(newest)


# --------------------------------------------------------------------------------------------- Lightning


def test_lightning_whole_and_damaged(tmp_path, capsys):
    run = framework_run("lightning", tmp_path)
    assert last_good(run, capsys) == (0, str(run / "epoch=0-step=6.ckpt"))
    truncate(run / "epoch=0-step=6.ckpt")
    assert last_good(run, capsys) == (0, str(run / "epoch=0-step=4.ckpt"))
    halve(run / "epoch=0-step=4.ckpt")
    assert last_good(run, capsys) == (0, str(run / "epoch=0-step=2.ckpt"))


def test_lightning_save_that_died_before_its_rename(tmp_path, capsys):
    run = framework_run("lightning", tmp_path)
    newest = run / "epoch=0-step=6.ckpt"
    os.replace(newest, newest.with_name(newest.name + ".tmp"))
    assert last_good(run, capsys) == (0, str(run / "epoch=0-step=4.ckpt"))
    entry = verdict(listing(run, capsys), "epoch=0-step=6.ckpt")
    assert entry["verdict"] == "incomplete" and codes(entry) == {"LEFTOVER_TMP"}


# ------------------------------------------------------------------------------- DCP (the trainer, 2 ranks)


def test_dcp_whole_run_and_resume_parts(tmp_path, capsys):
    run = framework_run("dcp", tmp_path)
    assert last_good(run, capsys) == (0, str(run / "tiny_step000006"))
    assert sorted(p.name for p in (run / "tiny_step000006").iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    assert verdict(listing(run, capsys), "tiny_step000006")["step"] == 6


@pytest.mark.parametrize(
    ("damage", "code"),
    [
        ("missing rank file", "MISSING_PARTS"),
        ("zero-byte shard", "CORRUPT"),
        ("leftover tmp", "MISSING_PARTS"),
        (".metadata never written", "MISSING_PARTS"),
    ],
)
def test_dcp_damaged_steps_back(tmp_path, capsys, damage, code):
    run = framework_run("dcp", tmp_path)
    folder = run / "tiny_step000006"
    if damage == "missing rank file":
        (folder / "__1_0.distcp").unlink()
    elif damage == "zero-byte shard":
        truncate(folder / "__0_0.distcp")
    elif damage == "leftover tmp":
        os.replace(folder / ".metadata", folder / ".metadata.tmp")
    else:
        (folder / ".metadata").unlink()
    assert last_good(run, capsys) == (0, str(run / "tiny_step000004"))
    newest = verdict(listing(run, capsys), "tiny_step000006")
    assert newest["verdict"] != "good" and code in codes(newest)


# --------------------------------------------------------------------------------------------- Megatron


def test_megatron_whole_run(tmp_path, capsys):
    run = framework_run("megatron", tmp_path)
    assert last_good(run, capsys) == (0, str(run / "iter_0000030"))
    assert verdict(listing(run, capsys), "iter_0000030")["step"] == 30


@pytest.mark.parametrize(
    ("damage", "code"),
    [
        ("missing rank folder", "MISSING_PARTS"),
        ("zero-byte shard", "CORRUPT"),
        ("leftover tmp", "LEFTOVER_TMP"),
    ],
)
def test_megatron_damaged_steps_back(tmp_path, capsys, damage, code):
    run = framework_run("megatron", tmp_path)
    folder = run / "iter_0000030"
    if damage == "missing rank folder":
        for file in (folder / "mp_rank_01").iterdir():
            file.unlink()
        (folder / "mp_rank_01").rmdir()
    elif damage == "zero-byte shard":
        truncate(folder / "mp_rank_00" / "model_optim_rng.pt")
    else:
        rank1 = folder / "mp_rank_01" / "model_optim_rng.pt"
        os.replace(rank1, rank1.with_name(rank1.name + ".tmp"))
    assert last_good(run, capsys) == (0, str(run / "iter_0000020"))
    newest = verdict(listing(run, capsys), "iter_0000030")
    assert newest["verdict"] != "good" and code in codes(newest)
    if damage == "missing rank folder":
        assert any("mp_rank_01/model_optim_rng.pt missing (tensor parallel 2" in r for r in newest["reasons"])


def test_megatron_tracker_names_a_missing_iteration(tmp_path, capsys):
    run = framework_run("megatron", tmp_path)
    (run / "latest_checkpointed_iteration.txt").write_text("40")
    assert last_good(run, capsys) == (0, str(run / "iter_0000030"))
    assert [f["code"] for f in listing(run, capsys)["findings"]] == ["MISSING_PARTS"]


# ------------------------------------------------------------------------------------------------- none


def test_no_good_checkpoint_exits_1_with_the_reason(tmp_path, capsys):
    run = framework_run("dcp", tmp_path)
    for folder in run.iterdir():
        (folder / ".metadata").unlink()
    assert main(["last-good", str(run)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"ckinspect: no good checkpoint in {run} (3 found; the newest, tiny_step000006, is ")
