"""Which record style: ckinspect's generated Record against a hand-written __init__, @dataclass and NamedTuple.

    python bench/bench_records.py [--rounds 15]

Each style defines a TensorInfo-shaped class (7 fields, 2 defaults) in a fresh process. Printed, as
the best of the rounds (the least disturbed by other load on the machine): the time to build 50,000
instances with the collector off (as the readers build them), the bytes each instance holds
(tracemalloc), the time to define the class, and the time to import the style's machinery; and each
build time as a ratio to the generated Record's. record.py's docstring quotes a run of this.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time, tracemalloc
style = sys.argv[1]
t0 = time.perf_counter()
if style == "dataclass":
    import dataclasses
elif style == "namedtuple":
    import typing
else:
    import ckinspect.record as record
machinery = time.perf_counter() - t0

t0 = time.perf_counter()
if style == "generated":
    class TensorInfo(record.Record):
        name: str
        dtype: str
        shape: tuple
        stride: tuple
        storage_key: str
        storage_offset: int = 0
        group: str = "other"
elif style == "hand-written":
    class TensorInfo(record.Record):
        __slots__ = ("name", "dtype", "shape", "stride", "storage_key", "storage_offset", "group")
        def __init__(self, name, dtype, shape, stride, storage_key, storage_offset=0, group="other"):
            self.name = name
            self.dtype = dtype
            self.shape = shape
            self.stride = stride
            self.storage_key = storage_key
            self.storage_offset = storage_offset
            self.group = group
elif style == "dataclass":
    @dataclasses.dataclass(slots=True, eq=True)
    class TensorInfo:
        name: str
        dtype: str
        shape: tuple
        stride: tuple
        storage_key: str
        storage_offset: int = 0
        group: str = "other"
else:
    class TensorInfo(typing.NamedTuple):
        name: str
        dtype: str
        shape: tuple
        stride: tuple
        storage_key: str
        storage_offset: int = 0
        group: str = "other"
define = time.perf_counter() - t0

names = [f"model.layers.{i}.w" for i in range(50_000)]
shape, stride = (4,), (1,)
import gc
gc.disable()  # as the readers build their tensors (tree.no_gc): construction only, no collector passes
build = 9.0
for _ in range(5):
    t0 = time.perf_counter()
    made = [TensorInfo(n, "float32", shape, stride, n, 0, "model") for n in names]
    build = min(build, time.perf_counter() - t0)
    del made
gc.enable()
tracemalloc.start()
before = tracemalloc.get_traced_memory()[0]
made = [TensorInfo(n, "float32", shape, stride, n) for n in names]
per = (tracemalloc.get_traced_memory()[0] - before - sys.getsizeof(made)) / len(made)
print(json.dumps({"build": build, "bytes": per, "define": define, "machinery": machinery}))
"""

STYLES = ("generated", "hand-written", "dataclass", "namedtuple")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {s: [] for s in STYLES}
    for _ in range(args.rounds):
        for style in STYLES:  # in turn within a round, so the machine's drift hits every style alike
            out = subprocess.run(
                [sys.executable, "-c", CHILD, style], capture_output=True, text=True, check=True, cwd=REPO
            )
            runs[style].append(json.loads(out.stdout))
    best = {
        s: {k: min(r[k] for r in runs[s]) for k in runs[s][0]} for s in STYLES
    }  # best of the rounds: least disturbed
    base = best["generated"]
    print(f"{'style':14} {'50k built':>10} {'ratio':>6} {'B/inst':>7} {'define':>9} {'import':>9}")
    for style in STYLES:
        m = best[style]
        print(
            f"{style:14} {m['build'] * 1e3:8.1f}ms {m['build'] / base['build']:5.2f}x {m['bytes']:7.0f} "
            f"{m['define'] * 1e3:7.3f}ms {m['machinery'] * 1e3:7.2f}ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
