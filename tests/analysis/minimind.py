"""MiniMind-layout files built in the test: transformers' Qwen3 causal LM (MiniMind's model is Qwen3-like and
uses the same names: model.embed_tokens, model.layers.N.self_attn.{q,k,v,o}_proj and q_norm/k_norm,
mlp.{gate,up,down}_proj, model.norm, lm_head, the embedding tied to lm_head), saved the way MiniMind's
train scripts save their weights: `{k: v.half() for k, v in model.state_dict().items()}` then torch.save."""

from __future__ import annotations

from pathlib import Path

import torch

DIMS = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
        "head_dim": 8, "intermediate_size": 176, "vocab_size": 640}  # fmt: skip


def minimind_model(seed: int = 0):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    config = Qwen3Config(**DIMS, tie_word_embeddings=True, rope_theta=1e6, max_position_embeddings=512)
    return Qwen3ForCausalLM(config).eval()


def save_minimind_weights(path: Path, seed: int = 0) -> dict[str, torch.Tensor]:
    """MiniMind's `torch.save({k: v.half() for k, v in state_dict.items()}, ckp)`: the tied pair saved twice."""
    state = minimind_model(seed).state_dict()
    state = {k: v.half().cpu() for k, v in state.items()}
    torch.save(state, path)
    return state
