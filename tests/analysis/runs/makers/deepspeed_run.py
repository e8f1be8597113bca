"""A real DeepSpeed run on CPU (2 gloo ranks under torchrun, ZeRO stage 1): three saves through
`engine.save_checkpoint`, so the folder holds DeepSpeed's own `latest`, `global_stepN/` tags,
`mp_rank_00_model_states.pt` and one `zero_pp_rank_K_mp_rank_00_optim_states.pt` per rank.

    torchrun --nproc_per_node 2 deepspeed_run.py OUT
"""

import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import deepspeed.comm.torch  # noqa: E402,F401
import torch  # noqa: E402

# The CPU accelerator JIT-compiles a shared-memory all-reduce for inference at start-up (minutes of
# C++ on 2 cores); training and saving never use it.
sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None


def main(out: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    config = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 1},
        "zero_allow_untested_optimizer": True,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    for step in range(6):
        x, y = torch.randn(2, 8), torch.randn(2, 4)
        engine.backward(torch.nn.functional.mse_loss(engine(x), y))
        engine.step()
        if (step + 1) % 2 == 0:
            engine.save_checkpoint(out)


if __name__ == "__main__":
    main(sys.argv[1])
