"""Logit drift for bare state dicts: a checkpoint that carries no config (MiniMind's `.pth`, a
`model.state_dict()` saved by hand) gets its architecture inferred from tensor names and shapes.

    infer(ckpt) -> Inferred | None     which family, its config, and what was assumed (not in the file)

Recognised: the Llama family by its names (`[model.]layers.N.self_attn.{q,k,v,o}_proj`, `mlp.gate_proj`,
`embed_tokens`, `lm_head`): Qwen3 and MiniMind when q/k norms are there (their width is the head dim),
Qwen2 when q_proj has a bias, Llama otherwise (head dim assumed 64, or 128 when the width is not a
multiple of 64, and said). Read off the shapes: hidden size, layers, intermediate size, heads and kv
heads (from q/k widths over the head dim), vocabulary, tied embeddings (no lm_head, or lm_head equal
in shape and the family ties). Assumed, and said: rope theta, the RMSNorm epsilon, the context length.
`--config FILE` (a config.json of transformers' format) gives them instead. GPT-2 and nanoGPT state
dicts are recognised by name and said to need the config (their head count is not in the shapes); not
yet inferred.
Pure: no torch, no transformers until the model is built.
"""

from __future__ import annotations

import re
from typing import Any

from ckinspect.model import Checkpoint
from ckinspect.record import Record, field

LAYER = re.compile(r"^(?P<prefix>(?:.*\.)?)layers\.(?P<index>\d+)\.(?P<rest>.+)$")
# what the file does not say, with the value taken (MiniMind's and Qwen3's defaults)
ASSUMED = {"rope_theta": 1e6, "rms_norm_eps": 1e-6, "max_position_embeddings": 2048}


class Inferred(Record):
    __hash__ = None  # type: ignore[assignment]

    family: str  # transformers' model_type: qwen3, qwen2, llama
    config: dict[str, Any]
    read: list[str] = field(default_factory=list)  # what the shapes said
    assumed: list[str] = field(default_factory=list)  # what they could not say

    @property
    def label(self) -> str:
        said = ", ".join(self.read)
        guessed = "; assumed " + ", ".join(self.assumed) if self.assumed else ""
        return f"{self.family} inferred from names and shapes ({said}{guessed}; --config FILE to give it)"


def infer(ckpt: Checkpoint) -> Inferred | None:
    """The Llama-family architecture these model tensors describe, or None."""
    shapes = {t.name: t.shape for t in ckpt.tensors if t.group == "model"}
    layers: dict[str, dict[int, dict[str, tuple[int, ...]]]] = {}
    for name, shape in shapes.items():
        match = LAYER.match(name)
        if match:
            layers.setdefault(match["prefix"], {}).setdefault(int(match["index"]), {})[match["rest"]] = shape
    if not layers:
        return None
    prefix, by_index = max(layers.items(), key=lambda kv: len(kv[1]))
    first = by_index[min(by_index)]
    q, k = first.get("self_attn.q_proj.weight"), first.get("self_attn.k_proj.weight")
    gate = first.get("mlp.gate_proj.weight")
    embed = shapes.get(f"{prefix}embed_tokens.weight")
    if not (q and k and gate and embed) or len(q) != 2 or len(embed) != 2:
        return None
    vocab, hidden = embed
    q_norm = first.get("self_attn.q_norm.weight")
    head_dim, assumed = (q_norm[0], []) if q_norm else (64 if q[0] % 64 == 0 else 128, ["head dim"])
    family = "qwen3" if q_norm else ("qwen2" if "self_attn.q_proj.bias" in first else "llama")
    lm_head = next((s for n, s in shapes.items() if n.endswith("lm_head.weight")), None)
    config = {
        "model_type": family, "vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": len(by_index),
        "intermediate_size": gate[0], "head_dim": head_dim, "num_attention_heads": q[0] // head_dim,
        "num_key_value_heads": k[0] // head_dim, "tie_word_embeddings": lm_head is None, **ASSUMED,
    }  # fmt: skip
    read = [f"hidden {hidden}", f"{len(by_index)} layers", f"{config['num_attention_heads']} heads",
            f"{config['num_key_value_heads']} kv heads", f"head dim {head_dim}", f"vocab {vocab:,}",
            "tied embeddings" if lm_head is None else "own lm_head"]  # fmt: skip
    if assumed:
        read.remove(f"head dim {head_dim}")
    assumed = [f"head dim {head_dim}"] * bool(assumed) + [f"{k.replace('_', ' ')} {v:g}" for k, v in ASSUMED.items()]
    return Inferred(family, config, read, assumed)


def gpt2_like(ckpt: Checkpoint) -> str | None:
    """GPT-2 and nanoGPT name their blocks `transformer.h.N.attn.c_attn`: said, not guessed."""
    if any(".h.0.attn.c_attn." in t.name or t.name.startswith("h.0.attn.c_attn.") for t in ckpt.tensors):
        return ("a GPT-2/nanoGPT state dict without its config (the head count is not in the shapes): "
                "--config FILE gives it")  # fmt: skip
    return None


class BareStateDict:
    """The LogitModel plugin for checkpoints that carry no config: inferred (infer) or given (`config`)."""

    looks_for = "Llama/Qwen2/Qwen3/MiniMind names among its tensors"

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.given = config

    def build(self, ckpt: Checkpoint) -> Any:
        if self.given is not None:
            config, label = dict(self.given), f"{self.given.get('model_type')} as --config gives it"
        elif (inferred := infer(ckpt)) is not None:
            config, label = inferred.config, inferred.label
        else:
            return gpt2_like(ckpt)
        try:
            import transformers  # noqa: F401
        except ImportError:
            return f"{label}, but transformers is not installed: pip install 'ckinspect[hf]'"
        from ckinspect.analysis.hf_causal_lm import HuggingFaceCausalLM

        return HuggingFaceCausalLM.from_config(ckpt.path.parent, config, label)
