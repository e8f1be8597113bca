"""Optimizer state tied to its parameters, checked against torch's own parameter order."""

from __future__ import annotations

import json

import torch

from ckinspect.analysis.inspect import inspect_path
from ckinspect.analysis.params import optimizer_params
from tests.conftest import run_cli


def test_each_state_index_maps_to_the_parameter_torch_gives_it(samples):
    from trainer.model import build_model

    path = samples / "stopped-30" / "tiny_resume.pth"
    saved = torch.load(path, weights_only=True)
    names = [name for name, _ in build_model(saved["config"]).named_parameters()]
    ids = saved["optimizer"]["param_groups"][0]["params"]
    params = optimizer_params(inspect_path(path, quick=True))
    assert len(params) == 3 * len(ids)  # step, exp_avg, exp_avg_sq of each parameter
    for position, index in enumerate(ids):
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert params[f"optimizer.state.{index}.{key}"] == "model." + names[position]
    # the tied output weight is the embedding's parameter, never a second one
    assert "model.output.weight" not in params.values()


def test_nothing_is_mapped_when_shapes_do_not_line_up(samples):
    ckpt = inspect_path(samples / "stopped-30" / "tiny_resume.pth", quick=True)
    ckpt.tensors = [t for t in ckpt.tensors if t.name != "model.norm.weight"]  # the last parameter is gone
    assert optimizer_params(ckpt) == {}


def test_the_json_report_names_each_states_parameter(samples):
    proc = run_cli("--report", samples / "stopped-30" / "tiny_resume.pth", "--format", "json")
    tensors = {t["name"]: t for t in json.loads(proc.stdout)["files"][0]["tensors"]}
    assert tensors["optimizer.state.16.exp_avg"]["param"] == "model.layers.1.ffn.w1.weight"
    assert "param" not in tensors["model.layers.1.ffn.w1.weight"]
