"""A real Accelerate run on CPU (2 gloo ranks under torchrun): three `accelerator.save_state()` calls with
automatic checkpoint naming, so `checkpoints/checkpoint_0/1/2` each hold Accelerate's own files:
model.safetensors, optimizer.bin, scheduler.bin, random_states_0.pkl, random_states_1.pkl.

    torchrun --nproc_per_node 2 accelerate_run.py OUT
    torchrun --nproc_per_node 2 accelerate_run.py --per-epoch OUT

With `--per-epoch`, `step_scheduler_with_optimizer=False` and the scheduler stepped once every 3 optimizer
steps (an "epoch"), so its last_epoch follows neither the optimizer's step nor the process count.
"""

import sys

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration


def main(out: str, per_epoch: bool) -> None:
    config = ProjectConfiguration(out, automatic_checkpoint_naming=True)
    accelerator = Accelerator(cpu=True, project_config=config, step_scheduler_with_optimizer=not per_epoch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2)
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    for step in range(6):
        x, y = torch.randn(2, 8), torch.randn(2, 4)
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        if not per_epoch or (step + 1) % 3 == 0:
            scheduler.step()
        optimizer.zero_grad()
        if (step + 1) % 2 == 0:
            accelerator.save_state()


if __name__ == "__main__":
    main(sys.argv[-1], "--per-epoch" in sys.argv[1:-1])
