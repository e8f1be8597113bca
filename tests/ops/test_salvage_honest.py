"""A salvaged resume file is honest about what it lost (issue 27): the bundled trainer's real resume file,
cut short and salvaged, reports OPTIMIZER_MISMATCH (state entries without their moments) and
RESUME_INCOMPLETE (its RNG state is there but empty), and last-good does not pick it; a safetensors
salvage records the lost tensors in its header."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from ckinspect.cli import main

REPO = Path(__file__).resolve().parents[2]
RESUME = REPO / "samples" / "resumed-60" / "tiny_resume.pth"
EARLIER = REPO / "samples" / "stopped-30" / "tiny_resume.pth"


def cut_and_salvage(tmp_path: Path, out_name: str, capsys) -> Path:
    cut = tmp_path / "cut.pth"
    cut.write_bytes(RESUME.read_bytes()[:300_000])  # into the optimizer's moments
    out = tmp_path / out_name
    assert main(["salvage", str(cut), str(out)]) == 1  # tensors are missing
    capsys.readouterr()
    cut.unlink()
    return out


def test_salvaged_resume_file_reports_what_it_lacks(tmp_path, capsys):
    salvaged = cut_and_salvage(tmp_path, "tiny_step000060_resume.pth", capsys)
    assert main(["--report", str(salvaged), "--format", "json"]) == 1
    findings = {f["code"]: f for f in json.loads(capsys.readouterr().out)["files"][0]["findings"]}
    assert set(findings) == {"OPTIMIZER_MISMATCH", "RESUME_INCOMPLETE", "SALVAGED_PARTIAL"}
    assert findings["SALVAGED_PARTIAL"]["message"].startswith("salvaged from cut.pth: 33 tensors (")
    mismatch = findings["OPTIMIZER_MISMATCH"]["message"]
    assert mismatch.startswith("optimizer state of 11 of 20 parameters lacks what the others hold (9: exp_avg_sq; ")
    assert "'rng' is there but empty" in findings["RESUME_INCOMPLETE"]["message"]
    shutil.copy(EARLIER, tmp_path / "tiny_step000030_resume.pth")
    for flags in ([], ["--verify"]):
        assert main(["last-good", str(tmp_path), *flags]) == 0
        assert capsys.readouterr().out.strip() == str(tmp_path / "tiny_step000030_resume.pth")


def test_safetensors_salvage_records_what_it_lost(tmp_path, capsys):
    from safetensors import safe_open

    out = cut_and_salvage(tmp_path, "salvaged.safetensors", capsys)
    with safe_open(out, "np") as handle:
        meta = handle.metadata()
        kept = set(handle.keys())
    lost = json.loads(meta["salvage_missing"])
    assert meta["salvaged_from"] == "cut.pth"
    assert len(lost) == 33 and "optimizer.state.9.exp_avg_sq" in lost and not kept & set(lost)


WEIGHTS = REPO / "samples" / "resumed-60" / "tiny.pth"


def test_torch_salvage_of_a_weights_file_records_what_it_lost(tmp_path, capsys):
    import torch

    cut = tmp_path / "cut.pth"
    data = WEIGHTS.read_bytes()
    cut.write_bytes(data[: len(data) // 2])  # half its tensors are gone: a bare state dict says nothing of them
    out = tmp_path / "salvaged.pth"
    assert main(["salvage", str(cut), str(out)]) == 1
    capsys.readouterr()
    whole = torch.load(WEIGHTS, weights_only=True)
    saved = torch.load(out, weights_only=True)  # still what torch loads, safely
    record = saved.pop("ckinspect_salvage")
    assert record["salvaged_from"] == "cut.pth" and record["dropped"] == []
    assert sorted(record["missing"]) == sorted(set(whole) - set(saved)) and record["missing"]
    assert all(torch.equal(saved[k], whole[k]) for k in saved)
    assert main(["--report", str(out), "--format", "json"]) == 1
    (found,) = json.loads(capsys.readouterr().out)["files"][0]["findings"]
    n = len(record["missing"])
    assert (found["code"], found["severity"]) == ("SALVAGED_PARTIAL", "error")
    assert found["message"].startswith(f"salvaged from cut.pth: {n} tensors (")
    assert found["message"].endswith(
        "could not be recovered and are not in this file, so it is not the whole checkpoint"
    )
