"""Model plugins: how logit drift finds a model to run, and what it says when there is none."""

from __future__ import annotations

import numpy as np
import pytest

from ckinspect.analysis import logit_models
from ckinspect.analysis.drift import logit_drift, logit_drift_or_why, weight_drift
from tests.helpers.raw_zip import simple_checkpoint


class _EntryPoint:
    def __init__(self, name: str, load):
        self.name, self.load = name, load


@pytest.fixture
def plugins(monkeypatch):
    """Replace the installed entry points of ckinspect's group with the given (name, loader) pairs; every
    other group stays (torch, imported first by the model, asks for its own "torch.backends" plugins)."""

    def install(*eps: _EntryPoint) -> None:
        import importlib.metadata

        installed = importlib.metadata.entry_points

        def entry_points(group: str):
            return list(eps) if group == logit_models.ENTRY_POINT_GROUP else installed(group=group)

        monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
        logit_models.registered_plugins.cache_clear()

    yield install
    logit_models.registered_plugins.cache_clear()


def test_unknown_model_names_what_every_plugin_looks_for(tmp_path):
    ckpt = simple_checkpoint(tmp_path / "w.pt", {"w": np.ones(3, np.float32)})
    model, reason = logit_models.find_model(ckpt)
    assert model is None
    assert reason == (
        "the model is unknown: no ckinspect-trainer/1 config in the checkpoint and no config.json beside it "
        "and no Llama/Qwen2/Qwen3/MiniMind, GPT-2 or nanoGPT names among its tensors"
    )


def test_a_plugin_that_cannot_load_is_named_and_the_weight_drift_still_runs(tmp_path, plugins):
    def broken():
        raise ImportError("No module named 'gone'")

    plugins(_EntryPoint("broken", broken))
    ckpt = simple_checkpoint(tmp_path / "w.pt", {"w": np.ones(3, np.float32)})
    drifts = weight_drift(ckpt)
    assert logit_drift_or_why(ckpt, drifts) == (
        None,
        "the model is unknown: no config.json beside it and no Llama/Qwen2/Qwen3/MiniMind, GPT-2 or nanoGPT names "
        "among its tensors; model plugin 'broken' cannot be loaded (ImportError: No module named 'gone')",
    )
    assert [d.name for d in drifts] == ["w"] and drifts[0].fp16.max_abs == 0.0


class _Doubling:
    """A model whose logits are twice its one weight vector, per batch row: rounding shows up exactly."""

    label = "doubling"
    prefixes = ()

    def skeleton(self):
        import torch

        class Doubling(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.w = torch.nn.Parameter(torch.zeros(3))

            def forward(self, batch):
                return (self.w * 2).expand(batch.shape[0], 1, -1)

        return Doubling()

    def layers(self, module):
        return None

    def batch(self, seed):
        import torch

        return torch.zeros(2, 1), "two rows of zeros"

    def text_tokens(self, text):
        return None, "the doubling model reads no text"

    def logits(self, module, tokens, embed):
        return module(tokens)


def test_a_registered_plugin_is_asked_and_its_logits_compared(tmp_path, plugins):

    class Plugin:
        looks_for = "a doubling model"

        def build(self, ckpt):
            return _Doubling() if ckpt.path.name == "d.pt" else None

    plugins(_EntryPoint("doubling", Plugin))
    other = simple_checkpoint(tmp_path / "o.pt", {"w": np.ones(3, np.float32)})
    assert logit_models.find_model(other)[1].startswith("the model is unknown: no a doubling model and no config.json")
    out = logit_drift(simple_checkpoint(tmp_path / "d.pt", {"w": np.array([1.0, 1.0 + 2**-12, 3.0], np.float32)}))
    assert out["model"] == "doubling" and out["stored_as"] == ["float32"] and out["mode"] == "whole model"
    assert out["input"] == {"batch": [2, 1], "tokens": "two rows of zeros"}
    assert out["text"] == {"source": "drift_text.txt", "skipped": "the doubling model reads no text"}
    # 1 + 2**-12 rounds to 1 in fp16 (10 mantissa bits) and bf16 (7): one |Δlogit| of 2**-11 in three, float32 mean
    kl = out["fp16"].pop("kl_mean"), out["fp16"].pop("kl_max")
    assert out["fp16"] == {
        "max_abs": 2**-11,
        "mean_abs": float(np.float32(2**-11 / 3)),
        "top1_agreement": 1.0,
        "positions": 2,
    }
    assert 0 < kl[0] == kl[1]  # both rows alike
    assert out["bf16"]["max_abs"] == 2**-11 and out["bf16"]["positions"] == 2


def test_a_plugin_that_claims_but_cannot_build_gives_its_reason(tmp_path, plugins):
    class Plugin:
        looks_for = "anything"

        def build(self, ckpt):
            return "its model, but the weights are encrypted"

    plugins(_EntryPoint("claims", Plugin))
    ckpt = simple_checkpoint(tmp_path / "w.pt", {"w": np.ones(3, np.float32)})
    assert logit_drift_or_why(ckpt) == (None, "its model, but the weights are encrypted")
    assert logit_drift(ckpt) is None
