"""Layout recognisers: map the keys of known checkpoint shapes onto roles.

A reader names every tensor by its dotted path in the saved object (`model.layers.0.attn.wq.weight`,
`optimizer.state.3.exp_avg`, `rng.torch`) and leaves its group "other". A recogniser looks at the
top of the decoded tree (and, for Hugging Face Trainer folders, at the files beside the checkpoint)
and says which top-level key holds the model, which the optimizer, which the RNG state, where the
step counter, epoch and world size are, and where the torch optimizer state dicts sit so the checks
can compare them with the model. `recognise(ckpt)` is pure: it reads nothing but the tree and, for
HF folders, the small `trainer_state.json`; calling it twice gives the same answer.

Anything no recogniser knows still lists: `heuristic_group` sorts its tensors by name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import attrgetter
from pathlib import Path

from ckinspect.dtypes import dtype_info
from ckinspect.model import Checkpoint, TensorInfo
from ckinspect.record import Record, field
from ckinspect.vocab import (
    EPOCH_KEYS,
    HF_RNG_STATE,
    HF_TRAINER_STATE,
    MODEL_KEYS,
    OPTIMIZER_KEYS,
    STEP_KEYS,
    TRAINER_FORMAT_PREFIX,
    WORLD_SIZE_KEYS,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeGuard


# Saved state that fixes which batch comes next, beside an RNG state: samplers, dataloader and loop progress.
DATA_POSITION_KEYS = frozenset(
    {
        "sampler",
        "sampler_state",
        "dataloader",
        "dataloader_state",
        "data_loader",
        "data_position",
        "data_state",
        "batch_idx",
        "batch_index",
        "consumed_samples",
        "consumed_train_samples",
        "samples_seen",
        "tokens_seen",
        "loops",
        "data_iter",
        "train_iter",
    }
)
# Per-parameter optimizer state entries of torch's optimizers (Adam/AdamW, SGD, RMSprop, Adagrad, Adadelta, ...).
OPTIMIZER_STATE_LEAVES = frozenset(
    {
        "exp_avg",
        "exp_avg_sq",
        "max_exp_avg_sq",
        "momentum_buffer",
        "step",
        "square_avg",
        "grad_avg",
        "acc_delta",
        "sum",
        "mu",
        "eta",
        "ax",
        "prev",
        "step_size",
        "exp_inf",
        "exp_avg_factored",
        "exp_avg_sq_row",
        "exp_avg_sq_col",
    }
)
_OPTIMIZER_STATE_NAME = re.compile(r"(^|\.)state\.(?P<param>.+)\.(?P<leaf>[A-Za-z_]+)$")

# Any name that heuristic_group could put in optimizer or rng (one search over all names at once).
_ROLE_NAMES = re.compile(
    r"(^|\.)(" + "|".join(sorted(map(re.escape, OPTIMIZER_KEYS))) + r")(\.|$)|(^|\.)state\.|rng|random_state|generator",
    re.MULTILINE | re.IGNORECASE,
)

# Every match of _ROLE_NAMES contains one of these (all OPTIMIZER_KEYS contain "opt").
_ROLE_WORDS = ("opt", "state.", "rng", "random_state", "generator")

HF_MODEL_FILES = re.compile(r"^(model|pytorch_model|adapter_model)(-\d+-of-\d+)?\.(safetensors|bin)(\.index\.json)?$")
HF_RNG_FILE = re.compile(HF_RNG_STATE)


class Layout(Record):
    """What a recogniser found: which keys hold which role, and the training state it could read."""

    __hash__ = None  # type: ignore[assignment]  # filled in by its recogniser

    name: str
    roles: dict[str, str] = field(default_factory=dict)  # top-level key -> group
    default_group: str | None = None  # group of tensors under no role key (None: guess by name)
    model_prefix: str | None = None  # dotted prefix of the model's state dict ("model.", "state_dict.", "")
    # Torch optimizer state dicts: (dotted prefix of their tensors, the decoded dict) in save order.
    optimizers: list[tuple[str, Mapping[str, Any]]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    # What a resume needs, where the recogniser can tell: "optimizer", "step", "rng" -> present or not.
    # Missing keys are worked out from the tensors by the checks.
    resume_parts: dict[str, bool] = field(default_factory=dict)
    is_resume: bool | None = None  # None: decide from what the checkpoint holds
    companion: bool = False  # one file of a multi-file checkpoint: resume checks run on its main file only
    model_file: Path | None = None  # where the model of a separate optimizer file is (HF folders)

    def group_of(self, tensor: TensorInfo) -> str:
        if self.roles:
            role = self.roles.get(tensor.name.split(".", 1)[0])
            if role is not None:
                return role
        if self.default_group is not None:
            return self.default_group
        return heuristic_group(tensor)


def top_mapping(ckpt: Checkpoint) -> Mapping[str, Any] | None:
    tree = ckpt.tree
    return tree if isinstance(tree, Mapping) else None


def heuristic_group(tensor: TensorInfo) -> str:
    """Group of a tensor by its name alone, for layouts nobody recognised.

    The first dotted component that names a role decides (`app.optim.state.w.exp_avg` -> optimizer,
    `extra.cuda_rng_state` -> rng); then optimizer-state leaves under `.state.` (`state.3.exp_avg`);
    what is left is model if it is floating point (weights) and other if not (counters, masks, ids).
    """
    parts = tensor.name.split(".")
    for part in parts:
        low = part.lower()
        if low in MODEL_KEYS:
            return "model"
        if low in OPTIMIZER_KEYS:
            return "optimizer"
        if _is_rng_name(low, tensor):
            return "rng"
    match = _OPTIMIZER_STATE_NAME.search(tensor.name)
    if match and match.group("leaf") in OPTIMIZER_STATE_LEAVES:
        return "optimizer"
    if dtype_info(tensor.dtype).is_floating:
        return "model"
    return "other"


def _is_rng_name(low: str, tensor: TensorInfo) -> bool:
    if "rng" in low or low in ("random_state", "np_random_state", "torch_random_state"):
        return True
    # A GAN's `generator.conv.weight` is a model; a torch.Generator's state is a 1-D byte tensor.
    return "generator" in low and tensor.dtype == "uint8" and len(tensor.shape) == 1


def is_rng_key(key: str) -> bool:
    low = key.lower()
    return "rng" in low or low in ("random_state", "np_random_state", "generator_state", "generator_states")


def is_torch_optimizer_state(value: Any) -> TypeGuard[Mapping[str, Any]]:
    return isinstance(value, Mapping) and "state" in value and "param_groups" in value


def _is_count(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def optimizer_step(ckpt: Checkpoint, opt: Mapping[str, Any]) -> float | None:
    """The step a torch optimizer state dict records: the largest per-parameter `step` (Adam's counter,
    a tensor or a number); None where it keeps none."""
    from ckinspect.analysis.scalars import read_scalars

    state = opt.get("state") if is_torch_optimizer_state(opt) else None
    entries = state.values() if isinstance(state, Mapping) else ()
    values = [entry.get("step") for entry in entries if isinstance(entry, Mapping)]
    stored = [v for v in values if isinstance(v, TensorInfo)]  # read in one go (one request remotely)
    steps: list[float] = [v for v in [*values, *read_scalars(ckpt, stored)] if _is_count(v)]
    return max(steps) if steps else None


# ---------------------------------------------------------------- bookkeeping

# Values a framework keeps about the run, not computed by training: where each sits in that framework's
# layout (a pattern over the dotted tensor name) and what it means. Their inf is a sentinel by design
# (Lightning's ModelCheckpoint starts `kth_value` at inf, mode "min"), never damage.
_CALLBACK = r"^callbacks\.[^.]*{cls}[^.]*\."  # Lightning: callbacks.<ModelCheckpoint{...}>.<key>
# Patterns, compiled by `re` on the first NaN/Inf they are asked about (a listing never asks: ~0.6 ms saved)
BOOKKEEPING: dict[str, tuple[tuple[str, str], ...]] = {
    "lightning": (
        (_CALLBACK.format(cls="ModelCheckpoint") + r"kth_value$",
         "Lightning ModelCheckpoint's k-th best monitored score (inf/-inf until a monitored score beats it; "
         "without a monitor it stays there)"),
        (_CALLBACK.format(cls="ModelCheckpoint") + r"(best_model_score|current_score)$",
         "Lightning ModelCheckpoint's best/current monitored score"),
        (_CALLBACK.format(cls="ModelCheckpoint") + r"best_k_models\..+$",
         "Lightning ModelCheckpoint's score of one kept checkpoint"),
        (_CALLBACK.format(cls="EarlyStopping") + r"best_score$",
         "Lightning EarlyStopping's best monitored score (inf/-inf before the first)"),
        (r"^lr_schedulers\.\d+\.best$", "ReduceLROnPlateau's best metric (inf/-inf before the first)"),
    ),
}  # fmt: skip
# The same scheduler sentinel wherever a layout keeps its scheduler's state dict under a scheduler key.
_SCHEDULER_BEST = r"^(lr_scheduler|scheduler|lr_schedulers?\.\d+|schedulers?\.\d+)\.best$"


def bookkeeping_meaning(layout: str, name: str) -> str | None:
    """What a tensor is when it is a framework's bookkeeping (its NaN/Inf is then no damage), else None."""
    for pattern, meaning in BOOKKEEPING.get(layout, ()):
        if re.search(pattern, name):
            return meaning
    if re.search(_SCHEDULER_BEST, name):
        return "a ReduceLROnPlateau scheduler's best metric (inf/-inf before the first)"
    return None


# ---------------------------------------------------------------- metadata


def scalar_metadata(top: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level plain values worth showing: numbers, short strings, booleans."""
    out: dict[str, Any] = {}
    for key, value in top.items():
        if not isinstance(key, str):
            continue
        if isinstance(value, (int, float)) or isinstance(value, str) and len(value) <= 200:  # bool included
            out[key] = value
    return out


def first_value(top: Mapping[str, Any], keys: Sequence[str]) -> Any:
    for key in keys:
        if key in top and _is_plain_number(top[key]):
            return top[key]
    return None


def _is_plain_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)) or isinstance(value, TensorInfo)


def _metadata(
    top: Mapping[str, Any], step_keys: Sequence[str] = STEP_KEYS, config_key: str | None = "config"
) -> dict[str, Any]:
    meta = scalar_metadata(top)
    step = first_value(top, step_keys)
    if step is not None:
        meta["step"] = step
    epoch = first_value(top, EPOCH_KEYS)
    if epoch is not None:
        meta["epoch"] = epoch
    world = first_value(top, WORLD_SIZE_KEYS)
    if world is not None:
        meta["world_size"] = world
    if config_key and isinstance(top.get(config_key), Mapping):
        meta["config"] = dict(top[config_key])
    return meta


def _optimizer_entries(top: Mapping[str, Any], key: str) -> list[tuple[str, Mapping[str, Any]]]:
    """The torch optimizer state dict(s) under `key`: one dict, or a list of them (Lightning)."""
    value = top.get(key)
    if is_torch_optimizer_state(value):
        return [(f"{key}.", value)]
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [(f"{key}.{i}.", v) for i, v in enumerate(value) if is_torch_optimizer_state(v)]
    if isinstance(value, Mapping):  # {"adam": state_dict, ...}
        return [(f"{key}.{k}.", v) for k, v in value.items() if is_torch_optimizer_state(v)]
    return []


def _roles_for(top: Mapping[str, Any]) -> dict[str, str]:
    """Top-level keys whose name says their role: `model_state_dict`, `optimizer`, `rng_state` ..."""
    roles: dict[str, str] = {}
    for key in top:
        if not isinstance(key, str):
            continue
        low = key.lower()
        if low in MODEL_KEYS:
            roles[key] = "model"
        elif low in OPTIMIZER_KEYS:
            roles[key] = "optimizer"
        elif is_rng_key(key):
            roles[key] = "rng"
        elif low in ("lr_scheduler", "lr_schedulers", "scheduler", "schedulers", "scaler", "grad_scaler"):
            roles[key] = "other"
    return roles


def has_data_position(top: Mapping[str, Any] | None) -> bool:
    return top is not None and any(isinstance(k, str) and k.lower() in DATA_POSITION_KEYS for k in top)


# ---------------------------------------------------------------- recognisers


def _trainer(ckpt: Checkpoint, top: Mapping[str, Any] | None) -> Layout | None:
    """The bundled trainer: {model, optimizer, step, epoch, world_size, rng, config, format}."""
    if top is None or not str(top.get("format", "")).startswith(TRAINER_FORMAT_PREFIX):
        return None
    layout = Layout("trainer", roles=_roles_for(top), model_prefix="model.", metadata=_metadata(top))
    layout.roles.update({"model": "model", "optimizer": "optimizer", "rng": "rng"})
    layout.optimizers = _optimizer_entries(top, "optimizer")
    # The trainer's inference file carries the tag too but no optimizer and no step: not a resume file.
    layout.is_resume = "optimizer" in top or "step" in top or "rng" in top
    return layout


def _lightning(ckpt: Checkpoint, top: Mapping[str, Any] | None) -> Layout | None:
    """PyTorch Lightning: {state_dict, optimizer_states, lr_schedulers, global_step, epoch, loops, ...}."""
    if top is None or "state_dict" not in top:
        return None
    if not any(k in top for k in ("optimizer_states", "global_step", "pytorch-lightning_version", "lr_schedulers")):
        return None
    meta = _metadata(top, step_keys=("global_step", "step"), config_key=None)
    if isinstance(top.get("hyper_parameters"), Mapping):
        meta["config"] = dict(top["hyper_parameters"])
    layout = Layout("lightning", roles=_roles_for(top), model_prefix="state_dict.", metadata=meta)
    layout.roles.update({"state_dict": "model", "optimizer_states": "optimizer", "lr_schedulers": "other"})
    layout.roles.update({k: "other" for k in ("callbacks", "loops") if k in top})  # bookkeeping, not weights
    layout.optimizers = _optimizer_entries(top, "optimizer_states")
    layout.is_resume = True
    return layout


def _nanogpt(ckpt: Checkpoint, top: Mapping[str, Any] | None) -> Layout | None:
    """nanoGPT: {model, optimizer, model_args, iter_num, best_val_loss, config}; keys may carry `_orig_mod.`."""
    if top is None or "model" not in top or not ("iter_num" in top or "model_args" in top):
        return None
    meta = _metadata(top, step_keys=("iter_num", "step"), config_key=None)
    if isinstance(top.get("model_args"), Mapping):
        meta["config"] = dict(top["model_args"])
    if isinstance(top.get("config"), Mapping):
        meta["train_config"] = dict(top["config"])
    layout = Layout("nanogpt", roles=_roles_for(top), model_prefix="model.", metadata=meta)
    layout.roles.update({"model": "model", "optimizer": "optimizer"})
    layout.optimizers = _optimizer_entries(top, "optimizer")
    layout.is_resume = "optimizer" in top or "iter_num" in top
    return layout


def _minimind(ckpt: Checkpoint, top: Mapping[str, Any] | None) -> Layout | None:
    """MiniMind's resume file: {model, optimizer, epoch, step, world_size, wandb_id?}.

    Its sampler skips the `step` batches already seen of an epoch whose order is fixed by the epoch,
    so epoch + step is its data position.
    """
    if top is None or not all(k in top for k in ("model", "optimizer", "epoch", "step", "world_size")):
        return None
    layout = Layout("minimind", roles=_roles_for(top), model_prefix="model.", metadata=_metadata(top))
    layout.roles.update({"model": "model", "optimizer": "optimizer"})
    layout.optimizers = _optimizer_entries(top, "optimizer")
    layout.is_resume = True
    layout.resume_parts["rng"] = True
    return layout


def _hf_trainer(ckpt: Checkpoint, top: Mapping[str, Any] | None) -> Layout | None:
    """A file of a Hugging Face Trainer checkpoint folder (checkpoint-500/: model, optimizer.pt, ...).

    Each file is reported on its own; the folder-wide resume check runs on the model file, which
    also carries `trainer_state.json`'s global_step and epoch.
    """
    from ckinspect.io import folders
    from ckinspect.io.remote import as_path

    path = as_path(ckpt.path)  # under a listed URL prefix, its siblings come from the listing (io.folders)
    name, folder = path.name, path.parent
    if not folders.is_file(folder / HF_TRAINER_STATE):
        return None
    meta = _trainer_state_metadata(folder / HF_TRAINER_STATE)
    if HF_MODEL_FILES.match(name):
        return _hf_model_file(folder, meta)
    if name in ("optimizer.pt", "optimizer.bin"):
        return _hf_optimizer_file(folder, top, meta)
    if HF_RNG_FILE.match(name):
        return Layout("hf-trainer", default_group="rng", metadata=meta, companion=True)
    if name in ("scheduler.pt", "training_args.bin", "scaler.pt"):
        return Layout("hf-trainer", default_group="other", metadata=meta, companion=True)
    return None


def _trainer_state_metadata(state_file: Path) -> dict[str, Any]:
    """What trainer_state.json says about the run: global_step (the step), epoch, and a few settings."""
    from ckinspect.io import folders

    try:
        state = json.loads(folders.read_bytes(state_file).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(state, Mapping):
        return {}
    meta: dict[str, Any] = {}
    for key, as_key in (("global_step", "step"), ("epoch", "epoch")):
        if _is_plain_number(state.get(key)):
            meta[as_key] = state[key]
    for key in ("max_steps", "num_train_epochs", "train_batch_size", "best_metric"):
        if isinstance(state.get(key), (int, float)) and not isinstance(state.get(key), bool):
            meta[key] = state[key]
    return meta


def _hf_model_file(folder: Path, meta: dict[str, Any]) -> Layout:
    """The model file carries the folder-wide resume check: which parts the folder holds."""
    from ckinspect.io import folders

    layout = Layout("hf-trainer", default_group="model", model_prefix="", metadata=meta)
    layout.is_resume = True
    layout.resume_parts = {
        "optimizer": folders.is_file(folder / "optimizer.pt") or folders.is_file(folder / "optimizer.bin"),
        "step": "step" in meta,
        "rng": any(HF_RNG_FILE.match(e.name) for e in folders.entries(folder)),
    }
    return layout


def _hf_optimizer_file(folder: Path, top: Mapping[str, Any] | None, meta: dict[str, Any]) -> Layout:
    """optimizer.pt, held against the model file beside it."""
    from ckinspect.io import folders

    layout = Layout("hf-trainer", default_group="optimizer", metadata=meta, companion=True)
    if top is not None and is_torch_optimizer_state(top):
        layout.optimizers = [("", top)]
    models = sorted(
        e.path
        for e in folders.entries(folder)
        if HF_MODEL_FILES.match(e.name) and not re.search(r"-\d+-of-\d+", e.name)
    )
    # model.safetensors before pytorch_model.bin; a sharded set by its index
    layout.model_file = next((p for p in models if p.name.endswith((".index.json", ".safetensors"))), None) or (
        models[0] if models else None
    )
    return layout


def _dcp(ckpt: Checkpoint, top: Mapping[str, Any] | None) -> Layout | None:
    """torch.distributed.checkpoint folder: fqns like `model.w`, `optim.state.w.exp_avg`, `app.model.w`."""
    if ckpt.format != "dcp":
        return None
    meta: dict[str, Any] = {}
    scope = top
    if top is not None and len(top) == 1:  # {"app": AppState} as in torch's DCP tutorial
        only = next(iter(top.values()))
        scope = only if isinstance(only, Mapping) else top
    if scope is not None:
        meta = _metadata(scope)
    model_prefix = None
    for t in ckpt.tensors:
        parts = t.name.split(".")
        for i, part in enumerate(parts[:-1]):
            if part.lower() in MODEL_KEYS:
                model_prefix = ".".join(parts[: i + 1]) + "."
                break
        if model_prefix:
            break
    # Optimizer state is found by name (`optim.state.layers.0.weight.exp_avg`), see checks.optimizer_states.
    return Layout("dcp", model_prefix=model_prefix, metadata=meta)


def _generic_resume(ckpt: Checkpoint, top: Mapping[str, Any] | None) -> Layout | None:
    """The common hand-rolled resume dict: {model_state_dict, optimizer_state_dict, epoch, ...}."""
    if top is None:
        return None
    roles = _roles_for(top)
    has_model = "model" in roles.values()
    if not has_model or not ("optimizer" in roles.values() or first_value(top, STEP_KEYS) is not None):
        return None
    model_key = next(k for k, r in roles.items() if r == "model")
    layout = Layout("resume", roles=roles, model_prefix=f"{model_key}.", metadata=_metadata(top))
    for key, role in roles.items():
        if role == "optimizer":
            layout.optimizers += _optimizer_entries(top, key)
    layout.is_resume = True
    return layout


def _bare_optimizer(ckpt: Checkpoint, top: Mapping[str, Any] | None) -> Layout | None:
    """`torch.save(optimizer.state_dict())`: {state, param_groups}."""
    if top is None or not is_torch_optimizer_state(top):
        return None
    return Layout(
        "optimizer", default_group="optimizer", optimizers=[("", top)], metadata=scalar_metadata(top), companion=True
    )


def _rng_file(ckpt: Checkpoint, top: Mapping[str, Any] | None) -> Layout | None:
    """A file of RNG states only (`rng_state.pth` outside an HF folder, `rng.pt` ...)."""
    if not re.search(r"(^|[^a-z])rng", Path(ckpt.path).name.lower()):
        return None
    return Layout("rng", default_group="rng", companion=True)


def _state_dict(ckpt: Checkpoint, top: Mapping[str, Any] | None) -> Layout | None:
    """A plain state dict or weights file: every tensor is a model weight.

    A flat mapping of names to tensors (a state dict, a safetensors header) counts as one unless its
    names say otherwise (`optimizer.state.0.exp_avg` flattened into a safetensors file).
    """
    if top is not None and not (top and all(map(isinstance, top.values(), repeat(TensorInfo)))):  # tested in C
        return None
    if top is None and ckpt.format not in ("safetensors", "sharded"):
        return None
    if not ckpt.tensors or _names_a_role("\n".join(map(attrgetter("name"), ckpt.tensors))):
        return None
    # Weights only: a step in its metadata (safetensors `__metadata__`) records provenance, not resume state.
    return Layout("state_dict", default_group="model", model_prefix="", metadata={}, is_resume=False)


def _names_a_role(names: str) -> bool:
    """_ROLE_NAMES.search(names), skipped when no word it looks for occurs at all (a case-insensitive
    regex with alternatives cannot skip ahead: 50,000 names took 40 ms, the substring tests 2 ms)."""
    if names.isascii():  # non-ASCII text can match ASCII letters case-insensitively (K and the Kelvin sign)
        low = names.lower()
        if not any(word in low for word in _ROLE_WORDS):
            return False
    return _ROLE_NAMES.search(names) is not None


RECOGNISERS: tuple[Callable[[Checkpoint, Mapping[str, Any] | None], Layout | None], ...] = (
    _trainer,
    _lightning,
    _nanogpt,
    _minimind,
    _hf_trainer,
    _dcp,
    _rng_file,
    _state_dict,  # before the key-based guesses: a flat state dict can have 50,000 keys
    _generic_resume,
    _bare_optimizer,
)


def recognise(ckpt: Checkpoint) -> Layout:
    """The first recogniser that knows this checkpoint's shape, or an "unknown" layout that guesses by name."""
    top = top_mapping(ckpt)
    for recogniser in RECOGNISERS:
        layout = recogniser(ckpt, top)
        if layout is not None:
            return layout
    layout = Layout("unknown", metadata=_metadata(top) if top is not None else {})
    if top is not None:
        layout.roles = _roles_for(top)
        for key, role in layout.roles.items():
            if role == "optimizer":
                layout.optimizers += _optimizer_entries(top, key)
        model_keys = [k for k, r in layout.roles.items() if r == "model"]
        if model_keys:
            layout.model_prefix = f"{model_keys[0]}."
    return layout
