"""Real Lightning runs whose loop counters move apart from the optimizer's step on purpose, as Lightning's
own features make them:

- `accum/`: automatic optimization, gradient accumulation over 2 batches on 9-batch epochs (so the last,
  odd batch of each epoch steps alone), validation every 4 batches, a step-interval scheduler and a
  ReduceLROnPlateau on the validation loss, EarlyStopping, 3 epochs; saved every 2 optimizer steps (mid-epoch,
  in `on_train_batch_end`, the first before any validation: EarlyStopping's and the plateau's `best` still
  inf), after each validation (monitored) and at each epoch's end: `steps-*`, `val-*`, `end-*`.
- `manual/`: manual optimization with two optimizers (a discriminator stepped every batch, a generator every
  other one): global_step counts both optimizers' steps; saved every 2 and every 3 steps and at epoch end.

    python lightning_loops_run.py OUT
"""

import sys

import lightning as L
import torch


class Accumulating(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def training_step(self, batch, _index):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, _index):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
        steps = {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=2), "interval": "step"}
        plateau = {"scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer), "monitor": "val_loss"}
        return [optimizer], [steps, plateau]


class TwoOptimizers(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.generator, self.critic = torch.nn.Linear(8, 4), torch.nn.Linear(4, 1)

    def training_step(self, batch, index):
        x, y = batch
        generator, critic = self.optimizers()
        critic.zero_grad()
        self.manual_backward(self.critic(y).mean() - self.critic(self.generator(x).detach()).mean())
        critic.step()
        if index % 2 == 0:
            generator.zero_grad()
            self.manual_backward(-self.critic(self.generator(x)).mean())
            generator.step()

    def configure_optimizers(self):
        return torch.optim.Adam(self.generator.parameters()), torch.optim.Adam(self.critic.parameters())


def fit(out: str, module: L.LightningModule, callbacks: list, **options) -> None:
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(36, 8), torch.randn(36, 4))  # 9 batches of 4
    trainer = L.Trainer(accelerator="cpu", callbacks=callbacks, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, **options)  # fmt: skip
    batches = torch.utils.data.DataLoader(data, batch_size=4)
    trainer.fit(module, batches, batches if options.get("val_check_interval") else None)


def main(out: str) -> None:
    save = L.pytorch.callbacks.ModelCheckpoint
    fit(
        f"{out}/accum",
        Accumulating(),
        [save(dirpath=f"{out}/accum", filename="steps-{epoch}-{step}", every_n_train_steps=2, save_top_k=-1),
         save(dirpath=f"{out}/accum", filename="val-{epoch}-{step}", monitor="val_loss", save_top_k=-1),
         save(dirpath=f"{out}/accum", filename="end-{epoch}-{step}", save_on_train_epoch_end=True, save_top_k=-1),
         L.pytorch.callbacks.EarlyStopping(monitor="val_loss", patience=100)],
        max_epochs=3,
        accumulate_grad_batches=2,
        val_check_interval=4,
    )  # fmt: skip
    fit(
        f"{out}/manual",
        TwoOptimizers(),
        [save(dirpath=f"{out}/manual", filename="steps-{epoch}-{step}", every_n_train_steps=2, save_top_k=-1),
         save(dirpath=f"{out}/manual", filename="third-{epoch}-{step}", every_n_train_steps=3, save_top_k=-1),
         save(dirpath=f"{out}/manual", filename="end-{epoch}-{step}", save_on_train_epoch_end=True, save_top_k=-1)],
        max_epochs=2,
    )  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1])
