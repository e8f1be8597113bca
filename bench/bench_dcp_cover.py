"""What the chunk-coverage check (formats/dcp_cover) costs on a DCP save, beside the listing it is part of and
torch's own reader of the same `.metadata`.

    python bench/bench_dcp_cover.py /work/sims/scale/dcp256 /work/sims/scale/dcp1024 [--repeat 5]

The check is a small part of a --quick listing, smaller than what a loaded machine does to the CPU time of two
fresh processes run one after the other (bench_scale.py --old-root shows that noise: rounds of the same two
trees differ by 30%). So it is timed here in one process, the median CPU of --repeat runs of each:

  check      dcp_cover.exact_covers over every entry, as dcp_quick calls it (tensors cut alike checked once)
  unshared   the same with every tensor checked on its own: the most a save of this many chunks can ask
  pure       the pure listers' calls: dcp_cover.Remembered over each tensor's chunks as tuples
  listing    read_dcp(FOLDER, trust_layout=True), the whole compiled --quick listing, the check included

and, as the user's alternative, torch's FileSystemReader(FOLDER).read_metadata() in a fresh process (its CPU,
the import of torch left out). Printed: each figure, and the check against the listing and against torch.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TORCH_CALL = """
import sys, time
from torch.distributed.checkpoint import FileSystemReader
t = time.process_time()
FileSystemReader(sys.argv[1]).read_metadata()
print(time.process_time() - t)
"""


def _cpu(call, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.process_time()
        call()
        times.append(time.process_time() - t)
    return statistics.median(times)


def measure(folder: Path, repeat: int) -> dict[str, float]:
    from ckinspect.formats import dcp_cover
    from ckinspect.formats.dcp import read_dcp
    from ckinspect.formats.dcp_metadata import native_columns
    from ckinspect.io import folders

    with folders.opened(folder / ".metadata") as reader:
        cols = native_columns(reader.read_at, reader.size)
    if cols is None:
        raise SystemExit("the compiled decoder is not built or declined the save")
    entries = cols.entries
    args = ([None if e[1] else e[3] for e in entries], [e[4] for e in entries], [e[5] for e in entries],
            cols.offsets_index, cols.offsets_pool, cols.sizes_index, cols.sizes_pool)  # fmt: skip
    tensors = [(e[3], [cols.offsets(c) for c in range(e[4], e[4] + e[5])],
                [cols.sizes(c) for c in range(e[4], e[4] + e[5])]) for e in entries if not e[1]]  # fmt: skip
    assert dcp_cover.exact_covers(*args)[[not e[1] for e in entries]].all(), "the save does not tile"

    def pure() -> None:
        remembered = dcp_cover.Remembered()
        for size, offsets, sizes in tensors:
            remembered.covers(size, offsets, sizes)

    out = {"check": _cpu(lambda: dcp_cover.exact_covers(*args), repeat)}
    with mock.patch.object(dcp_cover, "_SAME_LAYOUT_MIN", 1 << 62):
        out["unshared"] = _cpu(lambda: dcp_cover.exact_covers(*args), repeat)
    out["pure"] = _cpu(pure, repeat)
    out["listing"] = _cpu(lambda: read_dcp(folder, trust_layout=True), repeat)
    torch_cpu = [float(subprocess.run([sys.executable, "-c", TORCH_CALL, str(folder)], capture_output=True, text=True,
                                      check=True).stdout.split()[-1]) for _ in range(max(1, repeat // 2))]  # fmt: skip
    out["torch"] = statistics.median(torch_cpu)
    out["chunks"] = cols.chunks
    out["tensors"] = sum(1 for e in entries if not e[1])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print("| save | chunks | check CPU s | unshared | pure | --quick listing | torch read_metadata | check / listing | "
          "check / torch |\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for folder in args.folders:
        m = measure(folder, args.repeat)
        print(f"| {folder.name} | {m['chunks']:,} in {m['tensors']:,} tensors | {m['check']:.3f} | "
              f"{m['unshared']:.3f} | {m['pure']:.3f} | {m['listing']:.2f} | {m['torch']:.2f} | "
              f"{m['check'] / m['listing']:.3f} | {m['check'] / m['torch']:.4f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
