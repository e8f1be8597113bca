"""Tiny real training runs for the integration tests: transformers' Trainer, Lightning, Accelerate.

Each is the framework's own loop and its own save, on CPU, with a model of a few hundred parameters; a
run "goes NaN" by a callback that writes NaN into one weight after a given step, as a diverging run
would have it in its next save.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch

HF_STEPS = 6
HF_SAVE_EVERY = 2


class Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict:
        ids = torch.arange(i, i + 8) % 32
        return {"input_ids": ids, "labels": ids}


def hf_trainer(out: Path, callbacks: list, max_steps: int = HF_STEPS, save_total_limit: int | None = None):
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=32, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=max_steps,
        save_steps=HF_SAVE_EVERY,
        save_strategy="steps",
        save_total_limit=save_total_limit,
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        logging_steps=1000,
        disable_tqdm=True,
        seed=0,
        dataloader_num_workers=0,
    )
    return Trainer(model=model, args=args, train_dataset=Tokens(), callbacks=callbacks)


def hf_nan_after(step: int):
    """A TrainerCallback that writes NaN into one weight at the end of `step` (the run diverged)."""
    from transformers import TrainerCallback

    class NanAfter(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kwargs):
            if state.global_step == step:
                with torch.no_grad():
                    model.transformer.h[0].mlp.c_fc.weight[0, 0] = math.nan

    return NanAfter()


class Started:
    """Records the step a Trainer run started from (its resume point)."""

    def __new__(cls):
        from transformers import TrainerCallback

        class StartedAt(TrainerCallback):
            step: int | None = None

            def on_train_begin(self, args, state, control, **kwargs):
                self.step = state.global_step

        return StartedAt()


# ------------------------------------------------------------------------------------------------ Lightning

LIGHTNING_STEPS = 6


def lightning_module(nan_after: int | None = None):
    import lightning as L

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))

        def training_step(self, batch, _index):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def on_train_batch_end(self, outputs, batch, batch_idx):
            if nan_after is not None and self.trainer.global_step == nan_after:
                with torch.no_grad():
                    self.net[0].weight[0, 0] = math.nan

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    torch.manual_seed(0)
    return Tiny()


def lightning_data():
    generator = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(
        torch.randn(64, 4, generator=generator), torch.randn(64, 2, generator=generator)
    )
    return torch.utils.data.DataLoader(data, batch_size=4)


def lightning_trainer(dirpath: Path, callbacks: list, max_steps: int = LIGHTNING_STEPS, keep: int = -1):
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    every = ModelCheckpoint(dirpath=dirpath, every_n_train_steps=2, save_top_k=keep)
    return L.Trainer(
        max_steps=max_steps,
        accelerator="cpu",
        callbacks=[every, *callbacks],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
    )


# ------------------------------------------------------------------------------------------------ Accelerate

ACCELERATE_STEPS = 6


def accelerate_run(out: Path, after_save, start_from: Path | None = None, nan_after: int | None = None) -> dict:
    """Accelerate's own loop: a save_state every 2 steps into out/step_N, `after_save(accelerator, location)`
    after each; from `start_from` (a save_state folder) it loads that state and goes on. The batches are
    a function of the step, so a resumed run can be compared with a straight one. Returns the weights."""
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    start = 0
    if start_from is not None:
        accelerator.load_state(str(start_from))
        start = int(start_from.name.rsplit("_", 1)[1])
    for step in range(start + 1, ACCELERATE_STEPS + 1):
        generator = torch.Generator().manual_seed(step)
        x, y = torch.randn(4, 4, generator=generator), torch.randn(4, 2, generator=generator)
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        if step == nan_after:
            with torch.no_grad():
                model[0].weight[0, 0] = math.nan
        if step % 2 == 0:
            after_save(accelerator, accelerator.save_state(str(out / f"step_{step}")))
    return {k: v.clone() for k, v in accelerator.unwrap_model(model).state_dict().items()}
