"""The training loop, and the resume that continues it bit for bit.

What a resume needs beyond weights, and where each piece lives in `<name>_resume.pth`:
  model        fp32 master weights (fp16 ones would round away the run's low bits)
  optimizer    AdamW's exp_avg / exp_avg_sq and step per parameter
  step         optimizer steps done; the learning rate is a pure function of it (get_lr)
  epoch, epoch_step, rng
               the data position: the epoch order's place in its permutation, and each rank's
               batch generator and torch RNG state (rng[rank])
  world_size   to convert the step when the number of processes changes (MiniMind's rule)
  config, run  the model and run settings, so the file rebuilds its own model and schedule
With --save-format dcp the same dict is a torch.distributed.checkpoint folder `<name>_step<N>/`
instead: each rank writes its part, `.metadata` last.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch

from trainer import FORMAT, checkpoint
from trainer.data import Batches, Position
from trainer.dist import Dist, barrier, gather, setup, teardown
from trainer.model import ModelConfig, build_model, lm_loss

SAVE_FORMATS = ("file", "dcp")  # one resume file, or a torch.distributed.checkpoint folder (a file per rank)


class TrainerError(Exception):
    """A user error: one line, no traceback."""


@dataclass(frozen=True)
class RunConfig:
    steps: int = 60
    seed: int = 0
    order: str = "random"
    batch_size: int = 8  # per rank, as MiniMind counts it
    seq_len: int = 64
    lr: float = 3e-3
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0
    threads: int = 1  # a fixed thread count keeps CPU reductions in one order
    save_every: int = 0  # 0: save only when the run stops
    name: str = "tiny"
    ablations: tuple[str, ...] = field(default=())  # what a verify ablation left out on resume

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["betas"], data["ablations"] = list(self.betas), list(self.ablations)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunConfig:
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["betas"] = tuple(kw.get("betas", cls.betas))
        kw["ablations"] = tuple(kw.get("ablations", ()))
        return cls(**kw)


def get_lr(step: int, total: int, max_lr: float = 3e-3) -> float:
    """Linear warmup over the first 10% of steps, then cosine down to 10% of max_lr at `total`."""
    warmup = max(1, total // 10)
    if step < warmup:
        return max_lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    min_lr = 0.1 * max_lr
    return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def convert_step(step: int, saved_world_size: int, world_size: int) -> int:
    """MiniMind's rule: keep the samples seen when the number of processes changes."""
    return step * saved_world_size // world_size


@dataclass
class Result:
    step: int
    loss: float
    losses: list[float]
    resume_path: Path | None
    weights_path: Path | None
    world_size: int


@contextlib.contextmanager
def deterministic(threads: int) -> Iterator[None]:
    """Deterministic kernels and a fixed thread count for the run; the caller's settings come back after."""
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # required by deterministic cuBLAS
    prev_threads, prev_det = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(prev_threads)
        torch.use_deterministic_algorithms(prev_det)


def _rng_state(batches: Batches, d: Dist) -> dict[str, torch.Tensor]:
    state = {"torch": torch.get_rng_state()}
    if d.device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(d.device)
    if batches.order == "random":
        state["batch"] = batches.generator.get_state()
    return state


def _restore_rng(state: dict[str, torch.Tensor], batches: Batches, d: Dist, rewind_data: bool) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and d.device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], d.device)
    if "batch" in state and not rewind_data:
        batches.generator.set_state(state["batch"])


@dataclass(frozen=True)
class Ablations:
    """What a verify ablation leaves out on resume, to measure what that piece of state is worth."""

    fresh_optimizer: bool = False  # AdamW's moments start from zero
    rewind_data: bool = False  # the batch order starts from the beginning
    weights_from: str | os.PathLike[str] | None = None  # weights from this file (the fp16 one) instead

    def names(self) -> tuple[str, ...]:
        on = (
            ("fresh-optimizer", self.fresh_optimizer),
            ("rewound-data", self.rewind_data),
            ("from-fp16", self.weights_from is not None),
        )
        return tuple(name for name, enabled in on if enabled)


@dataclass
class TrainState:
    """What the loop works on and a save writes: built once, then handed around whole."""

    d: Dist
    run: RunConfig
    cfg: ModelConfig
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    batches: Batches
    say: Callable[[str], None]
    step: int = 0  # optimizer steps done


def train(
    out: str | os.PathLike[str],
    steps: int,
    *,
    stop_after: int | None = None,
    resume: str | os.PathLike[str] | None = None,
    seed: int | None = None,
    save_every: int | None = None,
    order: str | None = None,
    name: str = "tiny",
    fresh_optimizer: bool = False,
    rewind_data: bool = False,
    weights_from: str | os.PathLike[str] | None = None,
    log: Callable[[str], None] | None = print,
    save_format: str = "file",
) -> Result:
    """Train to `steps` (or stop after `stop_after`), saving `<name>.pth` and `<name>_resume.pth` in `out`.

    The three ablation switches (fresh_optimizer, rewind_data, weights_from) resume deliberately
    without one piece of the state, to measure what that piece is worth. `save_format="dcp"` saves
    each checkpoint as a torch.distributed.checkpoint folder `<name>_step<N>/` instead (one file per rank).
    """
    if save_format not in SAVE_FORMATS:
        raise TrainerError(f"--save-format must be one of {', '.join(SAVE_FORMATS)}")
    d = setup()
    say = log if (log and d.is_main) else (lambda _msg: None)
    ablate = Ablations(fresh_optimizer, rewind_data, weights_from)
    try:
        if steps < 1:
            raise TrainerError("--steps must be at least 1")
        ck = _load_resume(resume) if resume is not None else None
        run, cfg = _settings(ck, steps=steps, seed=seed, order=order, name=name, save_every=save_every, ablate=ablate)
        stop = min(stop_after, steps) if stop_after else steps
        with deterministic(run.threads):
            torch.manual_seed(run.seed)
            model = build_model(cfg).to(d.device)
            batches = Batches(run.order, run.seed, run.batch_size, run.seq_len, d.rank, d.world_size)
            optimizer = torch.optim.AdamW(
                model.parameters(), lr=get_lr(0, steps, run.lr), betas=run.betas, weight_decay=run.weight_decay
            )
            state = TrainState(d, run, cfg, model, optimizer, batches, say)
            if ck is not None:
                _resume(state, ck, ablate)
            if state.step >= stop:
                raise TrainerError(f"the resume file is at step {state.step}; nothing to do up to step {stop}")
            return _train_until(state, stop, Path(out), _save_dcp if save_format == "dcp" else _save)
    finally:
        teardown(d)


def _load_resume(resume: str | os.PathLike[str]) -> dict[str, Any]:
    """A resume file, or a DCP folder saved with --save-format dcp (the same dict either way)."""
    if not Path(resume).exists():
        raise TrainerError(f"no resume file at {resume}")
    ck = checkpoint.load(resume)
    if not isinstance(ck, dict) or ck.get("format") != FORMAT:
        raise TrainerError(f"{resume} is not a {FORMAT} resume file")
    return ck


def _settings(
    ck: dict[str, Any] | None,
    *,
    steps: int,
    seed: int | None,
    order: str | None,
    name: str,
    save_every: int | None,
    ablate: Ablations,
) -> tuple[RunConfig, ModelConfig]:
    """The run and model settings: a resume file's own (seed and order must agree), else the defaults."""
    if ck is not None:
        run = RunConfig.from_dict(ck["run"])
        for flag, given, saved in (("--seed", seed, run.seed), ("--order", order, run.order)):
            if given is not None and given != saved:
                raise TrainerError(f"{flag} {given} differs from the resume file's {saved}")
        cfg = ModelConfig.from_dict(ck["config"])
    else:
        run, cfg = RunConfig(), ModelConfig()
        run = replace(run, seed=run.seed if seed is None else seed, order=order or run.order)
    run = replace(
        run,
        steps=steps,
        name=name,
        ablations=tuple(run.ablations) + ablate.names(),
        save_every=run.save_every if save_every is None else save_every,
    )
    return run, cfg


Save = Callable[[TrainState, Path, float], tuple[Path | None, Path | None]]


def _train_until(state: TrainState, stop: int, out: Path, save: Save) -> Result:
    """The loop: one batch, one AdamW step, the learning rate a function of the step; save when due."""
    d, run, model, optimizer, say = state.d, state.run, state.model, state.optimizer, state.say
    net = torch.nn.parallel.DistributedDataParallel(model) if d.enabled else model
    say(
        f"train: steps {state.step}->{stop} of {run.steps}, order {run.order}, seed {run.seed}, "
        f"world size {d.world_size}" + (f", ablations {', '.join(run.ablations)}" if run.ablations else "")
    )
    losses: list[float] = []
    paths: tuple[Path | None, Path | None] = (None, None)
    while state.step < stop:
        lr = get_lr(state.step, run.steps, run.lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = (t.to(d.device) for t in state.batches.next())
        loss = lm_loss(net(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), run.grad_clip)
        optimizer.step()
        losses.append(loss.item())
        state.step += 1
        if state.step % 10 == 0 or state.step == stop:
            say(f"step {state.step:4d}/{run.steps}  loss {losses[-1]:.4f}  lr {lr:.2e}")
        if (run.save_every and state.step % run.save_every == 0) or state.step == stop:
            paths = save(state, out, losses[-1])
    return Result(stop, losses[-1], losses, paths[0], paths[1], d.world_size)


def _resume(state: TrainState, ck: dict[str, Any], ablate: Ablations) -> None:
    """Load weights, optimizer moments, RNG streams and data position; set the step to continue from."""
    d, say = state.d, state.say
    weights = ck["model"]
    if ablate.weights_from is not None:
        weights = checkpoint.load(ablate.weights_from)
        if isinstance(weights, dict) and weights.get("format") == FORMAT:
            weights = weights["model"]  # a resume file: take its weights only
        say(f"resume: weights from {ablate.weights_from} ({next(iter(weights.values())).dtype}), cast to float32")
    state.model.load_state_dict({k: v.float() for k, v in weights.items()})
    if ablate.fresh_optimizer:
        say("resume: optimizer state left out (fresh AdamW moments)")
    else:
        state.optimizer.load_state_dict(ck["optimizer"])
    saved_ws, step = int(ck["world_size"]), int(ck["step"])
    position = Position(int(ck["epoch"]), int(ck["epoch_step"]))
    if saved_ws != d.world_size:
        converted = convert_step(step, saved_ws, d.world_size)
        say(
            f"resume: world size {saved_ws} -> {d.world_size}: step {step} -> {converted} "
            f"(step * {saved_ws} // {d.world_size})"
        )
        step = converted
        position.epoch_step = convert_step(position.epoch_step, saved_ws, d.world_size)
    rng = ck["rng"]
    if d.rank < len(rng):
        _restore_rng(rng[d.rank], state.batches, d, ablate.rewind_data)
    else:
        say(f"resume: the file holds RNG states for {len(rng)} ranks; the others start fresh streams")
    if ablate.rewind_data:
        say("resume: batch order rewound to the start")
    else:
        state.batches.position = position
    position = state.batches.position
    say(f"resume: step {step}, epoch {position.epoch} (+{position.epoch_step} batches already seen)")
    state.step = step


def _saved_state(state: TrainState, loss: float) -> dict[str, Any]:
    """What a resume needs, as one dict: the same in the single file and in the DCP folder."""
    d = state.d
    rng = gather(_rng_state(state.batches, d), d)  # every rank's streams, so each resumes its own
    return {
        "format": FORMAT,
        "model": checkpoint.fp32_weights(state.model.state_dict()),
        "optimizer": state.optimizer.state_dict(),
        "epoch": state.batches.position.epoch,
        "epoch_step": state.batches.position.epoch_step,
        "step": state.step,
        "world_size": d.world_size,
        "rng": rng,
        "config": state.cfg.to_dict(),
        "run": state.run.to_dict(),
        "loss": loss,
    }


def _save(state: TrainState, out: Path, loss: float) -> tuple[Path | None, Path | None]:
    """Write `<name>_resume.pth` then `<name>.pth`, each atomically (rank 0; every rank's RNG gathered)."""
    d, run = state.d, state.run
    saved = _saved_state(state, loss)
    paths: tuple[Path | None, Path | None] = (None, None)
    if d.is_main:
        out.mkdir(parents=True, exist_ok=True)
        resume_path, weights_path = out / f"{run.name}_resume.pth", out / f"{run.name}.pth"
        # The resume file first: a crash between the two leaves a matching older pair, never a
        # weights file newer than the state it would resume from.
        checkpoint.save(saved, resume_path)
        checkpoint.save(checkpoint.half_weights(saved["model"]), weights_path)
        state.say(f"saved {resume_path} and {weights_path.name} at step {state.step}")
        paths = (resume_path, weights_path)
    barrier(d)
    return paths


def _save_dcp(state: TrainState, out: Path, loss: float) -> tuple[Path | None, Path | None]:
    """Every rank writes its part of `<name>_step<N>/`; the folder is a checkpoint once `.metadata` is there."""
    d = state.d
    saved = _saved_state(state, loss)
    folder = out / f"{state.run.name}_step{state.step:06d}"
    if d.is_main:
        out.mkdir(parents=True, exist_ok=True)
    barrier(d)
    checkpoint.save_dcp(saved, folder)
    state.say(f"saved {folder} (DCP, {d.world_size} rank file(s)) at step {state.step}")
    return folder, None
