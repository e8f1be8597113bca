"""Logit drift of Hugging Face causal LMs (Llama, GPT-2, Qwen2 with random weights, written by transformers):
the figures `ckinspect drift MODEL_DIR` reports agree with transformers' own forward on the same inputs,
every weight form gives the same figures, block by block equals the whole model, and a model that cannot
be built says why instead of reporting a zero."""

from __future__ import annotations

import copy
import importlib.util
import json
import math
from typing import Any

import pytest
import torch

from ckinspect.analysis.blockwise import round_weight
from ckinspect.analysis.drift import logit_drift
from ckinspect.formats import open_checkpoint
from ckinspect.formats.discover import model_folder_weights
from tests.conftest import REPO, run_cli
from tests.helpers import hf_models

# transformers is imported by the tests that run, not at collection: importing it costs seconds in
# every pytest process, and the core suite deselects this module's `frameworks` marker.
pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.skipif(importlib.util.find_spec("transformers") is None, reason="needs the `hf` extra"),
]


def auto_model(folder: Any, **kwargs: Any) -> torch.nn.Module:
    """transformers' own `AutoModelForCausalLM.from_pretrained`, the reference the figures are checked against."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, **kwargs)


FIGURES = ("max_abs", "mean_abs", "top1_agreement", "kl_mean")
ALL_FORMATS = ("fp16", "bf16", "fp8_e4m3fn", "fp8_e5m2")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Models this small gain nothing from threads, and on a busy machine spinning threads cost seconds."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """family -> form -> folder; the safetensors folder of each family also has a byte-level tokenizer."""
    root = tmp_path_factory.mktemp("hf")
    out: dict[str, dict[str, object]] = {}
    for family in hf_models.FAMILIES:
        model = hf_models.build(family)
        forms = ("safetensors", "sharded", "bin", "sharded-bin") if family != "qwen2" else ("safetensors",)
        out[family] = {form: hf_models.save(model, root / family / form, form) for form in forms}
        hf_models.save_byte_tokenizer(out[family]["safetensors"])
    out["llama-tied"] = {
        "safetensors": hf_models.save(hf_models.build("llama", tie=True), root / "tied", "safetensors")
    }
    return out


def _drift(folder, *flags):
    proc = run_cli("drift", folder, "--report", "--format", "json", *flags)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["drift"]


def _direct(folder, dtype):
    """What a transformers user computes: the model in fp32, and a copy whose weights went through `dtype`."""
    model = auto_model(folder, dtype=torch.float32).eval()
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for param in rounded.parameters():
            param.copy_(param.to(dtype).float())
    return model, rounded


@pytest.mark.parametrize("family", hf_models.FAMILIES)
def test_fp16_and_bf16_figures_agree_with_transformers_on_the_same_inputs(folders, family):
    folder = folders[family]["safetensors"]
    drift = _drift(folder)
    logits = drift["logits"]
    assert drift["logits_skipped"] is None
    assert (
        logits["model"] == {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel", "qwen2": "Qwen2ForCausalLM"}[family]
    )
    assert logits["input"] == {
        "batch": [4, 64],
        "tokens": f"4x64 token ids drawn uniformly below the vocabulary size ({hf_models.VOCAB}), seed 0",
    }
    batch = torch.randint(0, hf_models.VOCAB, (4, 64), generator=torch.Generator().manual_seed(0))
    text = logits["text"]
    assert text["tokenizer"] == "the folder's tokenizer.json" and text["windows"] == [14, 128]  # 1,835 bytes
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    ids = tokenizer((REPO / "ckinspect" / "analysis" / "drift_text.txt").read_text(encoding="utf-8"))["input_ids"]
    tokens = torch.tensor(ids[: 14 * 128]).reshape(14, 128)
    for label, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        model, rounded = _direct(folder, dtype)
        with torch.no_grad():
            ref, got = model(batch).logits, rounded(batch).logits
            kl = torch.nn.functional.kl_div(
                torch.log_softmax(got.double(), -1),
                torch.log_softmax(ref.double(), -1),
                log_target=True,
                reduction="none",
            ).sum(-1)
            ppl_ref = math.exp(model(tokens, labels=tokens).loss.item())
            ppl_got = math.exp(rounded(tokens, labels=tokens).loss.item())
        expected = {
            "max_abs": (ref - got).abs().max().item(),
            "mean_abs": (ref - got).abs().mean().item(),
            "top1_agreement": (ref.argmax(-1) == got.argmax(-1)).float().mean().item(),
            "kl_mean": kl.mean().item(),
        }
        assert expected["max_abs"] > 0  # the rounding shows: a zero here would prove nothing
        for key in FIGURES:
            assert logits[label][key] == pytest.approx(expected[key], rel=1e-6), (label, key)
        assert logits[label]["positions"] == 256
        assert text["perplexity"] == pytest.approx(ppl_ref, rel=1e-5)
        assert logits[label]["perplexity"] == pytest.approx(ppl_got, rel=1e-5)


@pytest.mark.parametrize("family", ("llama", "gpt2"))
def test_every_weight_form_gives_the_same_figures(folders, family):
    expected = _drift(folders[family]["safetensors"])["logits"]["fp16"]
    expected = {k: v for k, v in expected.items() if not k.startswith("perplexity")}  # only that folder has a tokenizer
    for form in ("sharded", "bin", "sharded-bin"):
        got = _drift(folders[family][form])["logits"]
        assert got["fp16"] == expected, form
        assert got["text"] == {"source": "drift_text.txt", "skipped": "no tokenizer.json in the folder"}


@pytest.mark.parametrize("family", (*hf_models.FAMILIES, "llama-tied"))
def test_block_by_block_equals_the_whole_model_and_holds_one_block(folders, family):
    folder = folders[family]["safetensors"]
    ckpt = open_checkpoint(model_folder_weights(folder))
    blocks = logit_drift(ckpt, formats=ALL_FORMATS)
    whole = logit_drift(ckpt, formats=ALL_FORMATS, whole=True)
    assert (blocks["mode"], blocks["blocks"], whole["mode"], whole["blocks"]) == ("block by block", 4, "whole model", 1)
    for fmt in ALL_FORMATS:
        assert blocks[fmt] == whole[fmt]
    assert blocks["text"] == whole["text"]
    weights = sum(p.numel() * 4 for p in auto_model(folder).parameters())
    assert whole["weights_held_peak_bytes"] == weights  # the whole model at once, tied weights once
    assert blocks["weights_held_peak_bytes"] < weights / 2  # here the embedding: the largest block
    # fp8 keeps 3 (e4m3) or 2 (e5m2) mantissa bits: further from fp32 than bf16 (7) and fp16 (10)
    assert blocks["fp16"]["max_abs"] < blocks["bf16"]["max_abs"] < blocks["fp8_e4m3fn"]["max_abs"]
    assert blocks["fp8_e4m3fn"]["kl_mean"] < blocks["fp8_e5m2"]["kl_mean"]


def test_fp8_rounds_with_per_tensor_scaling():
    x = torch.tensor([896.0, 3.0, -1.1])
    # e4m3fn: scale 896/448 = 2; 1.5 and 448 are on its grid, -0.55 rounds to -0.5625 (3 mantissa bits)
    assert round_weight(x, "fp8_e4m3fn").tolist() == [896.0, 3.0, -1.125]
    # e5m2: scale 896/57344 = 1/64; 192 is on its grid, -70.4 rounds to -64 (2 mantissa bits)
    assert round_weight(x, "fp8_e5m2").tolist() == [896.0, 3.0, -1.0]
    assert round_weight(torch.zeros(3), "fp8_e4m3fn").tolist() == [0.0, 0.0, 0.0]


def test_the_cli_names_the_model_the_inputs_and_fp8_when_asked(folders):
    folder = folders["llama"]["safetensors"]
    drift = _drift(folder, "--fp8", "--whole-model")
    assert drift["logits"]["formats"] == list(ALL_FORMATS) and drift["logits"]["mode"] == "whole model"
    assert "fp8 is simulated" in drift["logits"]["note"]
    text = run_cli("drift", folder, "--report", env={"COLUMNS": "100"})
    assert text.returncode == 0, text.stderr
    assert "logit drift vs fp32 (LlamaForCausalLM, block by block, seed 0)" in text.stdout
    assert "batch: 4x64 token ids drawn uniformly below the vocabulary size (300), seed 0" in text.stdout
    assert "text: drift_text.txt, 14x128 tokens by the folder's tokenizer.json" in text.stdout
    markdown = run_cli("drift", folder, "--report", "--format", "markdown").stdout
    assert "### Logit drift vs fp32 (LlamaForCausalLM, block by block, seed 0)" in markdown
    assert "| logits | max \\|Δ\\| | mean \\|Δ\\| | top-1 | KL | ppl Δ | positions |" in markdown


def test_weights_missing_from_the_file_skip_the_logit_drift_with_the_reason(folders, tmp_path):
    from safetensors.torch import load_file, save_file

    source = folders["llama"]["safetensors"]
    folder = tmp_path / "damaged"
    folder.mkdir()
    (folder / "config.json").write_bytes((source / "config.json").read_bytes())
    state = load_file(source / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, folder / "model.safetensors")
    drift = _drift(folder)
    assert drift["logits"] is None and len(drift["weights"]) == len(state)
    assert drift["logits_skipped"] == (
        "the model cannot be built from these weights: "
        "the file has no weights for 1 parameter(s): 'model.layers.1.mlp.up_proj.weight'"
    )


def test_a_config_transformers_cannot_use_is_named(folders, tmp_path):
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((folders["llama"]["safetensors"] / "model.safetensors").read_bytes())
    (folder / "config.json").write_text(json.dumps({"model_type": "no-such-model"}))
    drift = _drift(folder)
    assert drift["logits"] is None
    assert drift["logits_skipped"].startswith("a Hugging Face folder whose config.json transformers cannot use: ")
