"""A Hugging Face causal LM folder as a LogitModel: config.json, safetensors or bin weights (sharded or
not), and the folder's own tokenizer.json for the perplexity on the bundled text.

Nothing from the folder is executed: the config is JSON (transformers builds one of its own model
classes from it, never remote code), the weights are read by ckinspect's readers (safetensors headers,
the restricted unpickler for .bin), and the tokenizer is read by the `tokenizers` library from JSON.
transformers is imported only here, and only when logit drift runs on such a folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ckinspect.analysis.logit_inputs import random_batch, text_windows

BATCH, LENGTH = 4, 64  # the random batch: sequences x tokens (shorter if the model's context is)
TEXT_WINDOW = 256  # the bundled text is cut into windows of at most this many tokens
TOKENIZER_FILE = "tokenizer.json"


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' warnings (config oddities of random test models, deprecations) stay out of the report."""
    from transformers.utils import logging

    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


class HuggingFaceCausalLM:
    def __init__(self, folder: Path, config: Any, model_class: Any) -> None:
        self.folder, self.config, self.model_class = folder, config, model_class
        self.label: str = model_class.__name__
        prefix = getattr(model_class, "base_model_prefix", "") or ""
        self.prefixes: tuple[str, ...] = (f"{prefix}.",) if prefix else ()
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.text_config = text
        self.vocab = int(text.vocab_size)
        context = getattr(text, "max_position_embeddings", None) or getattr(text, "n_positions", None)
        self.context = int(context) if context else LENGTH

    @classmethod
    def from_folder(cls, folder: Path) -> HuggingFaceCausalLM | str:
        """The model config.json describes, or why it cannot be built (one line)."""
        from transformers import AutoConfig, AutoModelForCausalLM

        try:
            with quiet_transformers():
                config = AutoConfig.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
        except Exception as exc:  # transformers raises ValueError, OSError, KeyError... for configs it cannot use
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return f"a Hugging Face folder whose config.json transformers cannot use: {first}"
        model_class = AutoModelForCausalLM._model_mapping.get(type(config), None)
        if model_class is None:
            kind = getattr(config, "model_type", "?")
            return f"a Hugging Face folder, but transformers builds no causal LM for model type {kind!r}"
        return cls(folder, config, model_class)

    @classmethod
    def from_config(cls, folder: Path, values: dict[str, Any], label: str) -> HuggingFaceCausalLM | str:
        """The model a config dict describes (a bare state dict's inferred or given config), labelled."""
        from transformers import AutoConfig, AutoModelForCausalLM

        kind = str(values.get("model_type", ""))
        try:
            with quiet_transformers():
                config = AutoConfig.for_model(kind, **{k: v for k, v in values.items() if k != "model_type"})
        except Exception as exc:  # ValueError for an unknown model_type, TypeError for a bad field
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            return f"transformers cannot use the config ({first})"
        model_class = AutoModelForCausalLM._model_mapping.get(type(config), None)
        if model_class is None:
            return f"transformers builds no causal LM for model type {kind!r}"
        built = cls(folder, config, model_class)
        built.label = label
        return built

    def skeleton(self) -> Any:
        import torch

        with quiet_transformers():
            return self.model_class._from_config(self.config, dtype=torch.float32)

    def layers(self, module: Any) -> Any:
        """The ModuleList of decoder layers: as long as the config's layer count, the one with most parameters."""
        import torch

        count = getattr(self.text_config, "num_hidden_layers", None)
        lists = [m for m in module.modules() if isinstance(m, torch.nn.ModuleList) and len(m) == count]
        return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()), default=None)

    def batch(self, seed: int) -> tuple[Any, str]:
        length = min(LENGTH, self.context)
        how = f"{BATCH}x{length} token ids drawn uniformly below the vocabulary size ({self.vocab:,}), seed {seed}"
        return random_batch(seed, BATCH, length, self.vocab), how

    def text_tokens(self, text: str) -> tuple[Any, str]:
        path = self.folder / TOKENIZER_FILE
        if not path.is_file():
            return None, f"no {TOKENIZER_FILE} in the folder"
        from tokenizers import Tokenizer

        try:
            ids = Tokenizer.from_file(str(path)).encode(text).ids
        except Exception as exc:  # the tokenizers library raises its own Exception for a file it cannot use
            return None, f"{TOKENIZER_FILE} cannot be used: {str(exc).splitlines()[0] if str(exc) else exc}"
        if len(ids) < 2:
            return None, f"{TOKENIZER_FILE} turns the text into {len(ids)} token(s)"
        if max(ids) >= self.vocab:
            return None, f"{TOKENIZER_FILE} gives token ids up to {max(ids):,}, beyond the model's {self.vocab:,}"
        return text_windows(ids, min(TEXT_WINDOW, self.context)), f"the folder's {TOKENIZER_FILE}"

    def logits(self, module: Any, tokens: Any, embed: bool) -> Any:
        import torch

        if embed:
            return module(input_ids=tokens, use_cache=False).logits
        width = module.get_input_embeddings().weight.shape[-1]
        return module(inputs_embeds=torch.zeros(*tokens.shape, width), use_cache=False).logits
