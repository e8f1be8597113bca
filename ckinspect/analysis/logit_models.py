"""How logit drift learns to build a model: registered plugins, never an import of their package.

A package that knows a model family registers a plugin in the entry-point group `ckinspect.models`
(in its pyproject: `[project.entry-points."ckinspect.models"] name = "package.module"`). The bundled
trainer registers `trainer.ckinspect_plugin`; ckinspect itself never imports `trainer`. Plugins are
discovered with importlib.metadata only when logit drift runs, so opening and reporting never load
them (nor torch). Registered plugins are asked in the order of their names; the built-in Hugging Face
plugin (a folder with `config.json`) is asked last.

A plugin is any object (a module will do) with
    looks_for: str                 what it recognises, completing "the model is unknown: no ..."
    build(ckpt) -> LogitModel | str | None
                                   None: not this plugin's model; a str: its model, but it cannot be
                                   built here (why, in one line); else the model, built lazily.
A LogitModel describes the model; ckinspect.analysis.blockwise runs it:
    label: str                     the report's "model"
    prefixes: tuple[str, ...]      prefixes the checkpoint's names may carry or lack (`model.`)
    strict: bool (optional)        every floating model tensor of the file must be one of its weights
                                   (else tensors it does not have are reported in a note)
    skeleton() -> nn.Module        the model, built as usual: blockwise builds it with its parameters
                                   on the meta device and streams the checkpoint's weights into it
    layers(module) -> ModuleList | None
                                   the decoder layers the forward loops over (None: run it whole)
    batch(seed) -> (Tensor, str)   the fixed, seeded token batch, and how it was drawn
    text_tokens(text) -> (Tensor | None, str)
                                   the bundled text as token windows and the tokenizer's name, or
                                   (None, why it cannot be tokenized)
    logits(module, tokens, embed) -> Tensor
                                   the forward (under no_grad); with embed=False the token embeddings
                                   may be skipped (zeros of the right shape): only what follows the
                                   layers is used then
drift.py rounds the weights to each narrow format, runs every rounding through each block, and compares:
one measurement for every model.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Protocol

from ckinspect.model import Checkpoint
from ckinspect.optional import has_torch, needs_torch_message
from ckinspect.vocab import HF_CONFIG

ENTRY_POINT_GROUP = "ckinspect.models"


class LogitModel(Protocol):
    label: str
    prefixes: tuple[str, ...]

    def skeleton(self) -> Any: ...

    def layers(self, module: Any) -> Any: ...

    def batch(self, seed: int) -> tuple[Any, str]: ...

    def text_tokens(self, text: str) -> tuple[Any, str]: ...

    def logits(self, module: Any, tokens: Any, embed: bool) -> Any: ...


class ModelPlugin(Protocol):
    looks_for: str

    def build(self, ckpt: Checkpoint) -> LogitModel | str | None: ...


def stored_config(ckpt: Checkpoint) -> tuple[Any, dict[str, Any] | None]:
    """(the `format` tag, the model `config` dict) a checkpoint carries at its top level, each None if absent."""
    tree = ckpt.tree if isinstance(ckpt.tree, dict) else {}
    tag = tree.get("format") or ckpt.metadata.get("format")
    config = ckpt.metadata.get("config") if isinstance(ckpt.metadata.get("config"), dict) else tree.get("config")
    return tag, config if isinstance(config, dict) else None


@lru_cache(maxsize=1)
def registered_plugins() -> tuple[tuple[tuple[str, ModelPlugin], ...], tuple[str, ...]]:
    """((name, plugin) for every loadable entry point of the group, by name), (why each other one failed)."""
    from importlib.metadata import entry_points

    plugins, failures = [], []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
        try:
            plugins.append((ep.name, ep.load()))
        except Exception as exc:  # a broken plugin must not break the weight drift: say why instead
            failures.append(f"model plugin {ep.name!r} cannot be loaded ({type(exc).__name__}: {exc})")
    return tuple(plugins), tuple(failures)


def find_model(ckpt: Checkpoint, given_config: dict[str, Any] | None = None) -> tuple[LogitModel | None, str | None]:
    """(the model that can give this checkpoint's logits, None), or (None, why there is none). A checkpoint
    with no config of its own is inferred from its names and shapes (analysis.bare_models), or built
    from `given_config` (`drift --config FILE`)."""
    if not has_torch():  # every model runs in torch, an extra: say so rather than "unknown model"
        return None, needs_torch_message("logit drift")
    plugins, failures = registered_plugins()
    from ckinspect.analysis.bare_models import BareStateDict

    asked = [plugin for _, plugin in plugins] + [HuggingFaceFolder(), BareStateDict(given_config)]
    for plugin in asked:
        found = plugin.build(ckpt)
        if isinstance(found, str):
            return None, found
        if found is not None:
            return found, None
    reason = "the model is unknown: no " + " and no ".join(plugin.looks_for for plugin in asked)
    return None, "; ".join((reason, *failures))


class HuggingFaceFolder:
    """A Hugging Face causal LM folder (`config.json` beside the weights); needs transformers."""

    looks_for = "config.json beside it"

    def build(self, ckpt: Checkpoint) -> LogitModel | str | None:
        folder = ckpt.path if ckpt.path.is_dir() else ckpt.path.parent
        if not (folder / HF_CONFIG).is_file():
            return None
        try:
            import transformers  # noqa: F401
        except ImportError:
            return "a Hugging Face folder, but transformers is not installed: pip install 'ckinspect[hf]'"
        from ckinspect.analysis.hf_causal_lm import HuggingFaceCausalLM

        return HuggingFaceCausalLM.from_folder(folder)
