"""A real Lightning run on CPU: 6 steps, ModelCheckpoint every 2 steps keeping all, so the folder holds
Lightning's own `epoch=0-step=2.ckpt`, `-step=4`, `-step=6`.

    python lightning_run.py OUT
"""

import sys

import lightning as L
import torch


class Tiny(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def training_step(self, batch, _index):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)}


def main(out: str) -> None:
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(32, 8), torch.randn(32, 4))
    every = L.pytorch.callbacks.ModelCheckpoint(dirpath=out, every_n_train_steps=2, save_top_k=-1)
    trainer = L.Trainer(
        max_steps=6,
        accelerator="cpu",
        callbacks=[every],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))


if __name__ == "__main__":
    main(sys.argv[1])
