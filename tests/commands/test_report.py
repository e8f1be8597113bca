"""`ckinspect --report` end to end, through the CLI's `main` in this process, on files torch wrote."""

import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest

from ckinspect.report.schema import SCHEMA_1
from tests.conftest import SAMPLES, run_cli


def report_json(*args):
    proc = run_cli("--report", "--format", "json", *map(str, args))
    assert proc.returncode in (0, 1), proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA_1)
    return proc.returncode, data


def codes(entry):
    return [f["code"] for f in entry["findings"]]


def test_good_resume_file_shows_optimizer_share_and_no_findings(ckpts):
    proc = run_cli("--report", ckpts["good_resume.pth"])
    assert proc.returncode == 0, proc.stderr
    assert "trainer layout" in proc.stdout and "step 2" in proc.stdout
    assert "optimizer share" in proc.stdout and "✓ no findings" in proc.stdout


def test_json_bytes_of_a_real_resume_file(ckpts):
    code, data = report_json(ckpts["good_resume.pth"], "--quick")
    (entry,) = data["files"]
    params = (16 * 8 + 8 * 8 + 8 + 8 + 8) * 4
    assert code == 0 and entry["format"] == "torch-zip" and entry["layout"] == "trainer"
    assert entry["groups"]["model"] == {"tensor_count": 5, "bytes": params}
    # AdamW: exp_avg + exp_avg_sq per parameter, plus a one-element float32 step each
    assert entry["groups"]["optimizer"] == {"tensor_count": 15, "bytes": 2 * params + 5 * 4}
    assert entry["groups"]["rng"]["tensor_count"] == 1
    assert entry["optimizer_share"] == pytest.approx((2 * params + 20) / entry["tensor_bytes"], abs=1e-6)
    assert entry["metadata"]["step"] == 2 and entry["metadata"]["world_size"] == 1
    assert data["summary"] == {"files": 1, "errors": 0, "warnings": 0, "infos": 0}


@pytest.mark.parametrize(
    ("name", "code", "exit_default", "exit_warning"),
    [
        ("no_rng_resume.pth", "RESUME_INCOMPLETE", 0, 1),
        ("fp16_resume.pth", "HALF_PRECISION_RESUME", 0, 1),
        ("mismatch_resume.pth", "OPTIMIZER_MISMATCH", 1, 1),
        ("bloat.pth", "STORAGE_BLOAT", 0, 1),
    ],
)
def test_each_structural_finding_from_a_file_on_disk(ckpts, name, code, exit_default, exit_warning):
    status, data = report_json(ckpts[name], "--quick")
    assert codes(data["files"][0]) == [code]
    assert status == exit_default
    assert run_cli("--report", "--quick", "--fail-on", "warning", ckpts[name]).returncode == exit_warning
    assert run_cli("--report", "--quick", "--fail-on", "never", ckpts[name]).returncode == 0


def test_fp16_weights_file_is_not_a_resume_file(ckpts):
    status, data = report_json(ckpts["weights.pth"], "--quick")
    assert status == 0 and data["files"][0]["findings"] == [] and data["files"][0]["layout"] == "state_dict"


def test_value_scan_runs_unless_quick(ckpts):
    quick, _ = report_json(ckpts["nan_weights.pth"], "--quick")
    full, data = report_json(ckpts["nan_weights.pth"])
    assert quick == 0 and full == 1
    assert "NONFINITE" in codes(data["files"][0])


def test_folder_reports_each_checkpoint_and_a_summary(ckpts):
    proc = run_cli("--report", "--quick", ckpts["root"])
    assert proc.returncode == 1  # the optimizer mismatch is an error
    for name in ("good_resume.pth", "mismatch_resume.pth", "bloat.pth", "model.safetensors", "optimizer.pt"):
        assert name in proc.stdout
    assert "summary" in proc.stdout and "checkpoints:" in proc.stdout.splitlines()[-1]


def test_hf_trainer_folder(ckpts):
    status, data = report_json(ckpts["hf_folder"], "--quick")
    by_name = {e["path"].rsplit("/", 1)[-1]: e for e in data["files"]}
    model, optim = by_name["model.safetensors"], by_name["optimizer.pt"]
    assert model["layout"] == optim["layout"] == "hf-trainer"
    assert model["metadata"]["step"] == 2 and model["groups"]["model"]["tensor_count"] == 5
    assert optim["groups"]["optimizer"]["tensor_count"] == 15 and optim["findings"] == []
    assert codes(model) == ["RESUME_INCOMPLETE"] and "RNG" in model["findings"][0]["message"]


def test_dcp_folder_is_one_checkpoint_with_roles(ckpts):
    status, data = report_json(ckpts["dcp"], "--quick")
    (entry,) = data["files"]
    assert entry["format"] == "dcp" and entry["layout"] == "dcp"
    assert entry["groups"]["model"]["tensor_count"] == 5 and entry["groups"]["optimizer"]["tensor_count"] == 15
    assert entry["groups"]["rng"]["tensor_count"] == 1
    assert entry["metadata"]["step"] == 2 and entry["findings"] == []
    status, data = report_json(ckpts["dcp_no_rng"], "--quick")
    assert codes(data["files"][0]) == ["RESUME_INCOMPLETE"]


def test_markdown_and_output_file(ckpts, tmp_path):
    out = tmp_path / "summary.md"
    proc = run_cli("--report", "--quick", "--format", "markdown", "--output", out, ckpts["no_rng_resume.pth"])
    assert proc.returncode == 0 and proc.stdout == ""
    text = out.read_text()
    assert text.startswith("## ckinspect report") and "**RESUME_INCOMPLETE**" in text
    assert [p.name for p in tmp_path.iterdir()] == ["summary.md"]  # no temporary left behind


def test_text_fits_80_columns(ckpts):
    proc = run_cli("--report", "--quick", ckpts["root"], env={"COLUMNS": "80"})
    # only a path wider than the line (tmp folders are long under xdist) overflows it, whole, on its own line
    too_long = [line for line in proc.stdout.splitlines() if len(line) > 80]
    assert all(Path(line.strip()).exists() for line in too_long), too_long


def test_missing_path_is_one_line_and_exit_2(tmp_path):
    proc = run_cli("--report", tmp_path / "nope.pth")
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "nope.pth" in proc.stderr


def test_unwritable_output_is_exit_2(ckpts, tmp_path):
    proc = run_cli("--report", "--quick", "--output", tmp_path / "no" / "such" / "dir.json", ckpts["weights.pth"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_folder_without_checkpoints_is_exit_2(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    proc = run_cli("--report", tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


def test_leftover_tmp_beside_a_checkpoint(ckpts, tmp_path):
    main = tmp_path / "ckpt.pth"
    main.write_bytes(ckpts["good_resume.pth"].read_bytes())
    data = main.read_bytes()
    (tmp_path / "ckpt.pth.tmp").write_bytes(data[: len(data) // 2])  # a save killed half way
    status, report = report_json(tmp_path, "--quick")
    (entry,) = report["files"]
    assert codes(entry) == ["LEFTOVER_TMP"] and "ckpt.pth.tmp" in entry["findings"][0]["message"]


def test_trainer_samples_good_resume_file(ckpts):
    status, data = report_json(SAMPLES / "stopped-30" / "tiny_resume.pth", "--quick")
    (entry,) = data["files"]
    assert status == 0 and entry["findings"] == [] and entry["layout"] == "trainer"
    assert 0.6 < entry["optimizer_share"] < 0.7  # AdamW's two moments: twice the fp32 weights
    assert entry["metadata"]["step"] == 30 and entry["metadata"]["world_size"] == 1


def test_trainer_samples_full_report(ckpts):
    status, data = report_json(SAMPLES)
    assert status == 0
    flagged = {Path(e["path"]).relative_to(SAMPLES).as_posix(): codes(e) for e in data["files"] if e["findings"]}
    # the interrupted save is the only thing wrong with the samples
    expected = (
        {"interrupted/tiny_resume.pth": ["LEFTOVER_TMP"]}
        if importlib.util.find_spec("ckinspect.analysis.leftovers")
        else {}
    )
    assert flagged == expected
    weights = [e for e in data["files"] if e["path"].endswith("tiny.pth")]
    assert weights and all(e["layout"] == "state_dict" and e["groups"]["model"]["tensor_count"] for e in weights)


def test_report_value_scan_finds_a_flipped_byte_and_nan_that_quick_does_not(tmp_path, open_ckpt):
    import torch

    from tests.helpers.raw_zip import flip_byte

    torch.manual_seed(0)
    state = {"tok.weight": torch.randn(40, 8), "norm.weight": torch.ones(8)}
    state["tok.weight"][2, 3] += 1.0
    torch.save(state, tmp_path / "b.pt")
    ckpt = open_ckpt(tmp_path / "b.pt")
    flip_byte(tmp_path / "b.pt", ckpt.storages[ckpt.tensor("norm.weight").storage_key].offset + 3)
    bad = {"w": torch.tensor([1.0, float("nan"), 1e5])}
    torch.save(bad, tmp_path / "nan.pt")
    proc = run_cli("--report", tmp_path / "b.pt", tmp_path / "nan.pt", "--format", "json")
    assert proc.returncode == 1, proc.stderr
    found = {(f["code"], f.get("tensor")) for entry in json.loads(proc.stdout)["files"] for f in entry["findings"]}
    assert {("CORRUPT", "norm.weight"), ("NONFINITE", "w"), ("FP16_OVERFLOW", "w")} <= found
    assert run_cli("--report", tmp_path / "b.pt", "--quick").returncode == 0


def test_the_listing_and_its_checks_run_with_the_collector_paused(ckpts, monkeypatch):
    """commands.report._list pauses the cyclic collector over each target's reading and the checks after it (a
    160,000-tensor resume file's checks set off a full pass over the whole listing, 0.30 of 2.28 CPU-s, that finds
    nothing to free); the collector is on again after."""
    import gc

    from ckinspect.commands import report
    from ckinspect.formats.discover import find_checkpoints

    enabled: list[bool] = []

    def inspect_path(target, **kwargs):
        enabled.append(gc.isenabled())
        checkpoint = real(target, **kwargs)
        enabled.append(gc.isenabled())
        return checkpoint

    real = report.inspect_path
    monkeypatch.setattr(report, "inspect_path", inspect_path)
    targets = find_checkpoints([ckpts["good_resume.pth"], SAMPLES / "stopped-30" / "tiny_resume.pth"])
    assert gc.isenabled()
    listed = report._list(targets, structure_only=True)
    assert [c.layout for c in listed] == ["trainer", "trainer"]
    assert enabled == [False] * 4 and gc.isenabled()
