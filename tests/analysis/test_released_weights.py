"""A released weights file with a step counter whose config says, levels down, that it saved no optimizer on
purpose is not RESUME_INCOMPLETE (issue 27); the same file without that switch still is."""

from __future__ import annotations

import json

import torch

from ckinspect.cli import main


def released(path, switch: bool) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
    checkpointing = {"every": 500, "save_optimizer": False} if switch else {"every": 500}
    torch.save(
        {"model": model.state_dict(), "step": 500,
         "config": {"train": {"lr": 3e-4, "checkpointing": checkpointing}, "model": {"dim": 16}}},
        path,
    )  # fmt: skip


def codes(path, capsys) -> list[str]:
    main(["--report", str(path), "--format", "json"])
    return [f["code"] for f in json.loads(capsys.readouterr().out)["files"][0]["findings"]]


def test_nested_no_optimizer_switch_is_a_release_not_an_incomplete_resume(tmp_path, capsys):
    released(tmp_path / "release.pt", switch=True)
    assert codes(tmp_path / "release.pt", capsys) == []
    released(tmp_path / "partial.pt", switch=False)
    assert codes(tmp_path / "partial.pt", capsys) == ["RESUME_INCOMPLETE"]
