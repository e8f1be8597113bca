"""A file cut short never looks healthy in a report: the share of what it declares, its missing
tensors, and `ckinspect salvage`, in text, JSON and Markdown, as the TUI shows them (tests/tui/test_truncated.py)."""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest

from ckinspect.report.schema import SCHEMA_1


@pytest.fixture
def cut(tmp_path, samples):
    whole = tmp_path / "whole.pth"
    shutil.copy(samples / "stopped-30" / "tiny_resume.pth", whole)
    path = tmp_path / "tiny_resume.pth"
    path.write_bytes(whole.read_bytes()[:300_000])  # 49 of its 82 storages are whole: 33 tensors lack their bytes
    return path


def test_json_gives_the_declared_share_and_the_missing_tensors(run_cli, cut):
    result = run_cli(cut, "--report", "--format", "json")
    assert result.returncode == 1  # CORRUPT
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA_1)
    entry = report["files"][0]
    assert entry["optimizer_share"] == pytest.approx(0.535925, abs=1e-6)  # schema 1's meaning: the bytes present
    cut_short = entry["cut_short"]
    assert cut_short["missing_tensors"] == 33
    declared = cut_short["declared_bytes"]
    assert declared["optimizer"] > entry["groups"]["optimizer"]["bytes"]
    assert cut_short["declared_optimizer_share"] == pytest.approx(declared["optimizer"] / sum(declared.values()))
    assert round(cut_short["declared_optimizer_share"], 3) == 0.650
    assert cut_short["salvage"] == f"ckinspect salvage {cut} OUT"
    missing = [t["name"] for t in entry["tensors"] if t.get("missing")]
    assert len(missing) == 33 and "optimizer.state.19.exp_avg_sq" in missing
    assert "model.tok_embeddings.weight" not in missing


def test_json_of_a_whole_file_has_no_cut_short(run_cli, samples):
    entry = json.loads(run_cli(samples / "stopped-30" / "tiny_resume.pth", "--report", "--format", "json").stdout)
    assert entry["files"][0]["cut_short"] is None
    assert not any("missing" in t for t in entry["files"][0]["tensors"])


def squeezed(text: str) -> str:
    """The text without its whitespace: a long path wraps at slashes, so where lines break is the renderer's choice."""
    return "".join(text.split())


def test_text_gives_the_declared_share_and_points_to_salvage(run_cli, cut):
    out = run_cli(cut, "--report", "--quick").stdout
    assert "optimizer share 53.6%" not in out
    assert "optimizer share 65.0% of the declared sizes (53.6% of the bytes present)" in out
    expected = f"✗ 33 of 83 tensors missing (cut short): ckinspect salvage {cut} OUT keeps the whole ones"
    assert squeezed(expected) in squeezed(out)
    lines = out.split("\ngroup ", 1)[1].splitlines()
    assert lines[0].split() == ["tensors", "present", "declared", "share"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:6] if line.strip()}
    assert rows["optimizer"] == ["60", "148.5", "KiB", "257.3", "KiB", "65.0%"]
    assert rows["model"] == ["21", "128.6", "KiB", "128.6", "KiB", "32.5%"]


def test_text_marks_missing_tensors_in_the_listing(run_cli, tmp_path, samples):
    cut = tmp_path / "short.pth"
    cut.write_bytes((samples / "stopped-30" / "tiny_resume.pth").read_bytes()[:150_000])
    out = run_cli(cut, "--report", "--quick").stdout
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("model.", "optimizer."))}
    assert len(rows) == 12, out  # the largest 12 of 83
    entry = json.loads(run_cli(cut, "--report", "--quick", "--format", "json").stdout)["files"][0]
    missing = {t["name"] for t in entry["tensors"] if t.get("missing")}
    marked = {name for name, cells in rows.items() if cells[-2:] == ["missing", "—"]}
    # those whose bytes are gone say so, as in the TUI, instead of a size and a share of the file
    assert (
        marked
        == missing & rows.keys()
        == {
            "optimizer.state.0.exp_avg",
            "optimizer.state.0.exp_avg_sq",
            "optimizer.state.7.exp_avg",
            "optimizer.state.7.exp_avg_sq",
        }
    )
    assert rows["model.output.weight"][-2:] == ["KiB", "21.8%"]


def test_markdown_gives_the_declared_share_and_points_to_salvage(run_cli, cut):
    out = run_cli(cut, "--report", "--quick", "--format", "markdown").stdout
    assert "Optimizer share: **65.0%** of the declared sizes (53.6% of the bytes present)." in out
    assert f"**33 of 83 tensors missing** (cut short): `ckinspect salvage {cut} OUT` keeps the whole ones." in out
    overview = next(line for line in out.splitlines() if line.startswith(f"| `{cut}`"))
    assert "| 65.0% |" in overview
    assert "| optimizer | 60 | 148.5 KiB | " in out


def test_a_folder_summary_gives_the_declared_share(run_cli, cut, samples):
    shutil.copy(samples / "stopped-30" / "tiny_resume.pth", cut.parent / "whole_copy.pth")
    (cut.parent / "whole.pth").unlink()
    out = run_cli(cut.parent, "--report", "--quick").stdout
    row = next(line for line in out.splitlines() if line.startswith("tiny_resume.pth"))
    assert "65.0%" in row and "53.6%" not in row
    assert squeezed("✗ 33 of 83 tensors missing (cut short)") in squeezed(out)
