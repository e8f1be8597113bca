"""ckinspect at frontier scale against what torch (or the framework) does for the same answer.

    python bench/bench_scale.py [--dcp 16,64,256,1024] [--diff 16,64,256,1024] [--last-good] [--zip 10000,40000]
                                [--dcp405 128,512,2048] [--last-good405] [--zero3 128,512] [--zero3-engine 512,1024]
                                [--hf] [--runs 10,40,160]
                                [--torch-ranks-max 512] [--rss-cap 8] [--root DIR] [--keep]

Builds the sparse-file simulations of bench/scale_sims.py (DCP saves as torch's DefaultSavePlanner and
FileSystemWriter write them: dcp_save_direct, proven byte for byte identical to them; huggingface_hub's sharder
with real safetensors headers, torch.save; only tensor data are holes), then times each answer as a fresh
process (what a user's shell pays), side by side in one run:

  dcp N ranks   `ckinspect --report --quick FOLDER`  vs  torch's FileSystemReader(FOLDER).read_metadata()
  dcp405 N      the same on Llama-3.1-405B + AdamW over N ranks (scale_sims.dcp_save_stream: the same bytes as
                torch's planner and writer, its .metadata streamed); torch's read_metadata is not run above
                --torch-ranks-max ranks (at 2048 it needs ~15 GB): its row is then extrapolated by the exponent
                of the two largest measured sizes, and says so
  last-good405  `ckinspect last-good --quick RUN`    vs  read_metadata() of every save in RUN (RUN: the 405B
                2048-rank save, hard-linked, no blocks of its own)
  runs N saves  `ckinspect last-good --quick RUN`    vs  torch.load(mmap=True, weights_only=False) of every file
                of RUN (bench_last_good.make_sparse_run: DeepSpeed ZeRO-1 saves of Llama-3.2-1B, 8 ranks, the
                newest lacking a rank file)
  diff N ranks  `ckinspect diff --quick A B`         vs  read_metadata() of both and their state_dict_metadata
                                                         compared (B: a hard-linked copy of A, another folder)
  last-good     `ckinspect last-good --quick RUN`    vs  read_metadata() of every save in RUN (the run of
                                                         the 256- and 1024-rank saves)
  zip N tensors `ckinspect --report --quick FILE`    vs  torch.load(FILE, mmap=True, weights_only=True)
  hf 405B       `ckinspect --report --quick INDEX`   vs  safetensors' safe_open(shard).keys() for every shard
  zero3 N ranks `ckinspect --report --quick TAG`     vs  torch.load(mmap=True, weights_only=False) of every rank
                                                         file in the DeepSpeed tag folder
  zero3-engine N the same on the tag as DeepSpeed's engine writes it (scale_sims.zero3_engine_save: each
                model-states file also holds the module's 723 empty parameter placeholders, a storage each)

Printed per family and size: CPU seconds (user+sys of the child), peak RSS, bytes read (the child's rchar),
the growth exponent of ckinspect's CPU between consecutive sizes (1.0 = linear), and ours/theirs CPU.
The torch baselines' CPU counts the whole process (the import of torch included), as a user pays it; the
`in-call` column is torch's call alone (the process minus its imports), the figure issue 26's goal quotes.
Sizes are selectable so a quick run fits in minutes; sparse files only (check `df -h` first: a 256-rank
save takes 2.6 GB of real blocks for its zip headers, 1024 ranks ~10 GB; the 405B over 2048 ranks ~30 GB).
`--before DIR` measures another checkout of ckinspect (an older commit) beside this one, each in fresh
processes in turn with the baseline, its rows marked "(before)". A ckinspect child whose resident set passes
--rss-cap GiB (default 8: the machine is shared) is stopped, and its row says at what CPU and memory. Bytes
read are local (no family here is remote): bench_s3_last_good.py counts the S3 requests of last-good on runs of
10-160 saves.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PY = sys.executable
# runs `code` after its imports; prints {cpu, in_call, rss_kb, rchar} as JSON on the last line of stderr
_WRAP = r"""
import json, resource, sys, time
def _io():
    with open("/proc/self/io") as f:
        return dict(line.split(": ") for line in f.read().splitlines())
PREP
t0 = time.process_time()
CALL
t1 = time.process_time()
ru = resource.getrusage(resource.RUSAGE_SELF)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the forking parent (here, one with torch)
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
sys.stderr.write("\n" + json.dumps({"cpu": ru.ru_utime + ru.ru_stime, "in_call": t1 - t0,
                                    "rss_kb": hwm, "rchar": int(_io()["rchar"])}) + "\n")
"""

CKINSPECT = (
    "from ckinspect.cli import main",
    "try:\n    main(['--report', '--quick', sys.argv[1]])\nexcept SystemExit:\n    pass",
)
CKINSPECT_DIFF = (
    "from ckinspect.cli import main",
    "try:\n    main(['diff', '--quick', sys.argv[1], sys.argv[2]])\nexcept SystemExit:\n    pass",
)
CKINSPECT_LAST_GOOD = (
    "from ckinspect.cli import main",
    "try:\n    main(['last-good', '--quick', sys.argv[1]])\nexcept SystemExit:\n    pass",
)
TORCH_DCP_DIFF = ("from torch.distributed.checkpoint import FileSystemReader",
                  "a, b = (FileSystemReader(p).read_metadata() for p in sys.argv[1:3])\n"
                  "same = a.state_dict_metadata == b.state_dict_metadata")  # fmt: skip
TORCH_DCP_RUN = ("import pathlib\nfrom torch.distributed.checkpoint import FileSystemReader",
                 "for save in sorted(pathlib.Path(sys.argv[1]).iterdir()):\n"
                 "    FileSystemReader(str(save)).read_metadata()")  # fmt: skip
TORCH_DCP = ("from torch.distributed.checkpoint import FileSystemReader",
             "FileSystemReader(sys.argv[1]).read_metadata()")  # fmt: skip
TORCH_ZIP = ("import torch", "torch.load(sys.argv[1], mmap=True, weights_only=True)")
TORCH_RUN = ("import pathlib, torch",
             "for part in sorted(pathlib.Path(sys.argv[1]).rglob('*.pt')):\n"
             "    torch.load(part, mmap=True, weights_only=False)")  # fmt: skip
TORCH_ZERO3 = ("import pathlib, torch",
               "for part in sorted(pathlib.Path(sys.argv[1]).glob('*.pt')):\n"
               "    torch.load(part, mmap=True, weights_only=False)")  # fmt: skip
HF_KEYS = ("import json, pathlib\nfrom safetensors import safe_open",
           "idx = pathlib.Path(sys.argv[1])\n"
           "for shard in sorted(set(json.loads(idx.read_text())['weight_map'].values())):\n"
           "    with safe_open(idx.parent / shard, 'np') as f:\n        list(f.keys())")  # fmt: skip


def measure(kind: tuple[str, str], target: Path | tuple[Path, ...], tree: Path = REPO,
            rss_cap_kb: int | None = None) -> dict[str, float]:  # fmt: skip
    """One fresh process running `kind` on `target`; `tree`: the ckinspect checkout it imports. A child whose
    resident set passes `rss_cap_kb` is killed: then {cpu, rss_kb (the largest seen), rchar, capped: True}."""
    code = _WRAP.replace("PREP", kind[0]).replace("CALL", kind[1])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode cached, as installed
    env["PYTHONPATH"] = str(tree)
    targets = [str(t) for t in (target if isinstance(target, tuple) else (target,))]
    # cwd: `python -c` puts the working folder first on sys.path, which would shadow `tree`
    with tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([PY, "-c", code, *targets], stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=tree)
        peak = rchar = 0
        capped = False
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)  # (not Popen.poll: it would reap the rusage)
            if pid:
                break
            try:
                with open(f"/proc/{child.pid}/status") as f:
                    rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
                with open(f"/proc/{child.pid}/io") as f:
                    rchar = int(next(line for line in f if line.startswith("rchar:")).split()[1])
            except (OSError, StopIteration):
                rss = 0
            peak = max(peak, rss)
            if rss_cap_kb and rss > rss_cap_kb:
                capped = True
                child.kill()
                _, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.2)
        child.returncode = os.waitstatus_to_exitcode(status)
        if capped:
            return {"cpu": usage.ru_utime + usage.ru_stime, "in_call": math.nan, "rss_kb": peak, "rchar": rchar,
                    "capped": True}  # fmt: skip
        err.seek(0)
        stderr = err.read()
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    try:
        return json.loads(last)
    except json.JSONDecodeError:
        raise SystemExit(f"{kind[1][:40]} on {target} failed:\n{stderr[-2000:]}") from None


def _mib(kb: float) -> str:
    return f"{kb / 1024:,.0f} MiB"


def row(family: str, size: str, ours: dict, theirs: dict, exponent: float | None) -> str:
    ratio = ours["cpu"] / theirs["cpu"] if theirs["cpu"] else math.nan
    in_call = ours["cpu"] / theirs["in_call"] if theirs["in_call"] else math.nan
    growth = f"{exponent:.2f}" if exponent is not None else "-"
    cpu = f"{ours['cpu']:.2f}"
    if ours.get("capped"):  # stopped at the memory cap: what it had cost by then, no ratio
        cpu, growth, ratio, in_call = f"stopped at the cap after {ours['cpu']:.2f}", "-", math.nan, math.nan
    mark = "~" if theirs.get("extrapolated") else ""
    call = f"{mark}{theirs['in_call']:.2f} in call" + (f", extrapolated by exponent {theirs['extrapolated']:.2f}"
                                                       if mark else "")  # fmt: skip
    share = "-" if math.isnan(ratio) else f"{mark}{ratio:.2f}x ({mark}{in_call:.2f}x of the call)"
    return (f"| {family} | {size} | {cpu} | {_mib(ours['rss_kb'])} | {ours['rchar'] / 1e6:,.1f} MB | "
            f"{mark}{theirs['cpu']:.2f} ({call}) | {mark}{_mib(theirs['rss_kb'])} | "
            f"{mark}{theirs['rchar'] / 1e6:,.1f} MB | {growth} | {share} |")  # fmt: skip


def extrapolated(measured: list[tuple[int, dict]], size: int) -> dict:
    """torch's figures at `size` from the two largest measured sizes, each by its own growth exponent (the call's
    CPU; the process's is that plus its imports as measured): an estimate, marked as one in the row."""
    (s0, a), (s1, b) = measured[-2], measured[-1]
    out: dict = {}
    for key in ("in_call", "rss_kb", "rchar"):
        e = math.log(b[key] / a[key]) / math.log(s1 / s0)
        out[key] = b[key] * (size / s1) ** e
    out["cpu"] = out["in_call"] + b["cpu"] - b["in_call"]  # the call grown, the imports as measured
    out["extrapolated"] = math.log(b["in_call"] / a["in_call"]) / math.log(s1 / s0)
    return out


HEADER = ("| family | size | ckinspect CPU s | peak RSS | bytes read | theirs CPU s | their peak RSS | their bytes "
          "read | growth exp. | ours / theirs CPU |\n|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip


RSS_CAP_KB: int | None = None  # --rss-cap
BEFORE: Path | None = None  # --before: another checkout of ckinspect, measured beside this one


def family(name: str, sizes: list[int], build, baseline: tuple[str, str], unit: str,
           ours_kind: tuple[str, str] = CKINSPECT, theirs_max: int | None = None, label=None) -> list[str]:  # fmt: skip
    """One row per size, ckinspect and its baseline side by side; sizes above `theirs_max` get the baseline's
    figures extrapolated from the two largest measured (marked `~`). `label(size)`: the size column."""
    from bench import scale_sims  # noqa: F401 - imported here so --help needs no torch

    lines, prev = [], None
    measured: list[tuple[int, dict]] = []
    for size in sizes:
        target = build(size)
        if BEFORE is not None:  # the other checkout first, then this one and the baseline: fresh processes in turn
            before = measure(ours_kind, target, BEFORE, rss_cap_kb=RSS_CAP_KB)
            lines.append(row(f"{name} (before)", label(size) if label else f"{size:,} {unit}", before,
                             measure(baseline, target), None))  # fmt: skip
            print(lines[-1], flush=True)
        ours = measure(ours_kind, target, rss_cap_kb=RSS_CAP_KB)
        if theirs_max is not None and size > theirs_max and len(measured) >= 2:
            theirs = extrapolated(measured, size)
        else:
            theirs = measure(baseline, target)
            measured.append((size, theirs))
        exponent = None
        if prev and not ours.get("capped"):
            exponent = math.log(ours["cpu"] / prev[1]) / math.log(size / prev[0])
        prev = None if ours.get("capped") else (size, ours["cpu"])
        lines.append(row(name, label(size) if label else f"{size:,} {unit}", ours, theirs, exponent))
        print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dcp", default="16,64", help="ranks of the 70B + AdamW DCP saves (comma-separated)")
    parser.add_argument("--diff", default="", help="ranks of the DCP saves to diff --quick (comma-separated)")
    parser.add_argument("--last-good", action="store_true", help="also last-good --quick on the run of DCP saves")
    parser.add_argument("--zip", default="10000,40000", help="tensors in the torch.save zips")
    parser.add_argument("--zero3", default="", help="ranks of the DeepSpeed ZeRO-3 70B saves (comma-separated)")
    parser.add_argument("--zero3-engine", default="", help="ranks of the ZeRO-3 saves as DeepSpeed writes them")
    parser.add_argument("--hf", action="store_true", help="also the 405B HF folders of 43 and 191 safetensors shards")
    parser.add_argument("--dcp405", default="", help="ranks of the 405B + AdamW DCP saves (comma-separated)")
    parser.add_argument("--last-good405", action="store_true", help="last-good --quick on a run of the 2048-rank 405B")
    parser.add_argument("--runs", default="", help="saves in the runs of 1B ZeRO-1 saves for last-good (e.g. 10,40)")
    parser.add_argument("--torch-ranks-max", type=int, default=512, help="dcp405: run torch's reader up to this")
    parser.add_argument("--before", type=Path, default=None,
                        help="another ckinspect checkout (an older commit, its C built): each size's row is "
                             "preceded by one of it, measured in turn with the same baseline")  # fmt: skip
    parser.add_argument("--rss-cap", type=float, default=8.0, help="GiB: a ckinspect child above it is stopped")
    parser.add_argument("--root", type=Path, default=None, help="where the simulations go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the simulations (re-used by the next run)")
    args = parser.parse_args()
    from bench import scale_sims

    global RSS_CAP_KB, BEFORE
    RSS_CAP_KB = int(args.rss_cap * 2**20) if args.rss_cap else None
    BEFORE = args.before
    root = args.root or Path(tempfile.mkdtemp(prefix="bench_scale-", dir="/work" if Path("/work").is_dir() else None))
    root.mkdir(parents=True, exist_ok=True)

    def dcp(ranks: int) -> Path:
        folder = root / f"dcp{ranks}"
        if not (folder / ".metadata").exists():
            print(f"building the {ranks}-rank save: {scale_sims.dcp_save_direct(folder, ranks)}", flush=True)
        return folder

    def dcp_pair(ranks: int) -> tuple[Path, Path]:
        """The save and a copy of it in another folder: hard links (no blocks), so the pair costs nothing."""
        folder, copy = dcp(ranks).resolve(), root / f"dcp{ranks}-copy"
        if not (copy / ".metadata").exists():
            copy.mkdir(exist_ok=True)
            for part in folder.iterdir():
                if not (copy / part.name).exists():
                    os.link(part, copy / part.name)
        return folder, copy

    def zero3(ranks: int) -> Path:
        folder = root / f"zero3-{ranks}"
        if not (folder / "latest").exists():
            print(f"building the {ranks}-rank ZeRO-3 save: {scale_sims.zero3_save(folder, ranks)}", flush=True)
        return folder / "global_step1000"

    def zero3_engine(ranks: int) -> Path:
        folder = root / f"engine-{ranks}"
        if not (folder / "latest").exists():
            print(f"building the {ranks}-rank engine ZeRO-3 save: {scale_sims.zero3_engine_save(folder, ranks)}",
                  flush=True)  # fmt: skip
        return folder / "global_step1000"

    def run(_size: int) -> Path:
        return root / "run"

    def zip_(tensors: int) -> Path:
        path = root / f"zip{tensors}.pt"
        if not path.exists():
            scale_sims.torch_zip(path, tensors)
        return path

    hf_shards = {43: "20GB", 191: "5GB"}  # what huggingface_hub's sharder makes of the 405B at each max size

    def hf(shards: int) -> Path:
        folder = root / ("hf405b" if shards == 191 else f"hf405b-{shards}")
        if not (folder / "model.safetensors.index.json").exists():
            built = scale_sims.hf_sharded(folder, max_shard_size=hf_shards[shards])
            assert built["files"] == shards, built
            print(f"building the 405B folder: {built}", flush=True)
        return folder / "model.safetensors.index.json"

    def dcp405(ranks: int) -> Path:
        folder = root / f"dcp405-{ranks}"
        if not (folder / ".metadata").exists():
            print(f"building the 405B {ranks}-rank save: {scale_sims.dcp_save_stream(folder, ranks)}", flush=True)
        return folder

    def run405(_size: int) -> Path:
        """A run of one save: the 2048-rank 405B, hard-linked (no blocks of its own)."""
        save, run = dcp405(2048), root / "run405"
        (run / "step-1000").mkdir(parents=True, exist_ok=True)
        for part in save.iterdir():
            if not (run / "step-1000" / part.name).exists():
                os.link(part, run / "step-1000" / part.name)
        return run

    def runs(saves: int) -> Path:
        folder = root / f"runs1b-{saves}"
        if not (folder / "run").exists():
            sys.path.insert(0, str(REPO / "bench"))  # bench_last_good imports scale_sims as a top-level module
            from bench_last_good import make_sparse_run

            make_sparse_run(folder, saves, 8)
        return folder / "run"

    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}\n\n{HEADER}", flush=True)
    try:
        if args.dcp:
            family("dcp 70B+AdamW", [int(s) for s in args.dcp.split(",")], dcp, TORCH_DCP, "ranks")
        if args.diff:
            family("diff --quick dcp", [int(s) for s in args.diff.split(",")], dcp_pair, TORCH_DCP_DIFF, "ranks",
                   CKINSPECT_DIFF)  # fmt: skip
        if args.last_good:
            family("last-good dcp run", [2], run, TORCH_DCP_RUN, "saves", CKINSPECT_LAST_GOOD)
        if args.zip:
            family("torch zip", [int(s) for s in args.zip.split(",")], zip_, TORCH_ZIP, "tensors")
        if args.zero3:
            family("zero3 70B+AdamW", [int(s) for s in args.zero3.split(",")], zero3, TORCH_ZERO3, "ranks")
        if args.zero3_engine:
            family("zero3 engine 70B+AdamW", [int(s) for s in args.zero3_engine.split(",")], zero3_engine, TORCH_ZERO3,
                   "ranks")  # fmt: skip
        if args.hf:
            family("hf 405B bf16", [43, 191], hf, HF_KEYS, "shards")
        if args.dcp405:
            family("dcp 405B+AdamW", [int(s) for s in args.dcp405.split(",")], dcp405, TORCH_DCP, "ranks",
                   theirs_max=args.torch_ranks_max)  # fmt: skip
        if args.last_good405:
            family("last-good dcp 405B run", [1], run405, TORCH_DCP_RUN, "save", CKINSPECT_LAST_GOOD,
                   label=lambda _n: "1 save (2,048 ranks)")  # fmt: skip
        if args.runs:
            family("last-good 1B ZeRO-1 run", [int(s) for s in args.runs.split(",")], runs, TORCH_RUN, "saves",
                   CKINSPECT_LAST_GOOD)  # fmt: skip
    finally:
        if not args.keep and args.root is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
