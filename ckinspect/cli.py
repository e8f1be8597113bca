"""The one entry point. Imports lazily so `--help` and `--report` stay fast and torch-free.

    ckinspect PATH                     TUI on a file or folder
    ckinspect diff A B                 TUI, side-by-side diff
    ckinspect --report PATH...         headless report
    ckinspect diff A B --report        headless diff
    ckinspect repair PATH [--apply]    plan (default: dry run) or apply repairs of interrupted saves
    ckinspect drift PATH [--report]    fp16/bf16 vs fp32 drift
    ckinspect salvage BROKEN OUT       recover the whole tensors of a damaged file
    ckinspect convert IN OUT           resume file -> weights, torch -> safetensors, ...
    ckinspect last-good RUN_DIR        newest whole, intact, safe, resumable checkpoint of a run
    ckinspect watch RUN_DIR [--report] follow a run live: judge each checkpoint as its save completes

Exit status: 0 nothing at or above --fail-on (diff: identical); 1 findings at or above it
(diff: different); 2 usage or internal error.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Sequence

from ckinspect import lifetime, settings
from ckinspect.vocab import (
    EXIT_ERROR,
    EXIT_OK,
    FAIL_ON_CHOICES,
    REPORT_FORMATS,
    VERSION,
    WATCH_KEEP_MIB,
    CkinspectError,
)


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size tells it: COLUMNS, then the tty, then 80."""
    try:
        return max(int(os.environ["COLUMNS"]), 1)
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's own layout, descriptions and examples kept as written. argparse builds one per
    add_argument and, left to find the width itself, imports shutil (with bz2 and lzma: ~3 ms,
    a twentieth of a quick report)."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_columns() - 2)


def _help_formatter() -> type[argparse.HelpFormatter]:
    """rich-argparse's coloured layout (colour only on a terminal) when --help is asked for, else argparse's:
    importing rich costs more than parsing a command line."""
    if not _HELP_ASKED:
        return _Formatter
    try:
        from rich_argparse import RawDescriptionRichHelpFormatter
    except ImportError:  # an install without it: plain help, same words
        return _Formatter

    class RichFormatter(RawDescriptionRichHelpFormatter):
        def __init__(self, prog: str) -> None:
            super().__init__(prog, width=_columns() - 2)

    return RichFormatter


_HELP_ASKED = False


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit 2 (argparse's default status too)."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(formatter_class=_help_formatter(), **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_ERROR, f"ckinspect: error: {message}\n(try: {self.prog} --help)\n")


MAIN_DESCRIPTION = """\
Inspect, diff, check and repair training checkpoints without executing them.

commands (ckinspect COMMAND --help for each):
  ckinspect PATH...             browse files or folders (--report: print)
  ckinspect diff A B            compare two checkpoints (--report: print)
  ckinspect repair PATH         plan (then --apply) repairs of cut-short saves
  ckinspect drift PATH          what fp16/bf16 does to the weights and logits
  ckinspect salvage BROKEN OUT  recover the whole tensors of a damaged file
  ckinspect convert IN OUT      resume -> weights, torch -> safetensors ...
  ckinspect last-good RUN_DIR   the newest whole checkpoint of a run (its path)
  ckinspect watch RUN_DIR       judge each checkpoint as its save completes
"""

MAIN_EXAMPLES = """\
examples:
  ckinspect runs/step_60_resume.pth            browse one checkpoint
  ckinspect --report runs/                     every checkpoint found
  ckinspect --report ckpt.pth --format json    the schema-1 JSON report
  ckinspect --report --fail-on warning c/*.pth  CI: exit 1 on a warning
  ckinspect --report --jobs 4 model.safetensors.index.json   4 shards at once
  torchrun --nnodes 2 --nproc_per_node 8 -m ckinspect --report ckpt/
      every rank scans its share of the parts; rank 0 writes the report and
      every rank exits with its status (CKINSPECT_DISTRIBUTED=0: do not join)

exit status: 0 nothing at or above --fail-on, 1 findings at or above it,
             2 usage or internal error"""


def _add_output_options(parser: argparse.ArgumentParser, formats: tuple[str, ...] = REPORT_FORMATS) -> None:
    """--format (sarif and junit only for commands that report findings), --fail-on, --output, --quick."""
    group = parser.add_argument_group("report options")
    group.add_argument("--format", choices=formats, default="text", help="report format (default: text)")
    group.add_argument(
        "--fail-on",
        choices=FAIL_ON_CHOICES,
        default="error",
        help="exit 1 when a finding is at or above this severity (default: error)",
    )
    group.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE (atomically) instead of stdout")
    group.add_argument("--quick", action="store_true", help="structure only: skip the value scan")
    group.add_argument("--no-progress", action="store_true", help="never draw a progress bar")


_PLAIN_FORMATS = ("text", "json", "markdown")  # commands whose output is not a list of findings


def build_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one command ("main" or a subcommand); only that one is built, as each costs ~1 ms."""
    if command == "main":
        main = _Parser(
            prog="ckinspect",
            description=MAIN_DESCRIPTION,
            epilog=MAIN_EXAMPLES,
        )
        main.add_argument("paths", nargs="+", metavar="PATH", help="checkpoint file(s) or folder(s)")
        main.add_argument("--report", action="store_true", help="print a report instead of opening the TUI")
        main.add_argument(
            "--verbose", "-v", action="store_true", help="with several checkpoints: every one's groups and tensors"
        )
        main.add_argument(
            "--checkpoints-only",
            action="store_true",
            help="skip, silently, named files that are not checkpoints by content or suffix (for hooks over "
            "staged files); exit 0 when none is left",
        )
        main.add_argument("--version", action="version", version=f"ckinspect {VERSION}")
        _add_output_options(main)
        main.add_argument(
            "--jobs",
            "-j",
            type=int,
            metavar="N",
            help="with --report: scan the files of sharded and DCP checkpoints, and the checkpoints of a "
            "folder, on N processes (default: the number of cores, for 1 GiB or more of data; 1: this "
            "process only). Under torchrun each rank scans its share and rank 0 writes the report",
        )
        return main
    return _SUBCOMMANDS[command]()


def _diff_parser() -> argparse.ArgumentParser:
    diff = _Parser(
        prog="ckinspect diff",
        description="Compare two checkpoints tensor by tensor, and the values beside them\n(step, lr, loss, config).",
        epilog="examples:\n  ckinspect diff runs/step_30.pth runs/step_60.pth\n"
        "  ckinspect diff a_resume.pth b.safetensors --report --only model\n"
        "  ckinspect diff a.pth b.pth --report --format json --atol 1e-6",
    )
    diff.add_argument("a", metavar="A", help="the first checkpoint (file or folder): the reference")
    diff.add_argument("b", metavar="B", help="the second checkpoint: what changed from A to B")
    diff.add_argument("--report", action="store_true", help="print the diff instead of opening the TUI")
    diff.add_argument(
        "--only",
        action="append",
        metavar="GROUP",
        help="compare only this group (model, optimizer, rng, other); repeatable",
    )
    diff.add_argument("--atol", type=float, default=0.0, help="values within this absolute tolerance count as the same")
    _add_output_options(diff)
    return diff


def _repair_parser() -> argparse.ArgumentParser:
    repair = _Parser(
        prog="ckinspect repair",
        description="Find interrupted saves and plan (or apply) their repair.",
        epilog="examples:\n  ckinspect repair runs/                 the plan (a dry run)\n"
        "  ckinspect repair runs/ --apply         carry it out\n"
        "  ckinspect repair runs/ --undo          put back what --apply replaced",
    )
    repair.add_argument("path", metavar="PATH", help="a checkpoint file or a run folder")
    mode = repair.add_mutually_exclusive_group()
    mode.add_argument("--apply", action="store_true", help="carry out the plan (default: dry run)")
    mode.add_argument("--undo", action="store_true", help="restore what the last --apply replaced or set aside")
    _add_output_options(repair)
    return repair


def _drift_parser() -> argparse.ArgumentParser:
    drift = _Parser(
        prog="ckinspect drift",
        description="What fp16/bf16 does to the weights and, where the model is known (the bundled\n"
        "trainer's, a Hugging Face causal LM folder), the logits. PATH may be a Hugging\nFace model folder.",
        epilog="examples:\n  ckinspect drift runs/step_60_resume.pth --report\n"
        "  ckinspect drift ./Llama-3.2-1B --report --fp8         block by block\n"
        "  ckinspect drift model/ --report --format json -o drift.json",
    )
    drift.add_argument("path", metavar="PATH", help="a checkpoint, or a Hugging Face model folder")
    drift.add_argument("--report", action="store_true", help="print instead of opening the TUI")
    drift.add_argument(
        "--config",
        metavar="FILE",
        help="a config.json (transformers' format), or nanoGPT's model_args as JSON, for a state dict that "
        "carries none; without it the architecture is inferred from names and shapes, and what was assumed is said",
    )
    drift.add_argument(
        "--fp8",
        action="store_true",
        help="also measure the logits under fp8 (float8_e4m3fn and float8_e5m2, simulated with per-tensor scaling)",
    )
    drift.add_argument(
        "--whole-model",
        action="store_true",
        help="load every weight at once instead of block by block (faster on small models; same numbers)",
    )
    _add_output_options(drift)
    return drift


def _salvage_parser() -> argparse.ArgumentParser:
    salvage = _Parser(
        prog="ckinspect salvage",
        description="Recover every whole, CRC-valid tensor of a damaged checkpoint.",
        epilog="examples:\n  ckinspect salvage cut_short.pth recovered.pth\n"
        "  ckinspect salvage cut_short.pth recovered.safetensors --format json",
    )
    salvage.add_argument("broken", metavar="BROKEN", help="the damaged checkpoint (never changed)")
    salvage.add_argument("out", metavar="OUT", help="where the whole tensors go (.safetensors, else a torch zip)")
    _add_output_options(salvage, _PLAIN_FORMATS)
    return salvage


def _convert_parser() -> argparse.ArgumentParser:
    convert = _Parser(
        prog="ckinspect convert",
        description="Convert a checkpoint: resume -> weights, torch -> safetensors, legacy -> zip,\nDCP -> one file.",
        epilog="examples:\n  ckinspect convert step_60_resume.pth weights.safetensors --only model\n"
        "  ckinspect convert model.pth model_bf16.safetensors --dtype bf16\n"
        "  ckinspect convert dcp_checkpoint/ one_file.pth",
    )
    convert.add_argument("input", metavar="IN", help="the checkpoint to read (file or folder)")
    convert.add_argument("out", metavar="OUT", help="the file to write (.safetensors, else a torch zip)")
    convert.add_argument("--dtype", choices=("fp32", "fp16", "bf16"), help="cast floating tensors")
    convert.add_argument("--only", action="append", metavar="GROUP", help="keep only this group; repeatable")
    convert.add_argument("--trust", action="store_true", help="allow a file whose pickle names code-running globals")
    convert.add_argument(
        "--refuse-left-out", action="store_true", help="refuse instead of leaving out tensors OUT cannot hold"
    )
    _add_output_options(convert, _PLAIN_FORMATS)
    return convert


def _last_good_parser() -> argparse.ArgumentParser:
    last_good = _Parser(
        prog="ckinspect last-good",
        description="Print the newest checkpoint of a run that is whole, intact, safe and resumable\n(exit 1: none).",
        epilog='examples:\n  python train.py --resume "$(ckinspect last-good runs/)"\n'
        "  ckinspect last-good runs/ --format json\n  ckinspect last-good runs/ --all --verify --format json",
    )
    last_good.add_argument("run_dir", metavar="RUN_DIR", help="the folder the run writes its checkpoints to")
    last_good.add_argument(
        "--verify",
        action="store_true",
        help="check every CRC and value of every checkpoint judged (by default only the one named is read)",
    )
    last_good.add_argument(
        "--quick",
        action="store_true",
        help="structure only: the named checkpoint's values are not read (it may hold NaN); says so on stderr",
    )
    last_good.add_argument(
        "--all",
        action="store_true",
        help="judge every checkpoint of the run (by default what the answer needs: newest first, the newer ones "
        "that fail, then the answer; json/markdown list the older ones as not-judged)",
    )
    last_good.add_argument(
        "--jobs",
        "-j",
        type=int,
        metavar="N",
        help="with --verify: scan the files of each checkpoint (rank files, shards) on N processes "
        "(default: the number of cores, for 1 GiB or more of data; 1: this process only)",
    )
    last_good.add_argument(
        "--format",
        choices=REPORT_FORMATS,
        default="text",
        help="text: the path alone (default); json/markdown: every checkpoint with its verdict and reasons "
        "(not-judged: older than the answer; --all judges them); sarif: the judged candidates' findings; "
        "junit: a testcase per judged candidate, failed by what keeps it from resuming",
    )
    last_good.add_argument("--output", "-o", metavar="FILE", help="write to FILE (atomically) instead of stdout")
    return last_good


def _watch_parser() -> argparse.ArgumentParser:
    watch = _Parser(
        prog="ckinspect watch",
        description="Follow a run live: judge each checkpoint once, the moment its save has finished.",
        epilog="examples:\n  ckinspect watch runs/\n"
        "  ckinspect watch runs/ --report --format json --fail-on error\n"
        "  ckinspect watch runs/ --report --once",
    )
    watch.add_argument("run_dir", metavar="RUN_DIR", help="the folder the run writes its checkpoints to")
    watch.add_argument("--report", action="store_true", help="print one line per checkpoint instead of the TUI")
    watch.add_argument("--once", action="store_true", help="judge what is there now and exit (with --report)")
    watch.add_argument(
        "--settle",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="an unfinished save unchanged this long has lost its writer: judge it (default: 30)",
    )
    watch.add_argument(
        "--interval", type=float, default=1.0, metavar="SECONDS", help="look again at least this often (default: 1)"
    )
    watch.add_argument("--poll", action="store_true", help="poll instead of using file events (NFS, FUSE)")
    watch.add_argument("--format", choices=("text", "json"), default="text", help="text lines or JSON lines")
    watch.add_argument(
        "--fail-on",
        choices=("error", "warning", "never"),
        default="error",
        help="exit 1 at the first finding at or above this severity (default: error)",
    )
    watch.add_argument("--output", "-o", metavar="FILE", help="append the lines to FILE instead of stdout")
    watch.add_argument("--quick", action="store_true", help="structure only: skip the CRC and value scan")
    watch.add_argument(
        "--jobs",
        type=_positive_int,
        default=1,
        metavar="N",
        help="read up to N waiting checkpoints at once, in N worker processes (default: 1)",
    )
    watch.add_argument(
        "--keep",
        type=_mib,
        default=WATCH_KEEP_MIB,
        metavar="MIB",
        help="keep up to MIB of each save's weights and moments for the comparison with the next save, so each "
        f"save is read once (default: {WATCH_KEEP_MIB}; 0: read the previous save again instead)",
    )
    return watch


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return value


def _mib(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of MiB (0 or more), got {text!r}")
    return value


_SUBCOMMANDS = {
    "diff": _diff_parser,
    "repair": _repair_parser,
    "drift": _drift_parser,
    "salvage": _salvage_parser,
    "convert": _convert_parser,
    "last-good": _last_good_parser,
    "watch": _watch_parser,
}


def _dispatch(command: str, args: argparse.Namespace) -> int:
    """Route to the module that does the work; only that module's imports are paid for."""
    interactive = command in ("main", "diff", "drift", "watch") and not getattr(args, "report", False)
    if interactive and not _on_a_terminal():
        print(NO_TERMINAL, file=sys.stderr)
        interactive = False
    if interactive:
        module = importlib.import_module("ckinspect.tui.launch")
        return module.run(command, args)
    name = "report" if command == "main" else command.replace("-", "_")
    module = importlib.import_module(f"ckinspect.commands.{name}")
    return module.run(args)


NO_TERMINAL = "ckinspect: not a terminal, so the report is printed instead of the TUI (--report says so)"


def _on_a_terminal() -> bool:
    """The TUI draws on stdout and reads keys from stdin: without both a terminal it would write escape codes
    into a pipe and wait for a key that never comes (`ckinspect x.pth > out.txt`, a CI step)."""
    try:
        return sys.stdin.isatty() and sys.stdout.isatty()
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


# numpy asks the kernel for 2 MB pages (madvise) for each array of 4 MB or more. ckinspect's arrays that big are
# made once and read once (a DCP listing's chunk columns: 18 MB each at 1024 ranks), and where memory is full of page
# cache (a machine that has just read a checkpoint) each 2 MB page is found by compacting memory while the command
# waits: 9.9% of `diff --quick`'s CPU on two 1024-rank saves went to those page faults, 2.9% at 256 ranks (perf,
# bench/README). Unless the user chose otherwise, numpy takes ordinary pages; it reads this when first imported.
NUMPY_PAGES = ("NUMPY_MADVISE_HUGEPAGE", "0")


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault(*NUMPY_PAGES)
    entry = argv is None  # the console script or `python -m ckinspect`: the process ends when this returns
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv and argv[0] in _SUBCOMMANDS else "main"
    global _HELP_ASKED
    _HELP_ASKED = "-h" in argv or "--help" in argv
    parser = build_parser(command)
    args = parser.parse_args(argv[1:] if command != "main" else argv)
    if entry:
        lifetime.ends_with_the_command()  # a command's results are then kept, never freed one by one
    status = _guarded(command, args)
    if entry:
        # The interpreter's last full collection walks every object the process made (a tenth of a small
        # listing's CPU), to free what exit frees anyway. Frozen objects are left to it (and what commands
        # kept to the end is never freed); nothing here relies on a finalizer at exit (every output is
        # written, flushed and closed by now).
        gc.freeze()
    return status


def _guarded(command: str, args: argparse.Namespace) -> int:
    """The command's exit status; what it raises as one line on stderr (a traceback only on request)."""
    try:
        return _dispatch_listed(command, args)
    except CkinspectError as exc:
        print(f"ckinspect: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("ckinspect: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug of ours: one line for the user, the traceback on request
        if _debug():
            raise
        print(
            f"ckinspect: internal error: {type(exc).__name__}: {exc} (set CKINSPECT_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_ERROR


def _dispatch_listed(command: str, args: argparse.Namespace) -> int:
    """The command, with the listings of the URL prefixes it lists its own: the next command lists afresh."""
    from ckinspect.io.folders import Listings

    with Listings().in_use():
        return _dispatch(command, args)


def _debug() -> bool:
    return settings.debug()


if __name__ == "__main__":
    sys.exit(main())
