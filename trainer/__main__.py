"""python -m trainer train|verify|samples (README, "The trainer")."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer", description="A small trainer whose resume files continue bit for bit."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train (or resume) and save <name>.pth and <name>_resume.pth")
    train.add_argument("--out", required=True, metavar="DIR")
    train.add_argument("--steps", type=int, required=True, metavar="N", help="length of the schedule")
    train.add_argument(
        "--stop-after", type=int, metavar="K", help="stop at step K of the N-step schedule, as an interrupted run would"
    )
    train.add_argument("--resume", metavar="FILE", help="a <name>_resume.pth to continue from")
    train.add_argument("--seed", type=int, help="default 0 (a resumed run keeps its file's seed)")
    train.add_argument("--save-every", type=int, metavar="M", help="also save every M steps")
    train.add_argument("--order", choices=("random", "epoch"), help="batch order (default random)")
    train.add_argument("--name", default="tiny", help="file name stem (default tiny)")
    train.add_argument(
        "--save-format",
        choices=("file", "dcp"),
        default="file",
        help="file: <name>_resume.pth (default); dcp: a torch.distributed.checkpoint folder <name>_step<N>/ per save",
    )
    ablate = train.add_argument_group("ablations (resume without one piece of state)")
    ablate.add_argument("--fresh-optimizer", action="store_true", help="do not load the optimizer state")
    ablate.add_argument("--rewind-data", action="store_true", help="restart the batch order from the beginning")
    ablate.add_argument(
        "--weights-from", metavar="FILE", help="take the weights from this file (e.g. the fp16 <name>.pth)"
    )

    verify = sub.add_parser("verify", help="the resume experiment, printed as a table")
    verify.add_argument("--json", action="store_true", help="print JSON instead of the table")

    samples = sub.add_parser("samples", help="regenerate samples/")
    samples.add_argument("--out", metavar="DIR", help="default: samples/ beside the trainer package")

    args = parser.parse_args(argv)
    from ckinspect.optional import has_torch, needs_torch_message

    if not has_torch():  # torch is the `ckinspect[torch]` extra; a reporting-only install has none
        print(f"trainer: error: {needs_torch_message('the trainer')}", file=sys.stderr)
        return 2
    from trainer.train import TrainerError

    try:
        if args.command == "train":
            from trainer.train import train as run_train

            if args.resume is None and (args.fresh_optimizer or args.rewind_data or args.weights_from):
                raise TrainerError("the ablation switches only make sense with --resume")
            run_train(
                args.out,
                args.steps,
                stop_after=args.stop_after,
                resume=args.resume,
                seed=args.seed,
                save_every=args.save_every,
                order=args.order,
                name=args.name,
                fresh_optimizer=args.fresh_optimizer,
                rewind_data=args.rewind_data,
                weights_from=args.weights_from,
                save_format=args.save_format,
            )
            return 0
        if args.command == "verify":
            from trainer.experiment import main as verify_main

            return verify_main(as_json=args.json)
        from trainer.samples import generate

        generate(args.out)
        return 0
    except TrainerError as err:
        print(f"trainer: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
