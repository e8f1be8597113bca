"""One definition of "good" on runs the real frameworks made (issue 27): last-good, `--verify`, the run view
(TUI and `--report`) and watch give the same answer; a candidate whose values hold NaN is stepped back
from; framework bookkeeping (Lightning's default ModelCheckpoint `kth_value = inf`) is no damage."""

from __future__ import annotations

import json
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
    good = [e.checkpoint for e in events if e.checkpoint is not None and e.checkpoint.good]
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
