"""Logit drift for bare state dicts (issue 27): MiniMind's `.pth` (no config in it) gets its architecture
from names and shapes, says which and what it assumed, and its drift agrees with transformers' own model
built from the config that made the file; `--config FILE` gives the architecture instead."""

from __future__ import annotations

import json

import pytest
import torch

from ckinspect.analysis.bare_models import infer
from ckinspect.analysis.inspect import inspect_path
from ckinspect.cli import main
from tests.analysis.minimind import DIMS, minimind_model, save_minimind_weights

pytestmark = pytest.mark.slow


def drift_json(path, capsys, *extra: str) -> dict:
    assert main(["drift", str(path), "--report", "--format", "json", *extra]) == 0
    return json.loads(capsys.readouterr().out)["drift"]


def test_minimind_pth_is_inferred_as_qwen3_with_what_was_assumed(tmp_path, capsys):
    path = tmp_path / "full_sft_512.pth"
    save_minimind_weights(path)
    inferred = infer(inspect_path(path, quick=True))
    assert inferred is not None and inferred.family == "qwen3"
    assert {k: inferred.config[k] for k in DIMS} == DIMS  # every dimension read off the shapes
    logits = drift_json(path, capsys)["logits"]
    assert logits["model"].startswith(
        "qwen3 inferred from names and shapes (hidden 64, 2 layers, 8 heads, 2 kv heads, head dim 8, vocab 640, "
        "own lm_head; assumed rope theta 1e+06, rms norm eps 1e-06"
    )
    assert logits["fp16"]["max_abs"] == 0.0  # the file is float16 already

    # the oracle: transformers' Qwen3 from the config that made the file, weights from the file in float32
    from ckinspect.analysis.logit_inputs import random_batch

    state = {k: v.float() for k, v in torch.load(path, weights_only=True).items()}
    model = minimind_model()
    model.load_state_dict(state)
    tokens = random_batch(0, 4, 64, DIMS["vocab_size"])
    with torch.no_grad():
        reference = model(input_ids=tokens).logits
        model.load_state_dict({k: v.bfloat16().float() for k, v in state.items()})
        rounded = model(input_ids=tokens).logits
    assert logits["bf16"]["max_abs"] == pytest.approx((reference - rounded).abs().max().item(), rel=1e-3)


def test_config_file_gives_the_architecture(tmp_path, capsys):
    path = tmp_path / "full_sft_512.pth"
    save_minimind_weights(path)
    (tmp_path / "given").mkdir()
    config = tmp_path / "given" / "minimind.json"  # not beside the file: that would be a Hugging Face folder
    config.write_text(json.dumps(minimind_model().config.to_dict()))
    logits = drift_json(path, capsys, "--config", str(config))["logits"]
    assert logits["model"] == "qwen3 as --config gives it"
    assert main(["drift", str(path), "--report", "--config", str(tmp_path / "gone.json")]) == 2
    assert capsys.readouterr().err == f"ckinspect: cannot read {tmp_path / 'gone.json'}: No such file or directory\n"


def test_llama_like_state_dict_without_qk_norms_says_it_assumed_the_head_dim(tmp_path, capsys):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                         num_key_value_heads=1, intermediate_size=256, vocab_size=512))  # fmt: skip
    path = tmp_path / "pretrain_128.pth"
    torch.save(model.state_dict(), path)
    inferred = infer(inspect_path(path, quick=True))
    assert inferred is not None and inferred.family == "llama"
    assert (inferred.config["num_attention_heads"], inferred.config["num_key_value_heads"]) == (2, 1)
    assert "assumed head dim 64" in inferred.label
