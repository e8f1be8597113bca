"""Tiny Hugging Face causal LMs with random weights, written the way users get them: `save_pretrained`
(one safetensors file, or shards with an index), the older `.bin` forms (a torch.save'd state dict, and
shards with `pytorch_model.bin.index.json`), and a byte-level tokenizer.json for the perplexity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

VOCAB = 300  # the 256 bytes of the byte-level tokenizer, and some more
FAMILIES = ("llama", "gpt2", "qwen2")


def config(family: str, layers: int = 2, tie: bool = False) -> Any:
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    if family == "gpt2":  # GPT-2 always ties its head to the token embeddings
        return GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=layers, n_head=4, n_positions=128, bos_token_id=0)
    kind = {"llama": LlamaConfig, "qwen2": Qwen2Config}[family]
    return kind(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=tie,
    )


def build(family: str, seed: int = 0, **kwargs: Any) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config(family, **kwargs), dtype=torch.float32)
    with torch.no_grad():  # random init gives norms of exactly 1.0: spread them so rounding shows everywhere
        for name, param in model.named_parameters():
            if name.endswith("norm.weight") or ".ln_" in name:
                param.add_(torch.randn_like(param) * 0.1)
    return model.eval()


def save(model: Any, folder: Path, form: str = "safetensors") -> Path:
    """Write `model` into `folder` as `safetensors`, `sharded` (safetensors + index), `bin` or `sharded-bin`."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    if form == "safetensors":
        model.save_pretrained(folder)
    elif form == "sharded":
        model.save_pretrained(folder, max_shard_size="20KB")
    else:
        model.config.save_pretrained(folder)
        state = {k: v.contiguous() for k, v in model.state_dict().items()}
        if form == "bin":
            torch.save(state, folder / "pytorch_model.bin")
        else:
            names = sorted(state)
            halves = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
            for shard, keys in halves.items():
                torch.save({k: state[k] for k in keys}, folder / shard)
            weight_map = {k: shard for shard, keys in halves.items() for k in keys}
            (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder


def save_byte_tokenizer(folder: Path) -> None:
    """A byte-level BPE without merges: every byte of the text is one token (ids 0..255)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.save(str(folder / "tokenizer.json"))
