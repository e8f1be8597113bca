"""`ckinspect repair` as a user runs it (through the CLI's `main`, in this process): dry run, apply, undo,
exit statuses and output formats, on real torch files."""

from __future__ import annotations

import json

import pytest
import torch

from ckinspect.ops.repair import plan_repairs
from tests.conftest import REPO, run_cli
from tests.helpers.torch_files import bit_equal, cut, resume_state, save_resume, sha, tree_hashes


def _flat(obj, prefix=""):
    if isinstance(obj, torch.Tensor):
        return {prefix: obj}
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {}


@pytest.fixture
def cut_main(tmp_path):
    """Main resume file cut short (the save that broke it was not atomic), tmp whole and newer."""
    save_resume(tmp_path / "run_resume.pth", step=30, seed=1)
    cut(tmp_path / "run_resume.pth", 0.5)
    save_resume(tmp_path / "run_resume.pth.tmp", step=60, seed=2)
    return tmp_path


def test_done_when_cut_main_and_whole_tmp_apply_promotes_and_quarantines_the_broken_main(cut_main):
    main, tmp = cut_main / "run_resume.pth", cut_main / "run_resume.pth.tmp"
    broken_hash, tmp_hash = sha(main), sha(tmp)
    proc = run_cli("repair", cut_main, "--apply")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not tmp.exists()
    assert sha(main) == tmp_hash
    loaded = torch.load(main, weights_only=True)
    expected = resume_state(60, seed=2)
    assert loaded["step"] == 60
    flat_loaded, flat_expected = _flat(loaded), _flat(expected)
    assert flat_loaded.keys() == flat_expected.keys()
    assert all(bit_equal(flat_loaded[k], flat_expected[k]) for k in flat_expected)
    quarantined = [p for p in (cut_main / ".ckinspect-quarantine").rglob("run_resume.pth")]
    assert len(quarantined) == 1 and sha(quarantined[0]) == broken_hash
    manifest = json.loads((quarantined[0].parent / "manifest.json").read_text())
    assert manifest["status"] == "applied" and manifest["entries"][0]["action"] == "promote"


def test_unsure_pairs_are_left_alone_with_a_reason(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(4)}, tmp_path / "w.safetensors")
    save_file({"w": torch.ones(4)}, tmp_path / "w.safetensors.tmp")  # whole, no step in either
    save_resume(tmp_path / "gone.pth.tmp", step=5)
    cut(tmp_path / "gone.pth.tmp", 0.3)  # partial tmp, no main: nothing whole to keep
    before = tree_hashes(tmp_path)
    plan = plan_repairs(tmp_path)
    actions = {a.leftover.tmp.name: a.action for a in plan.actions}
    assert actions == {"w.safetensors.tmp": "nothing", "gone.pth.tmp": "nothing"}
    assert all(a.reason for a in plan.actions)
    proc = run_cli("repair", tmp_path, "--apply", "--format", "json")
    assert proc.returncode == 1  # left alone = needs the user's attention
    assert json.loads(proc.stdout)["summary"]["left_alone"] == 2
    assert tree_hashes(tmp_path) == before


def test_dry_run_changes_no_byte_and_exits_1_with_actions_pending(cut_main):
    cut(save_resume(cut_main / "other.pth.tmp", step=7), 0.5)
    save_resume(cut_main / "other.pth", step=6)
    before = tree_hashes(cut_main)
    stat_before = {p: p.stat().st_mtime_ns for p in cut_main.iterdir()}
    for fmt in ("text", "json", "markdown"):
        proc = run_cli("repair", cut_main, "--format", fmt)
        assert proc.returncode == 1, proc.stderr
    assert tree_hashes(cut_main) == before
    assert {p: p.stat().st_mtime_ns for p in cut_main.iterdir()} == stat_before
    assert not (cut_main / ".ckinspect-quarantine").exists()
    doc = json.loads(run_cli("repair", cut_main, "--format", "json").stdout)
    assert doc["mode"] == "dry-run" and doc["summary"]["pending"] == 2
    assert sorted(a["action"] for a in doc["actions"]) == ["promote", "set-aside"]
    assert "| action |" in run_cli("repair", cut_main, "--format", "markdown").stdout


def test_undo_restores_the_last_apply_byte_for_byte(cut_main):
    save_resume(cut_main / "x.pth", step=1)
    cut(save_resume(cut_main / "x.pth.tmp", step=2), 0.6)
    before = tree_hashes(cut_main)
    assert run_cli("repair", cut_main, "--apply").returncode == 0
    assert tree_hashes(cut_main) != before
    proc = run_cli("repair", cut_main, "--undo")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = {k: v for k, v in tree_hashes(cut_main).items() if not k.startswith(".ckinspect-quarantine")}
    assert after == before
    assert "no applied repair" in run_cli("repair", cut_main, "--undo").stdout  # a second undo has nothing left


def test_nothing_to_repair_exits_0(tmp_path):
    save_resume(tmp_path / "r.pth", step=1)
    proc = run_cli("repair", tmp_path)
    assert proc.returncode == 0 and "nothing to repair" in proc.stdout
    assert run_cli("repair", tmp_path / "missing").returncode == 2


def test_the_trainers_interrupted_sample_keeps_its_main_and_sets_the_partial_tmp_aside(tmp_path):
    import shutil

    sample = REPO / "samples" / "interrupted"
    tmps = sorted(sample.glob("*.pth.tmp"))
    assert tmps, "samples/interrupted has no .pth.tmp: regenerate samples with python -m trainer samples"
    folder = shutil.copytree(sample, tmp_path / "interrupted")
    main = folder / tmps[0].name.removesuffix(".tmp")
    main_hash, tmp_hash = sha(main), sha(folder / tmps[0].name)
    proc = run_cli("repair", folder, "--apply", "--format", "json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert [(a["action"], a["state"]) for a in doc["actions"]] == [("set-aside", "done")]
    assert sha(main) == main_hash and not (folder / tmps[0].name).exists()
    assert [sha(p) for p in (folder / ".ckinspect-quarantine").rglob(tmps[0].name)] == [tmp_hash]


def test_output_file_gets_the_report_and_stdout_stays_quiet(tmp_path):
    folder = tmp_path / "ck"
    folder.mkdir()
    save_resume(folder / "r.pth", step=1)
    cut(save_resume(folder / "r.pth.tmp", step=2), 0.5)
    out = tmp_path / "plan.json"
    proc = run_cli("repair", folder, "--format", "json", "--output", out)
    assert proc.returncode == 1 and proc.stdout == ""
    doc = json.loads(out.read_text())
    assert doc["schema"] == 1 and doc["actions"][0]["action"] == "set-aside"
    assert run_cli("repair", folder, "--fail-on", "never").returncode == 0  # CI that only wants the plan printed
