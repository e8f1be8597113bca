"""A transformers Trainer run SIGKILLed in the middle of a save: `python hf_killed.py OUT STEP`.

Saves every 2 steps with ckinspect's callback on; the save of `STEP` dies (SIGKILL, as a preempted node's
process does) after the Trainer wrote the weights, optimizer and scheduler, before the RNG state and
trainer_state.json: the Trainer writes into checkpoint-STEP/ in place, so that folder stays behind, torn.
"""

import os
import signal
import sys

from transformers import Trainer

from ckinspect.integrations.transformers import CkinspectCallback
from tests.integrations.runs import hf_trainer


def main(out: str, step: int) -> None:
    trainer = hf_trainer(out, [CkinspectCallback(fail_on="error")])
    save_rng = Trainer._save_rng_state

    def dying(self, output_dir):
        if self.state.global_step == step:
            os.kill(os.getpid(), signal.SIGKILL)
        save_rng(self, output_dir)

    Trainer._save_rng_state = dying
    trainer.train()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
