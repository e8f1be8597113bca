"""The full read of a DCP save (one entry per tensor, its chunks as model.Extents) against the per-chunk read
it replaced and against torch, side by side in one run, each a fresh process (what a user's shell pays):

    python bench/bench_dcp_full.py --before DIR [--sims 16,64] [--real-mib 64] [--root DIR] [--keep]

  real data   `ckinspect --report FOLDER` (listing + value scan)   vs  dcp.load into full tensors, then the
              scan's statistics in torch (NaN/Inf, |x| > 65504)       (what a user would otherwise run)
  sims N      the listing alone, `read_dcp(FOLDER)` (no --quick),   vs  FileSystemReader(FOLDER).read_metadata()
              on bench/scale_sims' 70B + AdamW saves (data are holes: reading their values would read a TB)

`--before DIR`: a checkout of the per-chunk version (e.g. `git archive <commit> | tar -x -C DIR`), timed on the
same inputs. Printed: CPU seconds (user+sys of the child, imports included), peak RSS, and the ratios.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.bench_scale import measure  # noqa: E402  - after the path is set

REPORT = ("from ckinspect.cli import main",
          "try:\n    main(['--report', '--fail-on', 'never', sys.argv[1]])\nexcept SystemExit:\n    pass")  # fmt: skip
LISTING = ("from ckinspect.formats.dcp import read_dcp", "ckpt = read_dcp(sys.argv[1])")
TORCH_LOAD = (
    "import torch, torch.distributed.checkpoint as dcp\n"
    "from torch.distributed.checkpoint import FileSystemReader\n"
    "import warnings; warnings.simplefilter('ignore')",
    "md = FileSystemReader(sys.argv[1]).read_metadata().state_dict_metadata\n"
    "state = {k: torch.empty(tuple(v.size), dtype=v.properties.dtype) for k, v in md.items() if hasattr(v, 'size')}\n"
    "dcp.load(state, checkpoint_id=sys.argv[1])\n"
    "for t in state.values():\n"
    "    if t.is_floating_point():\n"
    "        int((~t.isfinite()).sum()); int((t.abs() > 65504).sum())",
)
TORCH_METADATA = ("from torch.distributed.checkpoint import FileSystemReader",
                  "FileSystemReader(sys.argv[1]).read_metadata()")  # fmt: skip


def real_save(folder: Path, mib: int, ranks: int = 8) -> None:
    """A small Llama-like state dict with real values, `mib` MiB of float32, sharded over `ranks` ranks."""
    import torch

    from tests.helpers.dcp_saves import sharded_save

    g = torch.Generator().manual_seed(0)
    hidden = 256
    layers = max(1, (mib << 20) // (4 * 6 * hidden * hidden))
    state = {}
    for n in range(layers):
        for name, shape in (("wq", (hidden, hidden)), ("w1", (4 * hidden, hidden)), ("norm", (hidden,))):
            state[f"model.layers.{n}.{name}"] = torch.randn(shape, generator=g)
            state[f"optim.state.layers.{n}.{name}.exp_avg"] = torch.randn(shape, generator=g)
    sharded_save(folder, state, ranks)


def line(label: str, ours: dict, before: dict | None, theirs: dict) -> str:
    b = f"{before['cpu']:7.2f} s {before['rss_kb'] / 1024:6.0f} MiB" if before else " " * 19
    ratio = f"{ours['cpu'] / before['cpu']:5.2f}x cpu {ours['rss_kb'] / before['rss_kb']:5.2f}x rss" if before else ""
    torch = f"{theirs['cpu']:7.2f} s {theirs['rss_kb'] / 1024:6.0f} MiB"
    mine = f"{ours['cpu']:7.2f} s {ours['rss_kb'] / 1024:6.0f} MiB"
    return f"{label:<22} {mine} | {b} | {torch} | {ratio} | ours/torch {ours['cpu'] / theirs['cpu']:5.2f}x cpu"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, default=None, help="a checkout of the per-chunk version")
    parser.add_argument("--sims", default="16", help="ranks of the 70B sims whose listing is timed")
    parser.add_argument("--real-mib", type=int, default=64, help="MiB of real float32 values in the real save")
    parser.add_argument("--root", type=Path, default=None, help="where the saves go (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the saves")
    args = parser.parse_args()
    from bench import scale_sims

    root = args.root or Path(tempfile.mkdtemp(prefix="bench_dcp_full-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"{'':<22} {'this tree':>19} | {'before (per chunk)':>19} | {'torch':>19} |")
    try:
        real = root / f"real{args.real_mib}"
        if not (real / ".metadata").exists():
            real_save(real, args.real_mib)
        ours = measure(REPORT, real)
        before = measure(REPORT, real, args.before) if args.before else None
        print(line(f"real {args.real_mib} MiB, 8 ranks", ours, before, measure(TORCH_LOAD, real)), flush=True)
        for ranks in [int(r) for r in args.sims.split(",") if r]:
            sim = root / f"dcp{ranks}"
            if not (sim / ".metadata").exists():
                scale_sims.dcp_save_direct(sim, ranks)
            ours = measure(LISTING, sim)
            before = measure(LISTING, sim, args.before) if args.before else None
            print(line(f"sim 70B, {ranks} ranks", ours, before, measure(TORCH_METADATA, sim)), flush=True)
    finally:
        if not args.keep and args.root is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
