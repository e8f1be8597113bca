"""What ckinspect's training callbacks add to a run: per save and per step, against the same run without them.

    python bench/bench_callbacks.py [--rounds 3] [--steps 60] [--save-every 10] [--only transformers|lightning]

Each round trains the same model twice in this process, without and with the callback (the order
alternating between rounds), on the framework's own loop and saves (transformers' Trainer: a GPT-2 of
4 layers x 128 wide, ~0.8M parameters, checkpoint-N/ of ~10 MB; Lightning: an MLP of the same size,
one .ckpt per save). Printed, as medians over the rounds:
  - the run's wall time, and the ratio with / without;
  - per training step: the median step time (save steps excluded), ratio with / without;
  - per save: the time of the framework's save, the time the callback holds the training thread on
    top (its hooks: on_save, the wait before the next save, the end), and the time the judge takes on
    its worker thread (the values and CRCs read: verify=True).
Figures from a loaded machine mean little alone: the ratios are measured side by side in one run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def _timed(record: list[float], fn: Callable) -> Callable:
    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            record.append(time.perf_counter() - start)

    return wrapper


class Timings:
    def __init__(self) -> None:
        self.total = 0.0
        self.steps: list[float] = []
        self.saves: list[float] = []
        self.held: list[float] = []  # training thread inside the callback's hooks
        self.judged: list[float] = []  # worker thread judging


def _held_hooks(callback, record: list[float], names: tuple[str, ...]) -> None:
    for name in names:
        setattr(callback, name, _timed(record, getattr(callback, name)))


def _judge_timer(callback, record: list[float]) -> None:
    verifier = callback.verifier
    verifier._judge = _timed(record, verifier._judge)


# ------------------------------------------------------------------------------------------------ transformers


def transformers_run(out: Path, steps: int, save_every: int, judged: bool) -> Timings:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    from ckinspect.integrations.transformers import CkinspectCallback

    timings = Timings()

    class Data(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 100_000

        def __getitem__(self, i: int) -> dict:
            ids = torch.arange(i, i + 64) % 256
            return {"input_ids": ids, "labels": ids}

    class StepClock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step % save_every:  # a step that is followed by no save
                timings.steps.append(time.perf_counter() - self.start)

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=64, n_embd=128, n_layer=4, n_head=4))
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=steps,
        save_steps=save_every,
        save_strategy="steps",
        per_device_train_batch_size=8,
        report_to=[],
        use_cpu=True,
        logging_steps=10_000,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    callbacks: list = [StepClock()]
    if judged:
        callback = CkinspectCallback(fail_on="error")
        _held_hooks(callback, timings.held, ("on_save", "on_step_begin", "on_step_end", "on_train_end"))
        _judge_timer(callback, timings.judged)
        callbacks.append(callback)
    trainer = Trainer(model=model, args=args, train_dataset=Data(), callbacks=callbacks)
    trainer._save_checkpoint = _timed(timings.saves, trainer._save_checkpoint)
    start = time.perf_counter()
    trainer.train()
    timings.total = time.perf_counter() - start
    if judged:
        assert [c.verdict for c in callback.verdicts] == ["good"] * (steps // save_every), callback.verdicts
    return timings


# ------------------------------------------------------------------------------------------------ Lightning


def lightning_run(out: Path, steps: int, save_every: int, judged: bool) -> Timings:
    import lightning as L
    import torch
    from lightning.pytorch.callbacks import Callback, ModelCheckpoint

    from ckinspect.integrations.lightning import CkinspectCallback

    timings = Timings()

    class Mlp(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256))

        def training_step(self, batch, _index):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    class StepClock(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, i):
            self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, i):
            if trainer.global_step % save_every:
                timings.steps.append(time.perf_counter() - self.start)

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(steps * 16, 512), torch.randn(steps * 16, 256))
    callbacks: list = [StepClock(), ModelCheckpoint(dirpath=out, every_n_train_steps=save_every, save_top_k=-1)]
    callback = None
    if judged:
        callback = CkinspectCallback(fail_on="error")
        hooks = ("on_train_batch_start", "on_train_batch_end", "on_train_epoch_end", "on_train_end", "on_fit_end")
        _held_hooks(callback, timings.held, hooks)
        _judge_timer(callback, timings.judged)
        callbacks.append(callback)
    trainer = L.Trainer(
        max_steps=steps,
        accelerator="cpu",
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    strategy_save = trainer.strategy.save_checkpoint
    trainer.strategy.save_checkpoint = _timed(timings.saves, strategy_save)  # the write itself
    start = time.perf_counter()
    trainer.fit(Mlp(), torch.utils.data.DataLoader(data, batch_size=16))
    timings.total = time.perf_counter() - start
    if callback is not None:
        assert [c.verdict for c in callback.verdicts] == ["good"] * (steps // save_every), callback.verdicts
    return timings


RUNS = {"transformers": transformers_run, "lightning": lightning_run}


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--only", choices=tuple(RUNS))
    args = parser.parse_args()
    import logging

    logging.getLogger("ckinspect").setLevel(logging.WARNING)
    for name, run in RUNS.items():
        if args.only and name != args.only:
            continue
        plain: list[Timings] = []
        judged: list[Timings] = []
        for round_ in range(args.rounds):
            order = (False, True) if round_ % 2 == 0 else (True, False)
            for with_callback in order:
                with tempfile.TemporaryDirectory(prefix="bench-callbacks-") as folder:
                    timings = run(Path(folder) / "run", args.steps, args.save_every, with_callback)
                (judged if with_callback else plain).append(timings)
        _print(name, args, plain, judged)


def _print(name: str, args: argparse.Namespace, plain: list[Timings], judged: list[Timings]) -> None:
    total_p, total_j = _median([t.total for t in plain]), _median([t.total for t in judged])
    step_p = _median([s for t in plain for s in t.steps])
    step_j = _median([s for t in judged for s in t.steps])
    save_p = _median([s for t in plain for s in t.saves])
    save_j = _median([s for t in judged for s in t.saves])
    saves = args.steps // args.save_every
    held = _median([sum(t.held) / saves for t in judged])
    judge = _median([j for t in judged for j in t.judged])
    print(f"{name}: {args.steps} steps, a save every {args.save_every}, {args.rounds} rounds (medians)")
    print(f"  run            without {total_p:8.3f} s   with {total_j:8.3f} s   ratio {total_j / total_p:.3f}")
    print(f"  step (no save) without {step_p * 1e3:8.2f} ms  with {step_j * 1e3:8.2f} ms  ratio {step_j / step_p:.3f}")
    print(f"  save           without {save_p * 1e3:8.2f} ms  with {save_j * 1e3:8.2f} ms  ratio {save_j / save_p:.3f}")
    print(f"  training thread held by the callback per save: {held * 1e3:.2f} ms ({held / save_p:.1%} of a save)")
    print(f"  judge per save on the worker thread (values and CRCs read): {judge * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
