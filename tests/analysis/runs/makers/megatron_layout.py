"""A Megatron-style run, built without Megatron (it does not install on CPU): the layout and records of
megatron/training/checkpointing.py, written with torch.save.

`get_checkpoint_tracker_filename` -> `latest_checkpointed_iteration.txt` holding the iteration;
`get_checkpoint_name` -> `iter_{iteration:07d}/mp_rank_{tp:02d}/model_optim_rng.pt` (`mp_rank_{tp:02d}_{pp:03d}`
with pipeline stages); each file a dict with `args` (an argparse.Namespace: tensor_model_parallel_size,
pipeline_model_parallel_size, use_distributed_optimizer ...), `checkpoint_version`, `iteration`, `model`,
`optimizer`, `opt_param_scheduler` and `rng_state`, as `save_checkpoint` writes them. Tensor parallel 2:
each rank holds half of every split weight.

    python megatron_layout.py OUT
"""

import argparse
import random
import sys
from pathlib import Path

import torch

TP = 2


def main(out: str) -> None:
    root = Path(out)
    torch.manual_seed(0)
    random.seed(0)
    full = {"embedding.word_embeddings.weight": torch.randn(32, 8), "output_layer.weight": torch.randn(32, 8)}
    for iteration in (10, 20, 30):
        for tp in range(TP):
            args = argparse.Namespace(
                tensor_model_parallel_size=TP,
                pipeline_model_parallel_size=1,
                use_distributed_optimizer=False,
                iteration=iteration,
                micro_batch_size=2,
                global_batch_size=8,
            )
            shard = {name: w.chunk(TP)[tp].clone() for name, w in full.items()}
            params = list(shard.values())
            optimizer = torch.optim.AdamW(params, lr=1e-3)
            for p in params:
                p.grad = torch.ones_like(p)
            optimizer.step()
            state = {
                "args": args,
                "checkpoint_version": 3.0,
                "iteration": iteration,
                "model": {"language_model": shard},
                "optimizer": {"optimizer": optimizer.state_dict()},
                "opt_param_scheduler": {"num_steps": iteration * 8, "max_lr": 1e-3},
                "rng_state": [{"random_rng_state": random.getstate(), "torch_rng_state": torch.get_rng_state()}],
            }
            folder = root / f"iter_{iteration:07d}" / f"mp_rank_{tp:02d}"
            folder.mkdir(parents=True, exist_ok=True)
            torch.save(state, folder / "model_optim_rng.pt")
        (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))


if __name__ == "__main__":
    main(sys.argv[1])
