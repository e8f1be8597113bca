"""nanoGPT (karpathy/nanoGPT's model.py) as a LogitModel: the same parameter names and the same forward,
written here because nanoGPT is a script, not a package (nothing from the checkpoint is imported or run).

    transformer.wte / wpe              token and position embeddings (lm_head.weight tied to wte.weight)
    transformer.h.N.ln_1, ln_2         LayerNorm, with a bias only under `bias=True`
    transformer.h.N.attn.c_attn        Linear(n_embd, 3 * n_embd): q, k, v; causal attention, n_head heads
    transformer.h.N.attn.c_proj        Linear(n_embd, n_embd)
    transformer.h.N.mlp.c_fc, c_proj   Linear(n_embd, 4 * n_embd), exact GELU, Linear(4 * n_embd, n_embd)
    transformer.ln_f, lm_head          the final norm and the head (no bias)

A GPT-2 state dict in Hugging Face's layout (Conv1D weights, stored transposed) runs as transformers'
own GPT2LMHeadModel instead (analysis.bare_models). Imports torch only when the model is built.
"""

from __future__ import annotations

from typing import Any

from ckinspect.analysis.logit_inputs import random_batch, text_windows

BATCH, LENGTH = 4, 64  # the random batch: sequences x tokens (shorter if the model's context is)
LAYER_NORM_EPS = 1e-5  # nanoGPT's LayerNorm: F.layer_norm(..., 1e-5)
BYTE_VOCAB = 256  # a vocabulary of exactly this size is taken for bytes; any other needs its tokenizer


class NanoGPT:
    """The LogitModel for a nanoGPT checkpoint: `config` holds n_layer, n_head, n_embd, block_size, bias,
    vocab_size (nanoGPT's own `model_args`), `prefixes` what the checkpoint's names carry before
    `transformer.` (`model.`, `model._orig_mod.` after torch.compile)."""

    def __init__(self, config: dict[str, Any], label: str, prefixes: tuple[str, ...] = ()) -> None:
        self.config, self.label, self.prefixes = config, label, prefixes
        self.vocab = int(config["vocab_size"])
        self.context = int(config["block_size"])

    def skeleton(self) -> Any:
        return _nanogpt_module(self.config)

    def layers(self, module: Any) -> Any:
        return module.transformer.h

    def batch(self, seed: int) -> tuple[Any, str]:
        length = min(LENGTH, self.context)
        how = f"{BATCH}x{length} token ids drawn uniformly below the vocabulary size ({self.vocab:,}), seed {seed}"
        return random_batch(seed, BATCH, length, self.vocab), how

    def text_tokens(self, text: str) -> tuple[Any, str]:
        if self.vocab != BYTE_VOCAB:
            return None, "nanoGPT checkpoints carry no tokenizer (tiktoken's GPT-2 encoding or a meta.pkl beside them)"
        ids = list(text.encode("utf-8"))
        return text_windows(ids, min(256, self.context)), "UTF-8 bytes (assumed from a vocabulary of exactly 256)"

    def logits(self, module: Any, tokens: Any, embed: bool) -> Any:
        return module(tokens, embed)


def _nanogpt_module(config: dict[str, Any]) -> Any:
    import torch
    from torch import nn
    from torch.nn import functional

    n_embd, n_head, bias = int(config["n_embd"]), int(config["n_head"]), bool(config.get("bias", True))

    class LayerNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n_embd))
            self.bias = nn.Parameter(torch.zeros(n_embd)) if bias else None

        def forward(self, x: Any) -> Any:
            return functional.layer_norm(x, self.weight.shape, self.weight, self.bias, LAYER_NORM_EPS)

    class CausalSelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=bias)
            self.c_proj = nn.Linear(n_embd, n_embd, bias=bias)

        def forward(self, x: Any) -> Any:
            b, t, c = x.shape
            q, k, v = (z.view(b, t, n_head, c // n_head).transpose(1, 2) for z in self.c_attn(x).split(n_embd, dim=2))
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=bias)
            self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=bias)

        def forward(self, x: Any) -> Any:
            return self.c_proj(functional.gelu(self.c_fc(x)))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = LayerNorm(), CausalSelfAttention(), LayerNorm(), MLP()

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            transformer: Any = nn.ModuleDict({
                "wte": nn.Embedding(int(config["vocab_size"]), n_embd),
                "wpe": nn.Embedding(int(config["block_size"]), n_embd),
                "h": nn.ModuleList(Block() for _ in range(int(config["n_layer"]))),
                "ln_f": LayerNorm(),
            })  # fmt: skip
            self.transformer, self.lm_head = transformer, nn.Linear(n_embd, int(config["vocab_size"]), bias=False)
            if config.get("tied", True):
                transformer.wte.weight = self.lm_head.weight  # nanoGPT's weight tying

        def forward(self, idx: Any, embed: bool = True) -> Any:
            b, t = idx.shape
            if embed:
                pos = torch.arange(t, dtype=torch.long)
                x = self.transformer.wte(idx) + self.transformer.wpe(pos)
            else:  # only what follows the layers is used: the embeddings are not read
                x = torch.zeros(b, t, n_embd)
            for block in self.transformer.h:
                x = block(x)
            return self.lm_head(self.transformer.ln_f(x))

    return GPT()
