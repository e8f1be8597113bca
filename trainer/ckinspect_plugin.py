"""The bundled trainer's model, registered with ckinspect's logit drift.

ckinspect never imports `trainer`: it finds this module through the entry point pyproject.toml
declares (`[project.entry-points."ckinspect.models"] trainer = "trainer.ckinspect_plugin"`) and asks
`build(ckpt)`: can you build this checkpoint's model, and give me its logits? (The protocol is in
`ckinspect.analysis.logit_models`.) Importing this module is light: torch and the model load only
once a checkpoint is claimed and its logits are asked for.
"""

from __future__ import annotations

from typing import Any

from ckinspect.analysis.logit_models import stored_config
from ckinspect.model import Checkpoint
from ckinspect.vocab import TRAINER_FORMAT

looks_for = f"{TRAINER_FORMAT} config in the checkpoint"
LABEL = "ckinspect-trainer"


def build(ckpt: Checkpoint) -> TrainerModel | str | None:
    """The trainer's model for one of its resume files (config inside) or for a weights-only file with
    exactly its default names and shapes; why not, when the file is the trainer's but cannot be run."""
    config = _trainer_config(ckpt)
    if config is not None:
        try:
            import trainer.experiment  # noqa: F401
        except ImportError as exc:
            return f"the bundled trainer cannot be imported ({exc})"
        return TrainerModel(ckpt, config)
    if not _looks_like_trainer_weights(ckpt):
        return None
    try:
        import trainer.experiment  # noqa: F401
        from trainer.model import infer_config
    except ImportError as exc:
        return f"weights of the bundled trainer's model, but the trainer cannot be imported ({exc})"
    from ckinspect.analysis.drift import model_tensors

    shapes = {t.name.removeprefix("model."): t for t in model_tensors(ckpt, tied_once=False)}  # TensorInfo has .shape
    inferred = infer_config(shapes)
    if inferred is None:
        return "named like the bundled trainer's model, but not its default shapes, and the file carries no config"
    return TrainerModel(ckpt, inferred.to_dict())


def _trainer_config(ckpt: Checkpoint) -> dict[str, Any] | None:
    """The model config a resume file of this trainer carries (tagged with its format, or laid out like one)."""
    tag, config = stored_config(ckpt)
    if config is None or (tag != TRAINER_FORMAT and ckpt.layout != "trainer"):
        return None
    return config


def _looks_like_trainer_weights(ckpt: Checkpoint) -> bool:
    """A weights-only file named like this trainer's model (its tiny.pth): no config inside."""
    names = {t.name.removeprefix("model.") for t in ckpt.tensors}
    return "tok_embeddings.weight" in names and "layers.0.attn.wq.weight" in names


class TrainerModel:
    """The model a config describes; ckinspect streams its weights from the file, never torch.load."""

    label = LABEL
    prefixes = ("model.", "module.", "_orig_mod.")
    strict = True  # as load_state_dict: a tensor the model does not have means the file is not this model's

    def __init__(self, ckpt: Checkpoint, config: dict[str, Any]) -> None:
        self.ckpt = ckpt
        self.config = config

    def skeleton(self) -> Any:
        import torch

        from trainer.model import build_model

        with torch.random.fork_rng(devices=[]):  # building initialises weights; leave the caller's RNG alone
            return build_model(self.config)

    def layers(self, module: Any) -> Any:
        return module.layers

    def batch(self, seed: int) -> tuple[Any, str]:
        from trainer.data import fixed_batch
        from trainer.experiment import DRIFT_BATCH
        from trainer.model import ModelConfig

        length = ModelConfig.from_dict(self.config).max_seq_len
        inputs, _ = fixed_batch(seed, DRIFT_BATCH, length)
        return inputs, f"{DRIFT_BATCH}x{length} windows of the trainer's held-out text, seed {seed}"

    def text_tokens(self, text: str) -> tuple[Any, str]:
        from ckinspect.analysis.logit_inputs import text_windows
        from trainer.model import ModelConfig

        ids = list(text.encode("utf-8"))  # the model's vocabulary is the 256 byte values
        return text_windows(ids, ModelConfig.from_dict(self.config).max_seq_len), "bytes (the model's vocabulary)"

    def logits(self, module: Any, tokens: Any, embed: bool) -> Any:
        return module(tokens)
