"""Real checkpoint files for the report's CLI tests, written once per session by torch itself."""

from __future__ import annotations

import json
import random

import pytest


def _tiny_training_state():
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.arange(4)).pow(2).mean().backward()
        optimizer.step()
    return model, optimizer


def _resume(net, opt, **overrides):
    import torch

    state = {
        "format": "ckinspect-trainer/1",
        "model": net.state_dict(),
        "optimizer": opt.state_dict(),
        "step": 2,
        "epoch": 0,
        "world_size": 1,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate()},
        "config": {"vocab_size": 16, "dim": 8},
    }
    state.update(overrides)
    return {k: v for k, v in state.items() if v is not None}


@pytest.fixture(scope="session")
def ckpts(tmp_path_factory):
    """name -> path of small files, each made to raise (or not raise) one finding."""
    import torch
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("report_ckpts")
    model, optimizer = _tiny_training_state()
    paths = {}

    def save(name, obj, folder=root):
        path = folder / name
        torch.save(obj, path)
        paths[name] = path
        return path

    save("good_resume.pth", _resume(model, optimizer))
    save("no_rng_resume.pth", _resume(model, optimizer, rng=None))
    half = {k: v.half() for k, v in model.state_dict().items()}
    save("fp16_resume.pth", _resume(model, optimizer, model=half))
    other = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 4), torch.nn.LayerNorm(8))
    save("mismatch_resume.pth", _resume(other, optimizer))
    save("weights.pth", {k: v.half() for k, v in model.state_dict().items()})
    big = torch.zeros(1024, 1024)
    save("bloat.pth", {"rows": big[:8]})  # a view: the whole 4 MiB storage goes to disk
    nan = model.state_dict()
    nan["1.weight"] = nan["1.weight"].clone()
    nan["1.weight"][0, 0] = float("nan")
    save("nan_weights.pth", nan)

    folder = root / "run" / "checkpoint-2"
    folder.mkdir(parents=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, folder / "model.safetensors")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 2, "epoch": 0.5}))
    save("optimizer.pt", optimizer.state_dict(), folder)
    paths["hf_folder"] = folder
    paths["root"] = root

    dcp_root = tmp_path_factory.mktemp("report_dcp")
    paths["dcp"] = _save_dcp(dcp_root / "step-2", model, optimizer, rng=True)
    paths["dcp_no_rng"] = _save_dcp(dcp_root / "step-2-no-rng", model, optimizer, rng=False)
    return paths


def _save_dcp(folder, model, optimizer, rng):
    """A torch.distributed.checkpoint folder as a single process saves it (fqn-keyed optimizer state)."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(model, optimizer)
    state = {"model": model_sd, "optim": optim_sd, "step": 2, "epoch": 0}
    if rng:
        state["rng"] = {"torch": torch.get_rng_state()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.save(state, checkpoint_id=str(folder))
    return folder
