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


# ------------------------------------------------------------------ GPT-2 (Hugging Face layout) and nanoGPT


def _bf16_max_abs(model, state: dict, tokens) -> float:
    """The oracle: the model's own forward with its float32 weights against the same weights through bf16."""
    with torch.no_grad():
        model.load_state_dict(state)
        reference = model(tokens)
        model.load_state_dict({k: v.bfloat16().float() for k, v in state.items()})
        rounded = model(tokens)
    reference = getattr(reference, "logits", reference)
    return (reference - getattr(rounded, "logits", rounded)).abs().max().item()


def test_bare_gpt2_state_dict_is_inferred_and_matches_transformers(tmp_path, capsys):
    from transformers import GPT2Config, GPT2LMHeadModel

    from ckinspect.analysis.logit_inputs import random_batch

    torch.manual_seed(0)
    config = GPT2Config(n_embd=128, n_layer=2, n_head=2, vocab_size=300, n_positions=96, bos_token_id=0,
                        eos_token_id=0)  # fmt: skip
    model = GPT2LMHeadModel(config).eval()
    path = tmp_path / "gpt2_small.pt"
    torch.save(model.state_dict(), path)  # Conv1D weights, lm_head tied to wte, no config
    inferred = infer(inspect_path(path, quick=True))
    assert inferred is not None and inferred.family == "gpt2"
    assert {k: inferred.config[k] for k in ("n_embd", "n_layer", "n_head", "n_positions", "n_inner", "vocab_size")} == {
        "n_embd": 128, "n_layer": 2, "n_head": 2, "n_positions": 96, "n_inner": 512, "vocab_size": 300,
    }  # fmt: skip
    logits = drift_json(path, capsys)["logits"]
    assert logits["model"] == (
        "gpt2 inferred from names and shapes (hidden 128, 2 layers, context 96, mlp 512, vocab 300, tied "
        "embeddings; assumed head dim 64 (2 heads), layer norm eps 1e-05, activation gelu_new; --config FILE "
        "to give it)"
    )
    state = {k: v.float() for k, v in torch.load(path, weights_only=True).items()}
    tokens = random_batch(0, 4, 64, 300)
    assert logits["bf16"]["max_abs"] == pytest.approx(_bf16_max_abs(model, state, tokens), rel=1e-3)
    assert logits["bf16"]["max_abs"] > 0


class NanoGPTConfig:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def nanogpt_model(n_layer=2, n_head=4, n_embd=64, block_size=80, bias=False, vocab_size=96):
    """karpathy/nanoGPT's model.py, its names and forward (LayerNorm with optional bias, Linear c_attn,
    causal attention, exact GELU, lm_head tied to wte), written here: nanoGPT is a script, not a package."""
    from torch import nn
    from torch.nn import functional as F

    c = NanoGPTConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, bias=bias,
                      vocab_size=vocab_size)  # fmt: skip

    class LayerNorm(nn.Module):
        def __init__(self, ndim, bias):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(ndim))
            self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

        def forward(self, x):
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
            self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)

        def forward(self, x):
            B, T, C = x.size()
            q, k, v = self.c_attn(x).split(c.n_embd, dim=2)
            k = k.view(B, T, c.n_head, C // c.n_head).transpose(1, 2)
            q = q.view(B, T, c.n_head, C // c.n_head).transpose(1, 2)
            v = v.view(B, T, c.n_head, C // c.n_head).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
            self.gelu = nn.GELU()
            self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = LayerNorm(c.n_embd, bias=c.bias)
            self.attn = CausalSelfAttention()
            self.ln_2 = LayerNorm(c.n_embd, bias=c.bias)
            self.mlp = MLP()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(c.vocab_size, c.n_embd), wpe=nn.Embedding(c.block_size, c.n_embd),
                drop=nn.Dropout(0.0), h=nn.ModuleList([Block() for _ in range(c.n_layer)]),
                ln_f=LayerNorm(c.n_embd, bias=c.bias),
            ))  # fmt: skip
            self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
            self.transformer.wte.weight = self.lm_head.weight

        def forward(self, idx):
            pos = torch.arange(0, idx.size(1), dtype=torch.long)
            x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
            for block in self.transformer.h:
                x = block(x)
            return self.lm_head(self.transformer.ln_f(x))

    torch.manual_seed(0)
    return GPT().eval(), dict(vars(c), dropout=0.0)


def test_nanogpt_checkpoint_reads_its_heads_from_model_args(tmp_path, capsys):
    from ckinspect.analysis.logit_inputs import random_batch

    model, model_args = nanogpt_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.zeros(1, 8, dtype=torch.long)).sum().backward()
    optimizer.step()
    path = tmp_path / "ckpt.pt"  # train.py's checkpoint, as it saves it
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "model_args": model_args,
                "iter_num": 1, "best_val_loss": 1e9, "config": {"batch_size": 12, "n_head": 4}}, path)  # fmt: skip
    logits = drift_json(path, capsys)["logits"]
    assert logits["model"] == (
        "nanogpt inferred from names and shapes (hidden 64, 2 layers, context 80, vocab 96, tied embeddings, "
        "no biases, 4 heads from model_args; assumed layer norm eps 1e-05, exact GELU as nanoGPT's model.py; "
        "--config FILE to give it)"
    )
    state = {k: v.float() for k, v in torch.load(path, weights_only=True)["model"].items()}
    assert logits["bf16"]["max_abs"] == pytest.approx(_bf16_max_abs(model, state, random_batch(0, 4, 64, 96)), rel=1e-3)
    assert logits["bf16"]["max_abs"] > 0


def test_bare_nanogpt_state_dict_assumes_its_heads_and_config_gives_them(tmp_path, capsys):
    from ckinspect.analysis.logit_inputs import random_batch

    model, model_args = nanogpt_model(bias=True, vocab_size=256)
    path = tmp_path / "nanogpt_weights.pt"
    torch.save({f"_orig_mod.{k}": v for k, v in model.state_dict().items()}, path)  # saved after torch.compile
    logits = drift_json(path, capsys)["logits"]
    assert logits["model"] == (
        "nanogpt inferred from names and shapes (hidden 64, 2 layers, context 80, vocab 256, tied embeddings, "
        "biases; assumed head dim 64 (1 heads), layer norm eps 1e-05, exact GELU as nanoGPT's model.py; "
        "--config FILE to give it)"
    )
    (tmp_path / "given").mkdir()
    config = tmp_path / "given" / "model_args.json"
    config.write_text(json.dumps(model_args))
    given = drift_json(path, capsys, "--config", str(config))["logits"]
    assert given["model"] == "nanogpt as --config gives it (n_head 4)"
    state = {k.removeprefix("_orig_mod."): v.float() for k, v in torch.load(path, weights_only=True).items()}
    expected = _bf16_max_abs(model, state, random_batch(0, 4, 64, 256))
    assert given["bf16"]["max_abs"] == pytest.approx(expected, rel=1e-3)
    assert logits["bf16"]["max_abs"] != pytest.approx(expected, rel=1e-3)  # one head is another model
    assert given["text"]["tokenizer"] == "UTF-8 bytes (assumed from a vocabulary of exactly 256)"
