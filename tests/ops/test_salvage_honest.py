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
    assert set(findings) == {"OPTIMIZER_MISMATCH", "RESUME_INCOMPLETE"}
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
