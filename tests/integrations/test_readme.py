"""README's "Python API" and "In your training script" examples, run as they stand against tiny real runs.

Each ```python block of those two sections is executed in a fresh namespace holding what the block
leaves to the reader (a model, its TrainingArguments ...), in a folder where `samples/` and a small run
`runs/` exist; then the test checks what the block did. A block added to README without a case here
fails the count."""

from __future__ import annotations

import os
import re

import pytest
import torch

from tests.conftest import REPO
from tests.helpers.torch_files import cut, save_resume

pytestmark = pytest.mark.frameworks


def _blocks() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    start, end = text.index("\n## Python API\n"), text.index("\n## ", text.index("\n## In your training script\n") + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], flags=re.DOTALL)


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    (tmp_path / "samples").symlink_to(REPO / "samples")
    runs = tmp_path / "runs"
    runs.mkdir()
    for step in (10, 20, 30):
        save_resume(runs / f"step_{step}.pth", step)
    cut(runs / "step_30.pth", 0.5)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_block_has_a_case():
    assert len(_blocks()) == len(CASES)


def run_api(block, workdir, capsys):
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)
    assert namespace["resume"].name == "step_20.pth"  # the torn step 30 passed over
    printed = capsys.readouterr().out
    assert "step_30.pth 30 damaged CORRUPT" in printed
    assert "runs/no-such-file.pth: no such file or folder" in printed


def run_transformers(block, workdir, capsys):
    from tests.integrations.runs import Tokens, hf_trainer

    trainer = hf_trainer(workdir / "hf", [])
    namespace = {"model": trainer.model, "args": trainer.args, "train_dataset": Tokens()}
    exec(compile(block, "README.md", "exec"), namespace)  # a first launch: nothing to resume from
    assert sorted(p.name for p in (workdir / "hf").glob("checkpoint-*")) == [
        "checkpoint-2",
        "checkpoint-4",
        "checkpoint-6",
    ]
    (callback,) = [c for c in namespace["trainer"].callback_handler.callbacks if hasattr(c, "verdicts")]
    assert [c.verdict for c in callback.verdicts] == ["good"] * 3


def run_lightning(block, workdir, capsys):
    from tests.integrations.runs import lightning_data, lightning_module

    namespace = {"model": lightning_module(), "train_loader": lightning_data()}
    exec(compile(block, "README.md", "exec"), namespace)  # first launch
    assert namespace["trainer"].global_step == 6
    cut(workdir / "checkpoints" / "epoch=0-step=6.ckpt", 0.5)  # torn, as a crash leaves it
    namespace = {"model": lightning_module(), "train_loader": lightning_data()}
    exec(compile(block, "README.md", "exec"), namespace)  # resumed from step 4, on to 6 again
    assert namespace["trainer"].global_step == 6
    assert (workdir / "checkpoints" / "epoch=0-step=6-v1.ckpt").is_file()


def run_accelerate(block, workdir, capsys):
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    done: list[int] = []

    def train_one_step(step):
        accelerator.backward(model(torch.randn(2, 4)).square().mean())
        optimizer.step()
        optimizer.zero_grad()
        done.append(step)

    namespace = {"accelerator": accelerator, "train_one_step": train_one_step, "steps": 4}
    exec(compile(block, "README.md", "exec"), namespace)
    assert done == [1, 2, 3, 4]
    namespace["steps"] = 6
    exec(compile(block, "README.md", "exec"), namespace)  # the next launch resumes from step_4
    assert done == [1, 2, 3, 4, 5, 6]
    assert sorted(os.listdir(workdir / "checkpoints")) == ["step_2", "step_4", "step_6"]


def run_dcp(block, workdir, capsys):
    import warnings

    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    namespace = {"state": {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 1}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # single process, no process group
        exec(compile(block, "README.md", "exec"), namespace)
    assert capsys.readouterr().out.splitlines()[-1] == "good"


CASES = [run_api, run_transformers, run_lightning, run_accelerate, run_dcp]


@pytest.mark.parametrize("index", range(len(CASES)), ids=[case.__name__ for case in CASES])
def test_readme_block(index, workdir, capsys):
    CASES[index](_blocks()[index], workdir, capsys)
