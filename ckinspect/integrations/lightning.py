"""Lightning: each checkpoint judged right after the Trainer has written it.

    from ckinspect.integrations.lightning import CkinspectCallback

    trainer = L.Trainer(callbacks=[ModelCheckpoint(dirpath=ckpts, ...), CkinspectCallback(fail_on="error")])
    trainer.fit(model, ckpt_path=ckinspect.last_good(ckpts))

Lightning's `on_save_checkpoint` hook comes before the file is written, with the checkpoint dict and not
its path. So this callback wraps the Trainer's own `save_checkpoint` for the run (ModelCheckpoint and
a user's `trainer.save_checkpoint` both go through it): once it returns, every strategy has written the
file or folder and passed its barrier, and the main process hands the path to a worker thread. At the
next hook (a batch's start or end, validation, the epoch's end, the end of training) the verdict is
logged; with `fail_on` a checkpoint with a finding at or above it raises CheckpointRejected there, which
ends `trainer.fit()` (Lightning's launchers then end the other ranks).
"""

from __future__ import annotations

import os

from lightning.pytorch.callbacks import Callback

from ckinspect.integrations.verifier import Verifier

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import lightning.pytorch as pl

    from ckinspect.api import Candidate


class CkinspectCallback(Callback):
    """Judge every checkpoint a Lightning run writes; `fail_on` "error" | "warning" | None (log only).

    `verify`: read every value and CRC (NaN/Inf weights are found; the default) or the structure only.
    `background`: judge on a worker thread (the default) or at once, before training goes on.
    `verdicts`: every judged checkpoint (ckinspect.Candidate), oldest first, on the main process."""

    def __init__(self, fail_on: str | None = "error", verify: bool = True, background: bool = True) -> None:
        self.verifier = Verifier(fail_on=fail_on, verify=verify, background=background)
        self._wrapped: tuple[Any, Any] | None = None

    @property
    def verdicts(self) -> list[Candidate]:
        return self.verifier.verdicts

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._wrapped is not None:
            return
        save = trainer.save_checkpoint
        verifier = self.verifier

        def save_checkpoint(filepath: Any, weights_only: bool | None = None, storage_options: Any = None) -> None:
            verifier.wait()  # the previous checkpoint's verdict first: ModelCheckpoint may remove it next
            save(filepath, weights_only=weights_only, storage_options=storage_options)
            if trainer.is_global_zero:
                verifier.submit(os.fspath(filepath))

        trainer.save_checkpoint = save_checkpoint  # type: ignore[method-assign]
        self._wrapped = (trainer, save)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._wrapped is not None:
            wrapped_trainer, save = self._wrapped
            wrapped_trainer.save_checkpoint = save
            self._wrapped = None
        self.verifier.close()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, i: int) -> None:
        self.verifier.check()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, i: int
    ) -> None:
        self.verifier.check()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.verifier.check()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.verifier.check()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.verifier.wait()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.verifier.wait()  # a checkpoint saved after training (on_train_end's ModelCheckpoint saves)
