"""Two trees of ckinspect side by side: listing, diff, value scan and start-up, CPU new/old.

    python bench/bench_ab.py --old-root /tmp/parity_old                    # new root: this checkout
    python bench/bench_ab.py --old-root OLD --new-root NEW --rounds 9
    python bench/bench_ab.py --old-root OLD --dir /tmp/ab --keep           # then --dir /tmp/ab --reuse
    python bench/bench_ab.py --old-root OLD --only small,many              # a subset of the benchmarks

"Does this change regress anything?" answered the way a user feels it: each command is a fresh
process of the shared venv's python with PYTHONPATH at one tree, bytecode cached (PYTHONDONTWRITEBYTECODE
dropped, one untimed warm-up per tree and command), the page cache warm. Rounds interleave the two trees
(old, new, then new, old in the next round), so the machine's drift hits both alike. The figure is CPU
(user + sys of the child, from wait4), not wall time: on a shared, loaded machine wall time measures the
neighbours. Printed per benchmark: the median CPU of each tree, the ratio of the medians and the median of
the per-round ratios (new/old: below 1.00 is faster). For the small sample it also prints the CPU spent
inside the process from before `import ckinspect.cli` to main()'s return, which leaves out the
interpreter's own start-up (the same for both trees).

The files are written by a child process with torch (this process never imports it): a resume-shaped
torch.save file of --gib GiB (fp32 weights, AdamW moments, step, RNG state; random values), a second one of
the same shapes where a few tensors differ (the diff's B), and a state dict of --tensors four-element
tensors. Both trees must give the same JSON (tensor count, findings' codes) on every file, or the
comparison stops: a faster wrong answer is not a win. Run by hand; not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GIB = 1 << 30
MIB = 1 << 20

WRITE_FILES = r"""
import sys, torch
sys.path.insert(0, sys.argv[1])
from bench.bench_report import write_resume, write_many
torch.manual_seed(0)
big, other, many, gib, count = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), int(sys.argv[6])
write_resume(big, int(gib * (1 << 30)))
obj = torch.load(big, weights_only=False)
for t in obj["model"].values():
    t.normal_()
for state in obj["optimizer"]["state"].values():
    state["exp_avg"].normal_(0, 1e-3)
    state["exp_avg_sq"].uniform_(0, 1e-6)
torch.save(obj, big)
# B: the same save a little later: three weights moved, the step counter advanced
for name in list(obj["model"])[1:4]:
    obj["model"][name].add_(1e-3)
obj["step"] = 31
torch.save(obj, other)
write_many(many, count)
"""

# The console script's own call (`sys.exit(main())`, argv from sys.argv), timed in the process from before
# ckinspect's first import to main()'s return; the process's CPU adds the interpreter's start and exit.
TIMED_MAIN = r"""
import sys, time
started = time.process_time()
from ckinspect.cli import main
sys.argv[0] = "ckinspect"
code = main()
sys.stderr.write("\nINPROCESS_CPU %.6f\n" % (time.process_time() - started))
sys.exit(code)
"""

BENCHMARKS = ("small", "listing", "many", "diff", "scan")


def child_env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached
    return env


def check_tree(root: Path, scratch: Path) -> None:
    """The child must import ckinspect from `root`, not from the venv's editable install."""
    proc = subprocess.run(
        [sys.executable, "-c", "import ckinspect; print(ckinspect.__file__)"],
        env=child_env(root),
        cwd=scratch,
        capture_output=True,
        text=True,
        check=True,
    )
    found = Path(proc.stdout.strip()).resolve()
    if not found.is_relative_to(root.resolve()):
        sys.exit(f"PYTHONPATH={root} imports ckinspect from {found}")


def run_once(root: Path, argv: list[str], scratch: Path) -> tuple[float, float | None, bytes]:
    """One fresh process: CPU user+sys (wait4), the in-process CPU it reported, and its stdout."""
    out_path, err_path = scratch / "out", scratch / "err"
    command = [sys.executable, "-c", TIMED_MAIN, *argv]
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(command, stdout=out, stderr=err, env=child_env(root), cwd=scratch)
        _, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    stderr = err_path.read_text(errors="replace")
    if code not in (0, 1):
        sys.exit(f"{root}: exit {code}: ckinspect {' '.join(argv)}\n{stderr[-2000:]}")
    inside = [line.split()[1] for line in stderr.splitlines() if line.startswith("INPROCESS_CPU ")]
    return usage.ru_utime + usage.ru_stime, float(inside[-1]) if inside else None, out_path.read_bytes()


def same_answer(label: str, old: bytes, new: bytes) -> None:
    """Both trees must say the same thing: tensor counts, findings' codes, the diff's changed names."""

    def gist(raw: bytes) -> object:
        doc = json.loads(raw)
        files = [(f["tensor_count"], sorted({x["code"] for x in f["findings"]})) for f in doc.get("files", [])]
        diff = doc.get("diff")
        changed = sorted(c["name"] for c in diff["changed"]) if diff else None
        return files, changed, doc["summary"]["errors"]

    if gist(old) != gist(new):
        sys.exit(f"{label}: the trees disagree:\n old {gist(old)}\n new {gist(new)}")


def warm(path: Path) -> None:
    buffer = bytearray(MIB)
    with open(path, "rb", buffering=0) as handle:
        while handle.readinto(buffer):
            pass


def commands(files: dict[str, Path]) -> dict[str, tuple[str, list[str]]]:
    small = REPO / "samples" / "resumed-60" / "tiny_resume.pth"
    big, other, many = (str(files[k]) for k in ("big", "other", "many"))
    json_out = ["--format", "json"]
    return {
        "small": ("small sample --report --quick (start-up)", ["--report", "--quick", *json_out, str(small)]),
        "listing": ("listing big file --report --quick", ["--report", "--quick", *json_out, big]),
        "many": ("listing many tensors --report --quick", ["--report", "--quick", *json_out, many]),
        "diff": ("diff A B --report (two big files)", ["diff", big, other, "--report", *json_out]),
        "scan": ("full value scan --report (big file)", ["--report", *json_out, big]),
    }


def make_files(folder: Path, gib: float, tensors: int, reuse: bool) -> dict[str, Path]:
    files = {"big": folder / "resume.pt", "other": folder / "resume_b.pt", "many": folder / f"many_{tensors}.pt"}
    if reuse and all(p.exists() for p in files.values()):
        return files
    print(f"writing {gib:g} GiB resume file, its B and a {tensors:,}-tensor file under {folder} ...", flush=True)
    subprocess.run(
        [sys.executable, "-c", WRITE_FILES, str(REPO), *(str(files[k]) for k in ("big", "other", "many")), str(gib)]
        + [str(tensors)],
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old-root", type=Path, required=True, help="the tree to compare against")
    parser.add_argument("--new-root", type=Path, default=REPO, help="default: this checkout")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--gib", type=float, default=0.25, help="size of the resume-shaped files")
    parser.add_argument("--tensors", type=int, default=20_000, help="tensors of the many-tensor file")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help=f"comma-separated subset of {BENCHMARKS}")
    parser.add_argument("--dir", type=Path, help="where the files go (default: a new folder in /tmp)")
    parser.add_argument("--keep", action="store_true", help="leave the files (with --dir: --reuse them later)")
    parser.add_argument("--reuse", action="store_true", help="time the files a --keep run left in --dir")
    args = parser.parse_args()
    only = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = sorted(set(only) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {BENCHMARKS}")

    folder = args.dir or Path(tempfile.mkdtemp(prefix="bench_ab_"))
    folder.mkdir(parents=True, exist_ok=True)
    scratch = folder / "scratch"
    scratch.mkdir(exist_ok=True)
    trees = {"old": args.old_root.resolve(), "new": args.new_root.resolve()}
    try:
        for root in trees.values():
            check_tree(root, scratch)
        needs_files = any(name != "small" for name in only)
        files = make_files(folder, args.gib, args.tensors, args.reuse) if needs_files else {}
        table = commands(files or {k: folder / k for k in ("big", "other", "many")})
        for path in files.values():
            warm(path)
        cpu: dict[tuple[str, str], list[float]] = {}
        inside: dict[tuple[str, str], list[float]] = {}
        for name in only:
            label, argv = table[name]
            answers = {side: run_once(root, argv, scratch)[2] for side, root in trees.items()}  # warm-up, untimed
            same_answer(label, answers["old"], answers["new"])
            for side in trees:
                cpu[name, side], inside[name, side] = [], []
        order = list(trees)
        for round_no in range(args.rounds):
            sides = order if round_no % 2 == 0 else order[::-1]
            for name in only:
                for side in sides:
                    total, in_process, _ = run_once(trees[side], table[name][1], scratch)
                    cpu[name, side].append(total)
                    if in_process is not None:
                        inside[name, side].append(in_process)
            print(f"round {round_no + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)

    load = os.getloadavg()[0]
    print(f"\nold {trees['old']}\nnew {trees['new']}")
    print(f"{args.rounds} rounds, interleaved, fresh processes, CPU user+sys median; load average now {load:.1f}\n")
    header = f"{'benchmark':44} {'old CPU s':>10} {'new CPU s':>10} {'new/old':>8} {'median per round':>17}"
    print(header)
    print("-" * len(header))

    def row(label: str, old: list[float], new: list[float]) -> None:
        per_round = statistics.median(n / o for n, o in zip(new, old, strict=True))
        old_median, new_median = statistics.median(old), statistics.median(new)
        ratio = new_median / old_median
        print(f"{label:44} {old_median:10.4f} {new_median:10.4f} {ratio:8.3f} {per_round:17.3f}")

    for name in only:
        row(table[name][0], cpu[name, "old"], cpu[name, "new"])
        if name == "small":
            row("  of it: import ckinspect.cli + main()", inside[name, "old"], inside[name, "new"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
