"""Logit drift for bare state dicts: a checkpoint that carries no config (MiniMind's `.pth`, a
`model.state_dict()` saved by hand, nanoGPT's `ckpt.pt`) gets its architecture inferred from tensor names
and shapes.

    infer(ckpt) -> Inferred | None     which family, its config, and what was assumed (not in the file)

Recognisers, asked in order (RECOGNISERS), each from names and shapes alone:
- the Llama family (`[model.]layers.N.self_attn.{q,k,v,o}_proj`, `mlp.gate_proj`, `embed_tokens`): Qwen3 and
  MiniMind when q/k norms are there (their width is the head dim), Qwen2 when q_proj has a bias, Llama
  otherwise (head dim assumed 64, or 128 when the width is not a multiple of 64, and said). Read: hidden
  size, layers, intermediate size, heads and kv heads (q/k widths over the head dim), vocabulary, tied
  embeddings. Assumed, and said: rope theta, the RMSNorm epsilon, the context length.
- GPT-2 in Hugging Face's layout (`[transformer.]h.N.attn.c_attn.weight` as Conv1D: [hidden, 3 x hidden]):
  hidden size, layers, context (wpe), MLP width, vocabulary, tied head. The head count is not in any
  shape: head dim 64 is assumed (every GPT-2 size has it), and said; so are the LayerNorm epsilon and
  GPT-2's tanh GELU. Runs as transformers' GPT2LMHeadModel.
- nanoGPT (karpathy's model.py: the same names, c_attn a Linear: [3 x hidden, hidden]; biases optional):
  the same dimensions; the head count from the checkpoint's own `model_args` when train.py saved them,
  else head dim 64 assumed. Runs as analysis.gpt_models.NanoGPT.
`--config FILE` gives the architecture instead: a transformers config.json (with `model_type`), or for
nanoGPT its `model_args` as JSON (any of n_layer, n_head, n_embd, block_size, bias, vocab_size).
Pure: no torch, no transformers until the model is built.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ckinspect.model import Checkpoint, TensorInfo
from ckinspect.record import Record, field

LAYER = re.compile(r"^(?P<prefix>(?:.*\.)?)layers\.(?P<index>\d+)\.(?P<rest>.+)$")
GPT_BLOCK = re.compile(r"^(?P<prefix>(?:.*\.)?)h\.(?P<index>\d+)\.(?P<rest>.+)$")
# what the file does not say, with the value taken (MiniMind's and Qwen3's defaults)
ASSUMED = {"rope_theta": 1e6, "rms_norm_eps": 1e-6, "max_position_embeddings": 2048}
GPT_HEAD_DIM = 64  # every GPT-2 size (small to xl) and nanoGPT's default n_embd/n_head
GPT2_ASSUMED = {"layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}  # GPT2Config's defaults
NANOGPT_ARGS = frozenset({"n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size"})  # train.py's model_args
# transformers' names for nanoGPT's model_args, accepted in --config
NANOGPT_ALIASES = {"num_attention_heads": "n_head", "num_hidden_layers": "n_layer", "hidden_size": "n_embd",
                   "n_positions": "block_size", "max_position_embeddings": "block_size"}  # fmt: skip

Shapes = dict[str, tuple[int, ...]]


class Inferred(Record):
    __hash__ = None  # type: ignore[assignment]

    family: str  # transformers' model_type (qwen3, qwen2, llama, gpt2), or nanogpt
    config: dict[str, Any]
    read: list[str] = field(default_factory=list)  # what the shapes said
    assumed: list[str] = field(default_factory=list)  # what they could not say
    prefixes: tuple[str, ...] = ()  # what the checkpoint's names carry before the model's own (`model.`)

    @property
    def label(self) -> str:
        said = ", ".join(self.read)
        guessed = "; assumed " + ", ".join(self.assumed) if self.assumed else ""
        return f"{self.family} inferred from names and shapes ({said}{guessed}; --config FILE to give it)"


def infer(ckpt: Checkpoint) -> Inferred | None:
    """The architecture these model tensors describe, or None."""
    model = [t for t in ckpt.tensors if t.group == "model"]
    shapes = {t.name: t.shape for t in model}
    for recognise in RECOGNISERS:
        found = recognise(ckpt, shapes, {t.name: t for t in model})
        if found is not None:
            return found
    return None


def _blocks(pattern: re.Pattern[str], shapes: Shapes) -> tuple[str, int, dict[str, tuple[int, ...]]] | None:
    """(prefix, layer count, {name within the layer: shape} of its first layer) of the most numerous
    layer stack; what every recogniser reads its dimensions from."""
    stacks: dict[str, dict[int, dict[str, tuple[int, ...]]]] = {}
    for name, shape in shapes.items():
        match = pattern.match(name)
        if match:
            stacks.setdefault(match["prefix"], {}).setdefault(int(match["index"]), {})[match["rest"]] = shape
    if not stacks:
        return None
    prefix, by_index = max(stacks.items(), key=lambda kv: len(kv[1]))
    return prefix, len(by_index), by_index[min(by_index)]


def _llama_family(ckpt: Checkpoint, shapes: Shapes, tensors: dict[str, TensorInfo]) -> Inferred | None:
    found = _blocks(LAYER, shapes)
    if found is None:
        return None
    prefix, layers, first = found
    q, k = first.get("self_attn.q_proj.weight"), first.get("self_attn.k_proj.weight")
    gate = first.get("mlp.gate_proj.weight")
    embed = shapes.get(f"{prefix}embed_tokens.weight")
    if not _matrices(q, k, gate, embed):
        return None
    assert q and k and gate and embed  # for the type checker: _matrices said so
    vocab, hidden = embed
    head_dim, assumed = _llama_head_dim(first, q)
    family = _llama_kind(first)
    lm_head = next((s for n, s in shapes.items() if n.endswith("lm_head.weight")), None)
    config = {
        "model_type": family, "vocab_size": vocab, "hidden_size": hidden, "num_hidden_layers": layers,
        "intermediate_size": gate[0], "head_dim": head_dim, "num_attention_heads": q[0] // head_dim,
        "num_key_value_heads": k[0] // head_dim, "tie_word_embeddings": lm_head is None, **ASSUMED,
    }  # fmt: skip
    read = [f"hidden {hidden}", f"{layers} layers", f"{config['num_attention_heads']} heads",
            f"{config['num_key_value_heads']} kv heads", *[f"head dim {head_dim}"] * (not assumed),
            f"vocab {vocab:,}", "tied embeddings" if lm_head is None else "own lm_head"]  # fmt: skip
    said = [f"head dim {head_dim}"] * assumed + [f"{k.replace('_', ' ')} {v:g}" for k, v in ASSUMED.items()]
    return Inferred(family, config, read, said)


def _matrices(*shapes: tuple[int, ...] | None) -> bool:
    return all(shape is not None and len(shape) == 2 for shape in shapes)


def _llama_kind(first: dict[str, tuple[int, ...]]) -> str:
    """Qwen3 (and MiniMind) norm q and k per head; Qwen2 biases q_proj; Llama does neither."""
    if "self_attn.q_norm.weight" in first:
        return "qwen3"
    return "qwen2" if "self_attn.q_proj.bias" in first else "llama"


def _llama_head_dim(first: dict[str, tuple[int, ...]], q: tuple[int, ...]) -> tuple[int, bool]:
    """(head dim, whether it was assumed): the q norm's width (Qwen3, MiniMind), else 64 (128 when the
    width is not a multiple of 64)."""
    q_norm = first.get("self_attn.q_norm.weight")
    if q_norm:
        return q_norm[0], False
    return (64 if q[0] % 64 == 0 else 128), True


class GptShapes(Record):
    """What a GPT-2-style stack (`h.N.attn.c_attn`) says: the same for Hugging Face's and nanoGPT's layouts."""

    prefix: str  # up to `h.`: "transformer.", "model._orig_mod.transformer." ...
    outer: str  # before `transformer.`: where lm_head sits
    conv1d: bool  # Hugging Face's Conv1D ([in, out]); nanoGPT's Linear is [out, in]
    hidden: int
    layers: int
    context: int
    mlp: int
    vocab: int
    tied: bool
    bias: bool


def _gpt_shapes(shapes: Shapes, tensors: dict[str, TensorInfo]) -> GptShapes | None:
    found = _blocks(GPT_BLOCK, shapes)
    if found is None:
        return None
    prefix, layers, first = found
    attn, fc = first.get("attn.c_attn.weight"), first.get("mlp.c_fc.weight")
    wte, wpe = shapes.get(f"{prefix}wte.weight"), shapes.get(f"{prefix}wpe.weight")
    if not _matrices(attn, fc, wte, wpe):
        return None
    assert attn and fc and wte and wpe  # for the type checker: _matrices said so
    hidden = wte[1]
    if attn not in ((hidden, 3 * hidden), (3 * hidden, hidden)):
        return None
    conv1d = attn == (hidden, 3 * hidden)
    outer = prefix.removesuffix("transformer.")
    return GptShapes(prefix, outer, conv1d, hidden, layers, wpe[0], fc[1] if conv1d else fc[0], wte[0],
                     _tied(tensors.get(f"{prefix}wte.weight"), tensors.get(f"{outer}lm_head.weight")),
                     "attn.c_attn.bias" in first)  # fmt: skip


def _tied(wte: TensorInfo | None, head: TensorInfo | None) -> bool:
    """No head of its own, or a head that is the embedding's storage (a state dict of tied weights)."""
    if head is None:
        return True
    return wte is not None and (head.storage_key, head.storage_offset) == (wte.storage_key, wte.storage_offset)


def _gpt_read(g: GptShapes) -> list[str]:
    return [f"hidden {g.hidden}", f"{g.layers} layers", f"context {g.context}"]


def _assumed_heads(hidden: int) -> tuple[int, str]:
    head_dim = GPT_HEAD_DIM if hidden % GPT_HEAD_DIM == 0 else hidden
    return hidden // head_dim, f"head dim {head_dim} ({hidden // head_dim} heads)"


def _gpt2(ckpt: Checkpoint, shapes: Shapes, tensors: dict[str, TensorInfo]) -> Inferred | None:
    g = _gpt_shapes(shapes, tensors)
    if g is None or not g.conv1d or g.prefix not in ("", "transformer.") and not g.prefix.endswith(".transformer."):
        return None
    heads, how = _assumed_heads(g.hidden)
    config = {"model_type": "gpt2", "vocab_size": g.vocab, "n_embd": g.hidden, "n_layer": g.layers, "n_head": heads,
              "n_positions": g.context, "n_inner": g.mlp, "tie_word_embeddings": g.tied, **GPT2_ASSUMED}  # fmt: skip
    read = [*_gpt_read(g), f"mlp {g.mlp}", f"vocab {g.vocab:,}", "tied embeddings" if g.tied else "own lm_head"]
    assumed = [how, f"layer norm eps {GPT2_ASSUMED['layer_norm_epsilon']:g}",
               f"activation {GPT2_ASSUMED['activation_function']}"]  # fmt: skip
    return Inferred("gpt2", config, read, assumed, prefixes=(g.outer,) if g.outer else ())


def _nanogpt(ckpt: Checkpoint, shapes: Shapes, tensors: dict[str, TensorInfo]) -> Inferred | None:
    g = _gpt_shapes(shapes, tensors)
    if g is None or g.conv1d or g.mlp != 4 * g.hidden:
        return None
    config = {"n_layer": g.layers, "n_embd": g.hidden, "block_size": g.context, "bias": g.bias,
              "vocab_size": g.vocab, "tied": g.tied}  # fmt: skip
    read = [*_gpt_read(g), f"vocab {g.vocab:,}", "tied embeddings" if g.tied else "own lm_head",
            "biases" if g.bias else "no biases"]  # fmt: skip
    assumed = []
    saved = _saved_heads(ckpt, g.hidden)
    if saved is not None:
        config["n_head"] = saved
        read.append(f"{saved} heads from model_args")
    else:
        config["n_head"], how = _assumed_heads(g.hidden)
        assumed.append(how)
    assumed += ["layer norm eps 1e-05", "exact GELU as nanoGPT's model.py"]
    return Inferred("nanogpt", config, read, assumed, prefixes=(g.outer,) if g.outer else ())


def _saved_heads(ckpt: Checkpoint, hidden: int) -> int | None:
    """n_head from the `model_args` nanoGPT's train.py saves beside the weights, where it divides the width."""
    tree = ckpt.tree if isinstance(ckpt.tree, dict) else {}
    args = tree.get("model_args")
    heads = args.get("n_head") if isinstance(args, dict) else None
    if not isinstance(heads, int) or isinstance(heads, bool) or heads <= 0 or hidden % heads:
        return None
    return heads


RECOGNISERS: tuple[Callable[[Checkpoint, Shapes, dict[str, TensorInfo]], Inferred | None], ...] = (
    _llama_family,
    _gpt2,
    _nanogpt,
)


def nanogpt_given(inferred: Inferred, given: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """nanoGPT's config with --config's values over the inferred ones (transformers' names accepted too),
    and the label saying what it gave that the shapes did not."""
    config = dict(inferred.config)
    changed = []
    for key, value in given.items():
        own = NANOGPT_ALIASES.get(key, key)
        if own in NANOGPT_ARGS and config.get(own) != value:
            config[own] = value
            changed.append(f"{own} {value}")
    return config, "nanogpt as --config gives it" + (f" ({', '.join(changed)})" if changed else "")


class BareStateDict:
    """The LogitModel plugin for checkpoints that carry no config: inferred (infer) or given (`config`)."""

    looks_for = "Llama/Qwen2/Qwen3/MiniMind, GPT-2 or nanoGPT names among its tensors"

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.given = config

    def build(self, ckpt: Checkpoint) -> Any:
        given = self.given
        if given is not None and "model_type" in given:
            return _transformers_model(ckpt, dict(given), f"{given.get('model_type')} as --config gives it", ())
        inferred = infer(ckpt)
        if inferred is None:
            return None
        if inferred.family == "nanogpt":
            from ckinspect.analysis.gpt_models import NanoGPT

            config, label = nanogpt_given(inferred, given) if given is not None else (inferred.config, inferred.label)
            return NanoGPT(config, label, inferred.prefixes)
        if given is not None:
            return f"--config FILE gives no model_type, which a {inferred.family} state dict needs (config.json's)"
        return _transformers_model(ckpt, inferred.config, inferred.label, inferred.prefixes)


def _transformers_model(ckpt: Checkpoint, config: dict[str, Any], label: str, prefixes: tuple[str, ...]) -> Any:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return f"{label}, but transformers is not installed: pip install 'ckinspect[hf]'"
    from ckinspect.analysis.hf_causal_lm import HuggingFaceCausalLM

    built = HuggingFaceCausalLM.from_config(ckpt.path.parent, config, label)
    if not isinstance(built, str):
        built.prefixes = built.prefixes + prefixes
    return built
