"""transformers' Trainer: each `checkpoint-N/` judged right after the Trainer has written it.

    from ckinspect.integrations.transformers import CkinspectCallback

    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[CkinspectCallback(fail_on="error")])
    trainer.train(resume_from_checkpoint=ckinspect.last_good(args.output_dir))   # instead of get_last_checkpoint

`on_save` comes on every rank after the Trainer's save; under several ranks they meet at a barrier
first, so that every rank's files (`rng_state_K.pth`, DeepSpeed's ZeRO partitions) are on disk, and the
main process judges the folder on a worker thread while training goes on. At the next hook (a step's
start or end, the next save, the end of training) the verdict is logged; with `fail_on` a save with a
finding at or above it (NaN weights, a missing part, a truncated file) raises CheckpointRejected there,
which ends `trainer.train()` (under torchrun the launcher then ends the other ranks).
"""

from __future__ import annotations

import os

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ckinspect.integrations.verifier import Verifier

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckinspect.api import Candidate


class CkinspectCallback(TrainerCallback):
    """Judge every save of a Trainer run; `fail_on` "error" | "warning" | None (log only).

    `verify`: read every value and CRC (NaN/Inf weights are found; the default) or the structure only.
    `background`: judge on a worker thread (the default) or inside on_save, before training goes on.
    `verdicts`: every judged save (ckinspect.Candidate), oldest first, on the main process."""

    def __init__(self, fail_on: str | None = "error", verify: bool = True, background: bool = True) -> None:
        self.verifier = Verifier(fail_on=fail_on, verify=verify, background=background)

    @property
    def verdicts(self) -> list[Candidate]:
        return self.verifier.verdicts

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.verifier.check()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_save:  # the save that follows may rotate the folder being judged away: wait for it
            self.verifier.wait()
        else:
            self.verifier.check()

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        _every_rank_saved()
        if state.is_world_process_zero:
            self.verifier.submit(os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))
            self.verifier.check()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        try:
            self.verifier.wait()
        finally:
            self.verifier.close()


def _every_rank_saved() -> None:
    """A barrier when several ranks save: the Trainer writes each rank's files and calls on_save without one."""
    import torch.distributed as dist  # the Trainer has imported torch already

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()
