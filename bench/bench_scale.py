"""ckinspect at frontier scale against what torch (or the framework) does for the same answer.

    python bench/bench_scale.py [--dcp 16,64,256,1024] [--diff 16,64,256,1024] [--last-good] [--zip 10000,40000]
                                [--dcp405 128,512,2048] [--last-good405] [--zero3 128,512] [--zero3-engine 512,1024]
                                [--hf] [--runs 10,40,160] [--remote] [--s3-runs 10,40,160]
                                [--torch-ranks-max 512] [--rss-cap 8] [--torch-rss-cap 16] [--mem-floor 1]
                                [--root DIR] [--reuse DIR] [--keep]
    python bench/bench_scale.py --dcp 256,1024 [--diff 256,1024] [--zero3 512,1024] --old-root OLD [--rounds 5]
                                --reuse DIR
                                (this tree against another checkout OLD and torch, interleaved: did a change cost?)

Builds the sparse-file simulations of bench/scale_sims.py (DCP saves as torch's DefaultSavePlanner and
FileSystemWriter write them: dcp_save_direct, proven byte for byte identical to them; huggingface_hub's sharder
with real safetensors headers, torch.save; only tensor data are holes), then times each answer as a fresh
process (what a user's shell pays), side by side in one run:

  dcp N ranks   `ckinspect --report --quick FOLDER`  vs  torch's FileSystemReader(FOLDER).read_metadata()
  dcp405 N      the same on Llama-3.1-405B + AdamW over N ranks (scale_sims.dcp_save_stream: the same bytes as
                torch's planner and writer, its .metadata streamed); torch's read_metadata is not run above
                --torch-ranks-max ranks (at 2048 it needs ~11-15 GB): its row is then extrapolated by the exponent
                of the two largest measured sizes, and says so
  last-good405  `ckinspect last-good --quick RUN`    vs  read_metadata() of every save in RUN (RUN: the 405B
                2048-rank save, hard-linked, no blocks of its own)
  runs N saves  four rows a size, on a run of N DeepSpeed ZeRO-1 saves of Llama-3.2-1B over 8 ranks whose newest
                lacks a rank file (bench_last_good.make_sparse_run; the answer is the save before it):
                `last-good --quick RUN` and `... --format json`  vs  torch.load(mmap=True, weights_only=False) of
                every file of RUN; `last-good RUN` (the default: the answer's values are read, 16.1 GiB) and
                `... --format json`  vs  torch.load(mmap=True) + torch.isfinite over every tensor of the answer
  diff N ranks  `ckinspect diff --quick A B`         vs  read_metadata() of both and their state_dict_metadata
                                                         compared (B: a hard-linked copy of A, another folder)
  last-good     `ckinspect last-good --quick RUN`    vs  read_metadata() of every save in RUN (the run of
                                                         the 256- and 1024-rank saves, linked as step-256/-1024)
  zip N tensors `ckinspect --report --quick FILE`    vs  torch.load(FILE, mmap=True, weights_only=True)
                (scale_sims.torch_zip, written by a child process; 10k to 640k tensors)
  hf 405B       `ckinspect --report --quick INDEX`   vs  safetensors' safe_open(shard).keys() for every shard
  zero3 N ranks `ckinspect --report --quick TAG`     vs  torch.load(mmap=True, weights_only=False) of every rank
                                                         file in the DeepSpeed tag folder
  zero3-engine N the same on the tag as DeepSpeed's engine writes it (scale_sims.zero3_engine_save: each
                model-states file also holds the module's 723 empty parameter placeholders, a storage each)

Printed per family and size: CPU seconds (user+sys of the child and of the workers it waited for), peak RSS (its
largest process), bytes read (the child's rchar), the growth exponent of ckinspect's CPU between consecutive sizes
(1.0 = linear), and ours/theirs CPU. Each answer is checked (last-good must name the save before the newest; the
torch check of its values must find every tensor finite). The torch baselines' CPU counts the whole process (the
import of torch included), as a user pays it; the `in-call` column is torch's call alone (the process minus its
imports), the figure issue 26's goal quotes. A baseline measured once is reused for the next row of the same
target (the runs family's rows share theirs). Sizes are selectable so a quick run fits in minutes; sparse files
only (check `df -h` first: a 256-rank save takes 2.6 GB of real blocks for its zip headers, 1024 ranks ~10 GB; the
405B over 2048 ranks ~30 GB; a 1B save 0.8 MB).

Memory: a ckinspect child whose resident set passes --rss-cap GiB (default 8), a baseline's past --torch-rss-cap
(default 16), and any child while the machine's available memory is under --mem-floor GiB (default 1; the machine
is shared), is stopped with its process group; its row says what it had cost by then, and a stopped baseline
bounds the ratio (its CPU was at least that). `--torch-ranks-max 2048 --dcp405 ...,2048` runs torch's reader on the
2048-rank 405B save under that cap instead of extrapolating it.

--remote: the selected families are served by URL instead (bench/scale_remote.py: the tests' HTTP range server over
the local sparse files, with index pages) and each row counts the requests (by kind) and body bytes the answer
cost, against what torch or the framework fetches for the same answer: for DCP, torch's own
FsspecReader(URL).read_metadata() over the same URL (measured); for a zip, one GET of the file then torch.load
(measured); for the HF, ZeRO-3 and 1B runs (files of TB apparent), downloading the files the answer needs whole,
one GET each (computed from their sizes, marked so). --s3-runs N,...: last-good (plain, --format json, --quick) on
bench_last_good.make_run's tiny DeepSpeed runs of N saves uploaded to moto's S3, against DeepSpeed's resume as a
user runs it over S3 (s3fs: `latest`, the newest save's files, then the answer's, each downloaded and torch.load'ed).

--reuse DIR: simulations found in DIR (another run's --root) are used read-only: nothing is built, linked or
written there; what is missing is built in --root.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
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
ru, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the forking parent (here, one with torch)
with open("/proc/self/status") as f:
    hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
sys.stdout.flush()
sys.stderr.write("\n" + json.dumps({"cpu": ru.ru_utime + ru.ru_stime + kids.ru_utime + kids.ru_stime,
                                    "in_call": t1 - t0, "rss_kb": max(hwm, kids.ru_maxrss),
                                    "rchar": int(_io()["rchar"])}) + "\n")
"""


def _main(argv: str) -> tuple[str, str]:
    return "from ckinspect.cli import main", f"try:\n    main([{argv}, *sys.argv[1:]])\nexcept SystemExit:\n    pass"


CKINSPECT = _main("'--report', '--quick'")
CKINSPECT_DIFF = _main("'diff', '--quick'")
CKINSPECT_LAST_GOOD = _main("'last-good', '--quick'")
CKINSPECT_LAST_GOOD_JSON = _main("'last-good', '--quick', '--format', 'json'")
CKINSPECT_LAST_GOOD_VALUES = _main("'last-good'")
CKINSPECT_LAST_GOOD_VALUES_JSON = _main("'last-good', '--format', 'json'")
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

# remote: what torch or the framework fetches for the same answer over the same URL
_FSSPEC_READER = "from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader"
TORCH_DCP_URL = (_FSSPEC_READER, "FsspecReader(sys.argv[1]).read_metadata()")
TORCH_DCP_DIFF_URL = (_FSSPEC_READER,
                      "a, b = (FsspecReader(u).read_metadata() for u in sys.argv[1:3])\n"
                      "same = a.state_dict_metadata == b.state_dict_metadata")  # fmt: skip
TORCH_DCP_RUN_URL = ("import fsspec\n" + _FSSPEC_READER,
                     "fs, top = fsspec.core.url_to_fs(sys.argv[1])\n"
                     "for save in sorted(fs.ls(top, detail=False)):\n"
                     "    url = save if '://' in save else fs.unstrip_protocol(save)\n"
                     "    FsspecReader(url).read_metadata()")  # fmt: skip
DOWNLOAD_TORCH_LOAD = ("import os, shutil, tempfile, urllib.request, torch",
                       "with tempfile.TemporaryDirectory(dir=sys.argv[2]) as d:\n"
                       "    local = os.path.join(d, 'download.pt')\n"
                       "    with urllib.request.urlopen(sys.argv[1]) as r, open(local, 'wb') as f:\n"
                       "        shutil.copyfileobj(r, f, 8 << 20)\n"
                       "    torch.load(local, mmap=True, weights_only=True)")  # fmt: skip
S3_RESUME = ("import os, tempfile, fsspec, torch",
             "fs, top = fsspec.core.url_to_fs(sys.argv[1])\n"
             "with tempfile.TemporaryDirectory(dir=sys.argv[2]) as d:\n"
             "    for name in sys.argv[3:]:\n"
             "        local = os.path.join(d, name.replace('/', '_'))\n"
             "        fs.get(top.rstrip('/') + '/' + name, local)\n"
             "        if local.endswith('.pt'):\n"
             "            torch.load(local, weights_only=False)")  # fmt: skip


def _torch_check_save() -> tuple[str, str]:
    """bench_last_good's torch.load(mmap) + isfinite over a save's files (prints how many tensors are not finite)."""
    sys.path.insert(0, str(REPO / "bench"))
    from bench_last_good import TORCH_CHECK_SAVE

    return "import torch", f"exec({TORCH_CHECK_SAVE!r})"


GIB_KB = 2**20


def _mem_available_kb() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))


@dataclass
class Limits:
    """When a measured child is stopped: its resident set past `rss_kb`, or the machine's available memory under
    `floor_kb` (other sessions share it)."""

    rss_kb: int | None
    floor_kb: int = GIB_KB

    def reason(self, rss: int) -> str | None:
        if self.rss_kb and rss > self.rss_kb:
            return f"stopped at the {self.rss_kb / GIB_KB:.3g} GiB cap"
        if _mem_available_kb() < self.floor_kb:
            return f"stopped: the machine had under {self.floor_kb / GIB_KB:.3g} GiB available"
        return None


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (fields 3...: state, ppid, pgrp, session, ...)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _rchar(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/io") as f:
            return int(next(line for line in f if line.startswith("rchar:")).split()[1])
    except (OSError, StopIteration):
        return 0


class Tree:
    """The processes of one measured child's session: the child, and the workers it starts (ckinspect's scan pool:
    forkserver workers, which the child itself never reaps). Their resident sets are summed at each sample, their
    reads (rchar) kept as last seen; this process is a child subreaper (`subreaper()`), so the orphans come here
    and are reaped, and RUSAGE_CHILDREN then holds the CPU of every one of them."""

    PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024

    def __init__(self, sid: int) -> None:
        self.sid = sid
        self.rchar: dict[int, int] = {}

    def pids(self) -> list[int]:
        out = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                fields = _stat(int(entry))
                if fields and int(fields[3]) == self.sid and fields[0] != "Z":
                    out.append(int(entry))
        return out

    def sample(self) -> int:
        """The summed resident set (KiB) of the session's processes now; their reads noted."""
        total = 0
        for pid in self.pids():
            fields = _stat(pid)
            total += int(fields[21]) * self.PAGE_KB if fields else 0
            self.rchar[pid] = _rchar(pid) or self.rchar.get(pid, 0)
        return total

    def reap(self, timeout: float = 300) -> None:
        """Wait until every process of the session has ended, reaping the orphans handed to this process."""
        deadline = time.monotonic() + timeout
        while self.pids():
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.sid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
            time.sleep(0.05)
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass


def subreaper() -> None:
    """Make this process the reaper of its descendants' orphans (Linux's PR_SET_CHILD_SUBREAPER), so that the CPU of
    ckinspect's scan workers is counted (they outlive the measured child, under its forkserver)."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed: the workers' CPU could not be counted")


def _cpu(usage) -> float:
    return usage.ru_utime + usage.ru_stime


def measure(kind: tuple[str, str], target: str | Path | tuple, tree: Path = REPO, limits: Limits | None = None,
            env: dict[str, str] | None = None) -> dict:  # fmt: skip
    """One fresh process running `kind` on `target` (paths or URLs); `tree`: the ckinspect checkout it imports;
    `env`: added to its environment. Returns {cpu (its whole process tree's), in_call, rss_kb (the larger of its
    VmHWM and the tree's sampled sum), rchar (its own, plus its workers' as last seen), out (its stdout)}; a child
    that `limits` stop is killed with its session: then {cpu, rss_kb (the largest seen), rchar, stopped: why}."""
    code = _WRAP.replace("PREP", kind[0]).replace("CALL", kind[1])
    child_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # bytecode cached, as installed
    child_env |= env or {}
    child_env["PYTHONPATH"] = str(tree)
    targets = [str(t) for t in (target if isinstance(target, tuple) else (target,))]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # cwd: `python -c` puts the working folder first on sys.path, which would shadow `tree`
    with tempfile.TemporaryFile("w+") as err, tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen([PY, "-c", code, *targets], stdout=out, stderr=err, env=child_env, cwd=tree,
                                 start_new_session=True)  # fmt: skip
        procs, peak, stopped = Tree(child.pid), 0, None
        while not stopped:
            pid, status, _usage = os.wait4(child.pid, os.WNOHANG)  # (not Popen.poll: it would reap the rusage)
            if pid:
                break
            peak = max(peak, procs.sample())
            stopped = limits.reason(peak) if limits else None
            if stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)  # its workers too
                _, status, _usage = os.wait4(child.pid, 0)
            else:
                time.sleep(0.1)
        child.returncode = os.waitstatus_to_exitcode(status)
        procs.reap()
        cpu = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - _cpu(before)
        workers_rchar = sum(n for pid, n in procs.rchar.items() if pid != child.pid)
        if stopped:
            return {"cpu": cpu, "in_call": math.nan, "rss_kb": peak, "rchar": sum(procs.rchar.values()),
                    "stopped": stopped}  # fmt: skip
        err.seek(0)
        stderr = err.read()
        out.seek(0)
        stdout = out.read()
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    try:
        figures = json.loads(last)
    except json.JSONDecodeError:
        raise SystemExit(f"{kind[1][:40]} on {target} failed:\n{stderr[-2000:]}") from None
    return figures | {"cpu": cpu, "rss_kb": max(figures["rss_kb"], peak), "rchar": figures["rchar"] + workers_rchar,
                      "out": stdout}  # fmt: skip


def _mib(kb: float) -> str:
    return f"{kb / 1024:,.0f} MiB"


def _ratio(ours: dict, theirs: dict, mark: str) -> str:
    """ours/theirs CPU, of the process and of torch's call; a bound when theirs was stopped (its CPU was at least
    that); nothing when ours was."""
    if ours.get("stopped") or not theirs["cpu"]:
        return "-"
    if theirs.get("stopped"):
        return f"≤{ours['cpu'] / theirs['cpu']:.2f}x (theirs stopped)"
    return f"{mark}{ours['cpu'] / theirs['cpu']:.2f}x ({mark}{ours['cpu'] / theirs['in_call']:.2f}x of the call)"


def _spread(figures: dict) -> str:
    """A median's range over rounds, where there were several."""
    return f" [{figures['range'][0]:.2f}-{figures['range'][1]:.2f}]" if "range" in figures else ""


def row(family: str, size: str, ours: dict, theirs: dict, exponent: float | None) -> str:
    growth = f"{exponent:.2f}" if exponent is not None else "-"
    cpu = f"{ours['cpu']:.2f}{_spread(ours)}"
    if ours.get("stopped"):  # what it had cost by then
        cpu = f"{ours['stopped']} after {ours['cpu']:.2f}"
    mark = "~" if theirs.get("extrapolated") else ""
    if theirs.get("stopped"):
        their_cpu = f"{theirs['stopped']} after {theirs['cpu']:.2f}"
    else:
        call = f"{mark}{theirs['in_call']:.2f} in call" + (
            f", extrapolated by exponent {theirs['extrapolated']:.2f}" if mark else "")  # fmt: skip
        their_cpu = f"{mark}{theirs['cpu']:.2f}{_spread(theirs)} ({call})"
    return (f"| {family} | {size} | {cpu} | {_mib(ours['rss_kb'])} | {ours['rchar'] / 1e6:,.1f} MB | "
            f"{their_cpu} | {mark}{_mib(theirs['rss_kb'])} | {mark}{theirs['rchar'] / 1e6:,.1f} MB | {growth} | "
            f"{_ratio(ours, theirs, mark)} |")  # fmt: skip


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
REMOTE_HEADER = ("| family | size | served by | ckinspect requests | bytes sent | CPU s | peak RSS | theirs | "
                 "their requests | their bytes sent | their CPU s | requests growth exp. | ours / theirs requests | "
                 "ours / theirs bytes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip

OURS_LIMITS = Limits(8 * GIB_KB)  # --rss-cap, --mem-floor
THEIRS_LIMITS = Limits(16 * GIB_KB)  # --torch-rss-cap, --mem-floor
_BASELINES: dict[tuple, dict] = {}  # a baseline measured once per (kind, target, round), reused by the next rows
ROUNDS = 1  # --rounds


def _growth(prev: tuple[int, float] | None, size: int, value: float) -> float | None:
    if not prev or not prev[1] or not value:
        return None
    return math.log(value / prev[1]) / math.log(size / prev[0])


@dataclass
class Family:
    """One row per size: ckinspect (`ours`) and the baseline (`theirs`) side by side, --rounds rounds of each
    interleaved (medians, CPU's range in brackets). `theirs_target(target)`: what the baseline is run on (default
    the same); `check(target, out)` and `theirs_check`: raise when ours' (theirs') answer is wrong; sizes above
    `theirs_max` get the baseline extrapolated from the two largest measured (marked `~`); `label(size)`: the size
    column."""

    name: str
    sizes: list[int]
    build: Callable
    theirs: tuple[str, str]
    unit: str
    ours: tuple[str, str] = CKINSPECT
    theirs_max: int | None = None
    label: Callable | None = None
    theirs_target: Callable | None = None
    check: Callable | None = None
    theirs_check: Callable | None = None
    measured: list[tuple[int, dict]] = field(default_factory=list)

    def size_label(self, size: int) -> str:
        return self.label(size) if self.label else f"{size:,} {self.unit}"

    def theirs_round(self, target, index: int) -> dict:
        """The baseline's `index`th round on `target`, measured once and shared by the rows that need it."""
        key = (self.theirs, target, index)
        if key not in _BASELINES:
            figures = measure(self.theirs, target, limits=THEIRS_LIMITS)
            if self.theirs_check and not figures.get("stopped"):
                self.theirs_check(target, figures["out"])
            _BASELINES[key] = figures
        return _BASELINES[key]

    def ours_round(self, target) -> dict:
        figures = measure(self.ours, target, limits=OURS_LIMITS)
        if self.check and not figures.get("stopped"):
            self.check(target, figures["out"])
        return figures

    def sides(self, size: int, target) -> tuple[dict, dict]:
        """Ours and theirs, --rounds interleaved rounds of each (medians); theirs extrapolated above theirs_max."""
        their_target = self.theirs_target(target) if self.theirs_target else target
        extrapolate = self.theirs_max is not None and size > self.theirs_max and len(self.measured) >= 2
        ours_runs: list[dict] = []
        theirs_runs: list[dict] = []
        for index in range(ROUNDS):
            if not any(r.get("stopped") for r in ours_runs):
                ours_runs.append(self.ours_round(target))
            if not extrapolate and not any(r.get("stopped") for r in theirs_runs):
                theirs_runs.append(self.theirs_round(their_target, index))
        theirs = extrapolated(self.measured, size) if extrapolate else medians(theirs_runs)
        if not extrapolate and not theirs.get("stopped"):
            self.measured.append((size, theirs))
        return medians(ours_runs), theirs

    def run(self) -> list[str]:
        lines, prev = [], None
        for size in self.sizes:
            ours, theirs = self.sides(size, self.build(size))
            exponent = None if ours.get("stopped") else _growth(prev, size, ours["cpu"])
            prev = None if ours.get("stopped") else (size, ours["cpu"])
            lines.append(row(self.name, self.size_label(size), ours, theirs, exponent))
            print(lines[-1], flush=True)
        return lines


def medians(runs: list[dict]) -> dict:
    """The median of each figure over rounds, and the range of the CPU; a stopped round stands for them all."""
    stopped = [r for r in runs if r.get("stopped")]
    if stopped or len(runs) == 1:
        return (stopped or runs)[0]
    out = {key: statistics.median(r[key] for r in runs) for key in ("cpu", "in_call", "rss_kb", "rchar")}
    return out | {"out": runs[0]["out"], "range": (min(r["cpu"] for r in runs), max(r["cpu"] for r in runs))}


def _requests(counts: dict) -> str:
    kinds = ", ".join(f"{n:,} {kind}" for kind, n in sorted(counts.get("kinds", {}).items()))
    return f"{counts['requests']:,} ({kinds})" if kinds else f"{counts['requests']:,}"


def remote_row(family: str, size: str, served: str, ours: dict, theirs_label: str, theirs: dict,
               exponent: float | None) -> str:  # fmt: skip
    cpu = f"{ours['cpu']:.2f}" if not ours.get("stopped") else f"{ours['stopped']} after {ours['cpu']:.2f}"
    their_cpu = "-" if theirs.get("computed") else f"{theirs['cpu']:.2f}"
    if theirs.get("stopped"):
        their_cpu = f"{theirs['stopped']} after {theirs['cpu']:.2f}"
        theirs_label += " (stopped: at least these)"
    computed = " (computed)" if theirs.get("computed") else ""
    req = ours["requests"] / theirs["requests"] if theirs["requests"] else math.nan
    sent = ours["bytes_sent"] / theirs["bytes_sent"] if theirs["bytes_sent"] else math.nan
    growth = f"{exponent:.2f}" if exponent is not None else "-"
    return (f"| {family} | {size} | {served} | {_requests(ours)} | {ours['bytes_sent']:,} | {cpu} | "
            f"{_mib(ours['rss_kb'])} | {theirs_label} | {_requests(theirs)}{computed} | {theirs['bytes_sent']:,}"
            f"{computed} | {their_cpu} | {growth} | {req:.3g}x | {sent:.3g}x |")  # fmt: skip


@dataclass
class RemoteFamily:
    """One row per size over a URL: ckinspect (`ours`, on the URL of the built target) and `theirs(target, url)`
    -> (label, figures): a measured process (`served.measured(kind, args)`) or a computed download."""

    name: str
    sizes: list[int]
    build: Callable
    ours: tuple[str, str]
    theirs: Callable
    unit: str
    served: object = None
    label: Callable | None = None
    check: Callable | None = None

    def run(self) -> list[str]:
        lines, prev = [], None
        served = self.served
        for size in self.sizes:
            target = self.build(size)
            url = tuple(served.url(t) for t in target) if isinstance(target, tuple) else served.url(target)
            ours = served_measure(served, self.ours, url, OURS_LIMITS)
            if self.check and not ours.get("stopped"):
                self.check(target, ours["out"])
            their_label, theirs = self.theirs(target, url)
            exponent = None if ours.get("stopped") else _growth(prev, size, ours["requests"])
            prev = None if ours.get("stopped") else (size, ours["requests"])
            size_label = self.label(size) if self.label else f"{size:,} {self.unit}"
            lines.append(remote_row(self.name, size_label, served.label, ours, their_label, theirs, exponent))
            print(lines[-1], flush=True)
        return lines


def served_measure(served, kind: tuple[str, str], url, limits: Limits) -> dict:
    """measure() over a URL, with the server's counts of what that one process asked."""
    served.reset()
    figures = measure(kind, url, limits=limits, env=served.env())
    time.sleep(0.2)  # the server's threads finish counting the last response
    return figures | served.counts()


def _step_of(tag: Path) -> int:
    return int("".join(c for c in tag.name if c.isdigit()) or -1)


def answer_of(run: Path) -> Path:
    """The save last-good must name in a bench run: the newest lacks a rank file, so the one before it."""
    return sorted((p for p in run.iterdir() if p.is_dir()), key=_step_of)[-2]


def check_answer(expected: Callable[[Path], str]) -> Callable[[Path, str], None]:
    """A check of last-good's stdout (the path, or the JSON's run.last_good) against `expected(target)`."""

    def check(target: Path, out: str) -> None:
        text = out.strip()
        said = json.loads(text)["run"]["last_good"] if text.startswith("{") else text
        if not str(said).rstrip("/").endswith(expected(target).rstrip("/")):
            raise SystemExit(f"last-good on {target} answered {said!r}, expected {expected(target)!r}")

    return check


def check_finite(_target: Path, out: str) -> None:
    if out.strip() != "0":
        raise SystemExit(f"torch found {out.strip()} tensors with NaN/Inf in the answer: its values are not holes")


def in_child(code: str, *args: object) -> None:
    """Build in a fresh process (its memory and heap are gone after it: see scale_sims.zero_tensors)."""
    subprocess.run([PY, "-c", f"import sys\nsys.path[:0] = [{str(REPO)!r}, {str(REPO / 'bench')!r}]\n{code}",
                    *map(str, args)], check=True, cwd=REPO)  # fmt: skip


class Sims:
    """Where each simulation is: under --reuse (read-only: nothing built, linked or written there) or --root when
    it is complete there, else built in --root."""

    HF_SHARDS = {43: "20GB", 191: "5GB"}  # what huggingface_hub's sharder makes of the 405B at each max size

    def __init__(self, root: Path, reuse: Path | None) -> None:
        self.root, self.reuse = root, reuse

    def find(self, name: str, done: str) -> Path | None:
        for base in (self.reuse, self.root):
            if base is not None and (base / name / done).exists():
                return base / name
        return None

    def dcp_folder(self, name: str, build: Callable[[Path], dict], what: str) -> Path:
        """A DCP save found (its .metadata, written last, says it is whole), or built in --root."""
        found = self.find(name, ".metadata")
        if found:
            return found
        folder = self.root / name
        print(f"building {what}: {build(folder)}", flush=True)
        return folder

    def dcp(self, ranks: int) -> Path:
        from bench import scale_sims

        return self.dcp_folder(f"dcp{ranks}", lambda f: scale_sims.dcp_save_direct(f, ranks), f"the {ranks}-rank save")

    def dcp_pair(self, ranks: int) -> tuple[Path, Path]:
        """The save and a copy of it in another folder: hard links (no blocks) of a save of --root, or the copy
        --reuse has."""
        folder = self.dcp(ranks)
        found = self.find(f"dcp{ranks}-copy", ".metadata")
        if found:
            return folder, found
        if self.reuse and folder.is_relative_to(self.reuse):
            raise SystemExit(f"{folder} is --reuse's and it has no dcp{ranks}-copy: links there would change it")
        copy = self.root / f"dcp{ranks}-copy"
        copy.mkdir(exist_ok=True)
        for part in sorted(folder.iterdir(), key=lambda p: p.name == ".metadata"):  # .metadata last: the marker
            if not (copy / part.name).exists():
                os.link(part, copy / part.name)
        return folder, copy

    def dcp_run(self, _size: int) -> Path:
        """A run of the 256- and 1024-rank saves: folders linking to them (step-256, step-1024)."""
        found = self.find("run", "step-1024/.metadata")
        if found:
            return found
        run = self.root / "dcprun"
        run.mkdir(exist_ok=True)
        for ranks in (256, 1024):
            link = run / f"step-{ranks}"
            if not link.exists():
                link.symlink_to(self.dcp(ranks).resolve(), target_is_directory=True)
        return run

    def zero3(self, ranks: int) -> Path:
        from bench import scale_sims

        found = self.find(f"zero3-{ranks}", "latest")
        if not found:
            found = self.root / f"zero3-{ranks}"
            print(f"building the {ranks}-rank ZeRO-3 save: {scale_sims.zero3_save(found, ranks)}", flush=True)
        return found / "global_step1000"

    def zero3_engine(self, ranks: int) -> Path:
        from bench import scale_sims

        found = self.find(f"engine-{ranks}", "latest")
        if not found:
            found = self.root / f"engine-{ranks}"
            print(f"building the {ranks}-rank engine ZeRO-3 save: {scale_sims.zero3_engine_save(found, ranks)}",
                  flush=True)  # fmt: skip
        return found / "global_step1000"

    def zip_(self, tensors: int) -> Path:
        for base in (self.reuse, self.root):
            if base is not None and (base / f"zip{tensors}.pt").exists():
                return base / f"zip{tensors}.pt"
        path = self.root / f"zip{tensors}.pt"
        tmp = path.with_suffix(".tmp")
        in_child("from pathlib import Path\nfrom scale_sims import torch_zip\n"
                 "print('building:', torch_zip(Path(sys.argv[1]), int(sys.argv[2])), flush=True)",
                 tmp, tensors)  # fmt: skip
        os.replace(tmp, path)
        return path

    def hf(self, shards: int) -> Path:
        from bench import scale_sims

        name = "hf405b" if shards == 191 else f"hf405b-{shards}"
        found = self.find(name, "model.safetensors.index.json")
        if not found:
            found = self.root / name
            built = scale_sims.hf_sharded(found, max_shard_size=self.HF_SHARDS[shards])
            assert built["files"] == shards, built
            print(f"building the 405B folder: {built}", flush=True)
        return found / "model.safetensors.index.json"

    def dcp405(self, ranks: int) -> Path:
        from bench import scale_sims

        return self.dcp_folder(f"dcp405-{ranks}", lambda f: scale_sims.dcp_save_stream(f, ranks),
                               f"the 405B {ranks}-rank save")  # fmt: skip

    def run405(self, _size: int) -> Path:
        """A run of one save: the 2048-rank 405B, hard-linked (no blocks of its own)."""
        found = self.find("run405", "step-1000/.metadata")
        if found:
            return found
        save, run = self.dcp405(2048), self.root / "run405"
        if self.reuse and save.is_relative_to(self.reuse):
            raise SystemExit(f"{save} is --reuse's and it has no run405: links there would change it")
        (run / "step-1000").mkdir(parents=True, exist_ok=True)
        for part in save.iterdir():
            if not (run / "step-1000" / part.name).exists():
                os.link(part, run / "step-1000" / part.name)
        return run

    def runs(self, saves: int) -> Path:
        """A run of `saves` 1B ZeRO-1 saves over 8 ranks (0.8 MB of real blocks a save), built in a child."""
        found = self.find(f"runs1b-{saves}", "run/latest")
        if not found:
            found = self.root / f"runs1b-{saves}"
            shutil.rmtree(found, ignore_errors=True)  # a build cut short
            in_child("from pathlib import Path\nfrom bench_last_good import make_sparse_run\n"
                     "make_sparse_run(Path(sys.argv[1]), int(sys.argv[2]), 8)", found, saves)  # fmt: skip
        return found / "run"

    def tiny_run(self, saves: int) -> Path:
        """bench_last_good.make_run's tiny DeepSpeed run (real data, ~0.3 MB a save), for moto's S3."""
        found = self.find(f"tinyrun-{saves}", "run/latest")
        if not found:
            found = self.root / f"tinyrun-{saves}"
            shutil.rmtree(found, ignore_errors=True)
            in_child("from pathlib import Path\nfrom bench_last_good import make_run\n"
                     "make_run(Path(sys.argv[1]), int(sys.argv[2]), 8)", found, saves)  # fmt: skip
        return found / "run"


def _sizes(text: str) -> list[int]:
    return [int(s) for s in text.split(",") if s]


HEADER_AB = ("| family | size | this tree CPU s | its peak RSS | old tree CPU s | its peak RSS | this / old CPU | "
             "theirs CPU s | this / theirs CPU |\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip


def family_ab(name: str, sizes: list[int], build: Callable, baseline: tuple[str, str], unit: str, old_root: Path,
              ours_kind: tuple[str, str] = CKINSPECT) -> list[str]:  # fmt: skip
    """This tree against another (`old_root`: a checkout with its compiled parts built in place) and the
    baseline, --rounds fresh processes each, interleaved (the order turns each round, so the machine's drift
    hits all three alike); medians of CPU and of peak RSS, and each round's this/old."""
    lines = []
    for size in sizes:
        target = build(size)
        runs: dict[str, list[dict]] = {"new": [], "old": [], "theirs": []}
        turns = [("new", ours_kind, REPO, OURS_LIMITS), ("old", ours_kind, old_root, OURS_LIMITS),
                 ("theirs", baseline, REPO, THEIRS_LIMITS)]  # fmt: skip
        for index in range(ROUNDS):
            for key, kind, tree, limits in turns[index % 3 :] + turns[: index % 3]:
                runs[key].append(measure(kind, target, tree, limits=limits))
        med = {k: {m: statistics.median(r[m] for r in v) for m in ("cpu", "rss_kb")} for k, v in runs.items()}
        new, old, theirs = med["new"], med["old"], med["theirs"]
        each = " ".join(f"{a['cpu'] / b['cpu']:.2f}" for a, b in zip(runs["new"], runs["old"], strict=True))
        lines.append(f"| {name} | {size:,} {unit} | {new['cpu']:.2f} | {_mib(new['rss_kb'])} | {old['cpu']:.2f} | "
                     f"{_mib(old['rss_kb'])} | {new['cpu'] / old['cpu']:.3f} (rounds: {each}) | {theirs['cpu']:.2f} | "
                     f"{new['cpu'] / theirs['cpu']:.3f}x |")  # fmt: skip
        print(lines[-1], flush=True)
    return lines


def local_families(args: argparse.Namespace, sims: Sims) -> list[Family]:
    """The families the arguments select, in the order they run."""
    answer = check_answer(lambda run: str(answer_of(run)))
    newest = check_answer(lambda run: str(sorted(run.iterdir(), key=_step_of)[-1]))
    runs = _sizes(args.runs)
    check_save = _torch_check_save() if runs else ("", "")
    selected = [
        Family("dcp 70B+AdamW", _sizes(args.dcp), sims.dcp, TORCH_DCP, "ranks"),
        Family("diff --quick dcp", _sizes(args.diff), sims.dcp_pair, TORCH_DCP_DIFF, "ranks", CKINSPECT_DIFF),
        Family("last-good dcp run", [2] if args.last_good else [], sims.dcp_run, TORCH_DCP_RUN, "saves",
               CKINSPECT_LAST_GOOD, label=lambda _n: "2 saves (256 + 1024 ranks)", check=newest),
        Family("torch zip", _sizes(args.zip), sims.zip_, TORCH_ZIP, "tensors"),
        Family("zero3 70B+AdamW", _sizes(args.zero3), sims.zero3, TORCH_ZERO3, "ranks"),
        Family("zero3 engine 70B+AdamW", _sizes(args.zero3_engine), sims.zero3_engine, TORCH_ZERO3, "ranks"),
        Family("hf 405B bf16", [43, 191] if args.hf else [], sims.hf, HF_KEYS, "shards"),
        Family("dcp 405B+AdamW", _sizes(args.dcp405), sims.dcp405, TORCH_DCP, "ranks",
               theirs_max=args.torch_ranks_max),
        Family("last-good dcp 405B run", [1] if args.last_good405 else [], sims.run405, TORCH_DCP_RUN, "save",
               CKINSPECT_LAST_GOOD, label=lambda _n: "1 save (2,048 ranks)"),
        Family("last-good --quick, 1B ZeRO-1 run", runs, sims.runs, TORCH_RUN, "saves", CKINSPECT_LAST_GOOD,
               check=answer),
        Family("last-good --quick --format json, 1B ZeRO-1 run", runs, sims.runs, TORCH_RUN, "saves",
               CKINSPECT_LAST_GOOD_JSON, check=answer),
        Family("last-good (values of the answer), 1B ZeRO-1 run", runs, sims.runs, check_save, "saves",
               CKINSPECT_LAST_GOOD_VALUES, theirs_target=answer_of, check=answer, theirs_check=check_finite),
        Family("last-good --format json (values), 1B ZeRO-1 run", runs, sims.runs, check_save, "saves",
               CKINSPECT_LAST_GOOD_VALUES_JSON, theirs_target=answer_of, check=answer, theirs_check=check_finite),
    ]  # fmt: skip
    return [f for f in selected if f.sizes]


def _download(files: Callable[[Path], list[Path]]) -> Callable:
    def theirs(target, _url) -> tuple[str, dict]:
        from bench.scale_remote import download_computed

        return "download the files whole", download_computed(files(target))

    return theirs


def _measured(served, kind: tuple[str, str], label: str, args: Callable | None = None) -> Callable:
    def theirs(target, url) -> tuple[str, dict]:
        figures = served_measure(served, kind, args(target, url) if args else url, THEIRS_LIMITS)
        return label, figures

    return theirs


def _resume_parts(run: Path) -> list[Path]:
    """What DeepSpeed's resume fetches for the answer: `latest`, the newest save's files (it fails: a rank file
    is missing), then the answer's."""
    tags = sorted((p for p in run.iterdir() if p.is_dir()), key=_step_of)
    return [run / "latest", *sorted(tags[-1].iterdir()), *sorted(tags[-2].iterdir())]


def remote_families(args: argparse.Namespace, sims: Sims, http, s3, scratch: Path) -> list[RemoteFamily]:
    """The selected families over URLs: HTTP for the sparse saves, moto's S3 for the tiny runs."""
    answer = check_answer(lambda run: answer_of(run).name)
    newest = check_answer(lambda run: sorted(run.iterdir(), key=_step_of)[-1].name)
    runs, s3_runs = _sizes(args.runs), _sizes(args.s3_runs)
    fsspec_reader = "torch FsspecReader(URL).read_metadata()"

    def index_and_shards(index: Path) -> list[Path]:
        return [index, *sorted({index.parent / s for s in json.loads(index.read_text())["weight_map"].values()})]

    def zero3_files(tag: Path) -> list[Path]:
        return sorted(tag.iterdir())

    def upload(saves: int) -> Path:
        run = sims.tiny_run(saves)
        s3.put(run, f"run{saves}")
        return run

    def resume_args(run: Path, url: str) -> tuple:
        return (url, scratch, *(p.relative_to(run).as_posix() for p in _resume_parts(run)))

    s3_resume = _measured(s3, S3_RESUME, "DeepSpeed's resume over S3: download + torch.load", resume_args)
    selected = [
        RemoteFamily("dcp 70B+AdamW", _sizes(args.dcp), sims.dcp, CKINSPECT, _measured(http, TORCH_DCP_URL,
                     fsspec_reader), "ranks"),
        RemoteFamily("diff --quick dcp", _sizes(args.diff), sims.dcp_pair, CKINSPECT_DIFF,
                     _measured(http, TORCH_DCP_DIFF_URL, fsspec_reader + " of both"), "ranks"),
        RemoteFamily("last-good dcp run", [2] if args.last_good else [], sims.dcp_run, CKINSPECT_LAST_GOOD,
                     _measured(http, TORCH_DCP_RUN_URL, fsspec_reader + " of every save"), "saves",
                     label=lambda _n: "2 saves (256 + 1024 ranks)", check=newest),
        RemoteFamily("torch zip", _sizes(args.zip), sims.zip_, CKINSPECT,
                     _measured(http, DOWNLOAD_TORCH_LOAD, "download (one GET) + torch.load",
                               lambda _t, url: (url, scratch)), "tensors"),
        RemoteFamily("zero3 70B+AdamW", _sizes(args.zero3), sims.zero3, CKINSPECT, _download(zero3_files), "ranks"),
        RemoteFamily("zero3 engine 70B+AdamW", _sizes(args.zero3_engine), sims.zero3_engine, CKINSPECT,
                     _download(zero3_files), "ranks"),
        RemoteFamily("hf 405B bf16", [43, 191] if args.hf else [], sims.hf, CKINSPECT, _download(index_and_shards),
                     "shards"),
        RemoteFamily("dcp 405B+AdamW", _sizes(args.dcp405), sims.dcp405, CKINSPECT,
                     _measured(http, TORCH_DCP_URL, fsspec_reader), "ranks"),
        RemoteFamily("last-good --quick, 1B ZeRO-1 run", runs, sims.runs, CKINSPECT_LAST_GOOD,
                     _download(_resume_parts), "saves", check=answer),
        RemoteFamily("last-good --quick --format json, 1B ZeRO-1 run", runs, sims.runs, CKINSPECT_LAST_GOOD_JSON,
                     _download(_resume_parts), "saves", check=answer),
        RemoteFamily("last-good (values of the answer), 1B ZeRO-1 run", runs, sims.runs, CKINSPECT_LAST_GOOD_VALUES,
                     _download(_resume_parts), "saves", check=answer),
        RemoteFamily("last-good, tiny DeepSpeed run", s3_runs, upload, CKINSPECT_LAST_GOOD_VALUES, s3_resume, "saves",
                     served=s3, check=answer),
        RemoteFamily("last-good --format json, tiny DeepSpeed run", s3_runs, upload, CKINSPECT_LAST_GOOD_VALUES_JSON,
                     s3_resume, "saves", served=s3, check=answer),
        RemoteFamily("last-good --quick, tiny DeepSpeed run", s3_runs, upload, CKINSPECT_LAST_GOOD, s3_resume, "saves",
                     served=s3, check=answer),
    ]  # fmt: skip
    for family in selected:
        family.served = family.served or http
    return [f for f in selected if f.sizes]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dcp", default="16,64", help="ranks of the 70B + AdamW DCP saves (comma-separated)")
    parser.add_argument("--diff", default="", help="ranks of the DCP saves to diff --quick (comma-separated)")
    parser.add_argument("--last-good", action="store_true", help="also last-good --quick on the run of DCP saves")
    parser.add_argument("--zip", default="10000,40000", help="tensors in the torch.save zips (up to 640000)")
    parser.add_argument("--zero3", default="", help="ranks of the DeepSpeed ZeRO-3 70B saves (comma-separated)")
    parser.add_argument("--zero3-engine", default="", help="ranks of the ZeRO-3 saves as DeepSpeed writes them")
    parser.add_argument("--hf", action="store_true", help="also the 405B HF folders of 43 and 191 safetensors shards")
    parser.add_argument("--dcp405", default="", help="ranks of the 405B + AdamW DCP saves (comma-separated)")
    parser.add_argument("--last-good405", action="store_true", help="last-good --quick on a run of the 2048-rank 405B")
    parser.add_argument("--runs", default="", help="saves in the runs of 1B ZeRO-1 saves for last-good (e.g. 10,40)")
    parser.add_argument("--remote", action="store_true", help="serve the selected families by URL: requests, bytes")
    parser.add_argument("--s3-runs", default="", help="--remote: saves in tiny DeepSpeed runs in moto's S3")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds of each side (medians)")
    parser.add_argument("--torch-ranks-max", type=int, default=512, help="dcp405: run torch's reader up to this")
    parser.add_argument("--rss-cap", type=float, default=8.0, help="GiB: a ckinspect child above it is stopped")
    parser.add_argument("--torch-rss-cap", type=float, default=16.0, help="GiB: a baseline above it is stopped")
    parser.add_argument("--mem-floor", type=float, default=1.0, help="GiB: stop a child when less is available")
    parser.add_argument("--root", type=Path, default=None, help="where the simulations go (default: a temp dir)")
    parser.add_argument("--reuse", type=Path, default=None, help="simulations used read-only where found")
    parser.add_argument("--keep", action="store_true", help="keep the simulations (re-used by the next run)")
    parser.add_argument(
        "--old-root",
        type=Path,
        default=None,
        help="--dcp, --zero3, --zero3-engine: this other checkout beside (its C built in place)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    subreaper()
    global OURS_LIMITS, THEIRS_LIMITS, ROUNDS
    ROUNDS = max(1, args.rounds)
    floor = int(args.mem_floor * GIB_KB)
    OURS_LIMITS = Limits(int(args.rss_cap * GIB_KB) if args.rss_cap else None, floor)
    THEIRS_LIMITS = Limits(int(args.torch_rss_cap * GIB_KB) if args.torch_rss_cap else None, floor)
    root = args.root or Path(tempfile.mkdtemp(prefix="bench_scale-", dir="/work" if Path("/work").is_dir() else None))
    root.mkdir(parents=True, exist_ok=True)
    sims = Sims(root, args.reuse)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
          f"{_mem_available_kb() / GIB_KB:.1f} GiB available", flush=True)  # fmt: skip
    try:
        if args.old_root is not None:
            print(f"\n{HEADER_AB}", flush=True)
            old = args.old_root.resolve()
            family_ab("dcp 70B+AdamW", _sizes(args.dcp), sims.dcp, TORCH_DCP, "ranks", old)
            family_ab(
                "diff --quick dcp", _sizes(args.diff), sims.dcp_pair, TORCH_DCP_DIFF, "ranks", old, CKINSPECT_DIFF
            )
            family_ab("zero3 70B+AdamW", _sizes(args.zero3), sims.zero3, TORCH_ZERO3, "ranks", old)
            family_ab("zero3 engine 70B+AdamW", _sizes(args.zero3_engine), sims.zero3_engine, TORCH_ZERO3, "ranks", old)
            return
        if not args.remote:
            print(f"\n{HEADER}", flush=True)
            for family in local_families(args, sims):
                family.run()
            return
        from bench.scale_remote import S3, Http

        roots = {"own": root, **({"reuse": args.reuse} if args.reuse else {})}
        with Http(roots) as http, S3() if args.s3_runs else contextlib.nullcontext() as s3:
            print(f"\n{REMOTE_HEADER}", flush=True)
            for remote in remote_families(args, sims, http, s3, root):
                remote.run()
    finally:
        if not args.keep and args.root is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
