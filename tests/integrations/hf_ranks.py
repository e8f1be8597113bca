"""A transformers Trainer run on 2 gloo ranks with ckinspect's callback: `torchrun --nproc_per_node 2
hf_ranks.py OUT NAN_AFTER` (0: no NaN). Rank 0 writes the verdicts it logged to OUT/verdicts.json;
a rejected save ends the run with the exception on rank 0."""

import json
import math
import sys

import torch
from transformers import TrainerCallback

from ckinspect.integrations.transformers import CkinspectCallback
from tests.integrations.runs import hf_trainer


class NanAfter(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.step:
            with torch.no_grad():
                getattr(model, "module", model).transformer.h[0].mlp.c_fc.weight[0, 0] = math.nan


def main(out: str, nan_after: int) -> None:
    callback = CkinspectCallback(fail_on="error")
    trainer = hf_trainer(out, [NanAfter(nan_after), callback])
    trainer.args.ddp_backend = "gloo"
    try:
        trainer.train()
    finally:
        if trainer.is_world_process_zero():
            verdicts = [{"path": str(c.path), "verdict": c.verdict, "parts": [p.name for p in c.parts]}
                        for c in callback.verdicts]  # fmt: skip
            with open(f"{out}/verdicts.json", "w") as f:
                json.dump(verdicts, f)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
