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
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch

from trainer import FORMAT, checkpoint
from trainer.data import Batches, Position
from trainer.dist import Dist, barrier, gather, setup, teardown
from trainer.model import ModelConfig, build_model, lm_loss

SAVE_FORMATS = ("file", "dcp")


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
    step_delay: float = 0.0,
    nan_at: int | None = None,
    save_delay: float = 0.0,
) -> Result:
    """Train to `steps` (or stop after `stop_after`), saving `<name>.pth` and `<name>_resume.pth` in `out`.

    The three ablation switches (fresh_optimizer, rewind_data, weights_from) resume deliberately
    without one piece of the state, to measure what that piece is worth. `save_format="dcp"` saves
    each checkpoint as a torch.distributed.checkpoint folder `<name>_step<N>/` instead (one file per rank).
    Three switches play a run for `ckinspect watch` to follow: `step_delay` sleeps a random 0..S seconds
    after each step (saves arrive unevenly), `nan_at` puts a NaN into a weight after step K (a divergence),
    `save_delay` stalls each save S seconds half-way (slow storage: a save caught in the middle).
    """
    if save_format not in SAVE_FORMATS:
        raise TrainerError(f"--save-format must be one of {', '.join(SAVE_FORMATS)}")
    d = setup()
    say = log if (log and d.is_main) else (lambda _msg: None)
    try:
        return _train(
            d,
            say,
            Path(out),
            steps,
            stop_after,
            resume,
            seed,
            save_every,
            order,
            name,
            fresh_optimizer,
            rewind_data,
            weights_from,
            save_format,
            step_delay,
            nan_at,
            save_delay,
        )
    finally:
        teardown(d)


def _train(
    d,
    say,
    out,
    steps,
    stop_after,
    resume,
    seed,
    save_every,
    order,
    name,
    fresh_optimizer,
    rewind_data,
    weights_from,
    save_format="file",
    step_delay=0.0,
    nan_at=None,
    save_delay=0.0,
) -> Result:
    if steps < 1:
        raise TrainerError("--steps must be at least 1")
    ck: dict[str, Any] | None = None
    if resume is not None:
        if not Path(resume).exists():
            raise TrainerError(f"no resume file at {resume}")
        ck = checkpoint.load(resume)
        if not isinstance(ck, dict) or ck.get("format") != FORMAT:
            raise TrainerError(f"{resume} is not a {FORMAT} resume file")
        run = RunConfig.from_dict(ck["run"])
        for flag, given, saved in (("--seed", seed, run.seed), ("--order", order, run.order)):
            if given is not None and given != saved:
                raise TrainerError(f"{flag} {given} differs from the resume file's {saved}")
        cfg = ModelConfig.from_dict(ck["config"])
    else:
        run, cfg = RunConfig(), ModelConfig()
        run = replace(run, seed=run.seed if seed is None else seed, order=order or run.order)
    ablations = tuple(run.ablations) + tuple(
        a
        for a, on in (
            ("fresh-optimizer", fresh_optimizer),
            ("rewound-data", rewind_data),
            ("from-fp16", weights_from is not None),
        )
        if on
    )
    run = replace(
        run,
        steps=steps,
        name=name,
        ablations=ablations,
        save_every=run.save_every if save_every is None else save_every,
    )
    stop = min(stop_after, steps) if stop_after else steps

    with deterministic(run.threads):
        torch.manual_seed(run.seed)
        model = build_model(cfg).to(d.device)
        batches = Batches(run.order, run.seed, run.batch_size, run.seq_len, d.rank, d.world_size)
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=get_lr(0, steps, run.lr), betas=run.betas, weight_decay=run.weight_decay
        )
        start = 0
        if ck is not None:
            start = _resume(ck, d, say, model, optimizer, batches, fresh_optimizer, rewind_data, weights_from)
        if start >= stop:
            raise TrainerError(f"the resume file is at step {start}; nothing to do up to step {stop}")
        net = torch.nn.parallel.DistributedDataParallel(model) if d.enabled else model
        say(
            f"train: steps {start}->{stop} of {steps}, order {run.order}, seed {run.seed}, world size {d.world_size}"
            + (f", ablations {', '.join(ablations)}" if ablations else "")
        )

        delays = random.Random(run.seed)  # its own stream: the run's RNG states stay as they would be
        losses: list[float] = []
        paths: tuple[Path | None, Path | None] = (None, None)
        for step in range(start, stop):
            lr = get_lr(step, steps, run.lr)
            for group in optimizer.param_groups:
                group["lr"] = lr
            inputs, targets = (t.to(d.device) for t in batches.next())
            loss = lm_loss(net(inputs), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), run.grad_clip)
            optimizer.step()
            losses.append(loss.item())
            done = step + 1
            if nan_at is not None and done == nan_at:
                with torch.no_grad():
                    next(iter(model.parameters())).view(-1)[0] = float("nan")
                say(f"step {done}: a NaN put into the first weight (--nan-at)")
            if step_delay > 0:
                time.sleep(delays.uniform(0.0, step_delay))
            if done % 10 == 0 or done == stop:
                say(f"step {done:4d}/{steps}  loss {losses[-1]:.4f}  lr {lr:.2e}")
            if (run.save_every and done % run.save_every == 0) or done == stop:
                save = _save_dcp if save_format == "dcp" else _save
                paths = save(out, run, cfg, d, model, optimizer, batches, done, losses[-1], say, save_delay)
        return Result(stop, losses[-1], losses, paths[0], paths[1], d.world_size)


def _resume(ck, d, say, model, optimizer, batches, fresh_optimizer, rewind_data, weights_from) -> int:
    weights = ck["model"]
    if weights_from is not None:
        weights = checkpoint.load(weights_from)
        if isinstance(weights, dict) and weights.get("format") == FORMAT:
            weights = weights["model"]  # a resume file: take its weights only
        say(f"resume: weights from {weights_from} ({next(iter(weights.values())).dtype}), cast to float32")
    model.load_state_dict({k: v.float() for k, v in weights.items()})
    if fresh_optimizer:
        say("resume: optimizer state left out (fresh AdamW moments)")
    else:
        optimizer.load_state_dict(ck["optimizer"])
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
        _restore_rng(rng[d.rank], batches, d, rewind_data)
    else:
        say(f"resume: the file holds RNG states for {len(rng)} ranks; the others start fresh streams")
    if rewind_data:
        say("resume: batch order rewound to the start")
    else:
        batches.position = position
    say(f"resume: step {step}, epoch {batches.position.epoch} (+{batches.position.epoch_step} batches already seen)")
    return step


def _state(run, cfg, d, model, optimizer, batches, step, loss) -> dict[str, Any]:
    """What a resume needs, as one dict: the same for the single file and the DCP folder."""
    rng = gather(_rng_state(batches, d), d)  # every rank's streams, so each resumes its own
    return {
        "format": FORMAT,
        "model": checkpoint.fp32_weights(model.state_dict()),
        "optimizer": optimizer.state_dict(),
        "epoch": batches.position.epoch,
        "epoch_step": batches.position.epoch_step,
        "step": step,
        "world_size": d.world_size,
        "rng": rng,
        "config": cfg.to_dict(),
        "run": run.to_dict(),
        "loss": loss,
    }


def _save(out, run, cfg, d, model, optimizer, batches, step, loss, say, delay=0.0) -> tuple[Path | None, Path | None]:
    state = _state(run, cfg, d, model, optimizer, batches, step, loss)
    paths: tuple[Path | None, Path | None] = (None, None)
    if d.is_main:
        out.mkdir(parents=True, exist_ok=True)
        resume_path, weights_path = out / f"{run.name}_resume.pth", out / f"{run.name}.pth"
        weights = state["model"]
        # The resume file first: a crash between the two leaves a matching older pair, never a
        # weights file newer than the state it would resume from.
        checkpoint.save(state, resume_path, delay=delay)
        checkpoint.save(checkpoint.half_weights(weights), weights_path)
        say(f"saved {resume_path} and {weights_path.name} at step {step}")
        paths = (resume_path, weights_path)
    barrier(d)
    return paths


def _save_dcp(
    out, run, cfg, d, model, optimizer, batches, step, loss, say, delay=0.0
) -> tuple[Path | None, Path | None]:
    """Every rank writes its part of `<name>_step<N>/`; the folder is a checkpoint once `.metadata` is there."""
    state = _state(run, cfg, d, model, optimizer, batches, step, loss)
    folder = out / f"{run.name}_step{step:06d}"
    if d.is_main:
        out.mkdir(parents=True, exist_ok=True)
    barrier(d)
    checkpoint.save_dcp(state, folder, delay)
    say(f"saved {folder} (DCP, {d.world_size} rank file(s)) at step {step}")
    return folder, None
