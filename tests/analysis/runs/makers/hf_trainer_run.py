"""A real transformers Trainer run on CPU (2 gloo ranks under torchrun): a tiny GPT-2 built from a config
(no download), 6 steps, a save every 2, so `checkpoint-2/4/6` each hold Trainer's own files:
model.safetensors, optimizer.pt, scheduler.pt, rng_state_0.pth, rng_state_1.pth, trainer_state.json,
training_args.bin.

    torchrun --nproc_per_node 2 hf_trainer_run.py OUT
"""

import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict:
        ids = torch.arange(i, i + 16) % 64
        return {"input_ids": ids, "labels": ids}


def main(out: str) -> None:
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2))
    args = TrainingArguments(
        output_dir=out,
        max_steps=6,
        save_steps=2,
        save_strategy="steps",
        per_device_train_batch_size=2,
        report_to=[],
        use_cpu=True,
        logging_steps=100,
        disable_tqdm=True,
        ddp_backend="gloo",
    )
    Trainer(model=model, args=args, train_dataset=Tokens()).train()


if __name__ == "__main__":
    main(sys.argv[1])
