"""Logit drift of a Hugging Face model whose fp32 weights are larger than the memory the process may use.

    python bench/bench_drift_memory.py                      # ~3 GB Llama-shaped model, 1.5 GB limit
    python bench/bench_drift_memory.py --layers 4 --limit-gb 1.0 --dir /scratch --keep

Writes a Llama-shaped model with random weights (config.json + one safetensors shard per layer, fp32,
written a tensor at a time by a child process, so nothing here holds the model), then runs, each in a
fresh process:

  1. `ckinspect drift DIR --report --format json` under a memory limit below the size of the weights
     (`prlimit --data`: heap and private anonymous memory; `--limit as`: the whole address space):
     block by block, it must finish and give the drift;
  2. the same with `--whole-model` (every weight at once), under the same limit: it cannot;
  3. the same `--whole-model` without a limit: its figures must equal (1)'s exactly;
  4. what a transformers user would otherwise run, without a limit: `from_pretrained` in fp32 and a
     copy whose weights went through fp16 (and one through bf16), each run on the same batch.

Printed: wall time, CPU time and peak RSS (`/usr/bin/time`) of each, and the ratio of each peak RSS
to the block-by-block one. Run by hand; not part of the test suite.

Which limit: RLIMIT_DATA (Linux 4.7 and later) counts the private writable mappings, heap and
anonymous mmap, where every weight, rounded copy and activation lives: on a machine without swap that
memory cannot be given back while in use, so a run that fits under it needs no more RAM than that.
Mapped file pages (the weights' windows, read and unmapped at once) are page cache the kernel can drop,
and it rightly leaves them out. RLIMIT_AS also counts library code and untouched reservations
(`import torch, transformers` alone: ~760 MiB of address space, ~330 MiB of it data); RLIMIT_RSS is
not enforced by Linux; a cgroup's memory.max would be the other honest bound, but needs a cgroup v2
memory controller, which this bench cannot assume it may create.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_diff import GIB, Run, child_env, run  # noqa: E402

WRITE = r"""
import json, sys
from pathlib import Path
import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM
from ckinspect.analysis.blockwise import parameters_on_meta

folder, layers, hidden, inter, vocab = Path(sys.argv[1]), *map(int, sys.argv[2:6])
config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                     num_attention_heads=hidden // 128, num_key_value_heads=hidden // 128,
                     max_position_embeddings=2048, tie_word_embeddings=False)
with parameters_on_meta():
    shapes = dict((n, tuple(p.shape)) for n, p in LlamaForCausalLM(config).named_parameters())
torch.manual_seed(0)
def value(name, shape):
    if name.endswith("norm.weight"):
        return 1 + 0.1 * torch.randn(shape)
    return torch.randn(shape) * 0.02
groups = {}
for name in shapes:
    if name.startswith("model.layers."):
        part = name.split(".")[2]
    else:
        part = "head" if name in ("lm_head.weight", "model.norm.weight") else "embed"
    groups.setdefault(part, []).append(name)
weight_map, total = {}, 0
for i, (part, names) in enumerate(groups.items()):
    shard = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
    tensors = {n: value(n, shapes[n]) for n in names}
    save_file(tensors, str(folder / shard), metadata={"format": "pt"})
    total += sum(t.numel() * 4 for t in tensors.values())
    weight_map.update({n: shard for n in names})
    del tensors
index = {"metadata": {"total_size": total}, "weight_map": weight_map}
(folder / "model.safetensors.index.json").write_text(json.dumps(index))
config.save_pretrained(folder)
print(total)
"""

TRANSFORMERS_USER = r"""
import copy, json, sys
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
batch = torch.randint(0, model.config.vocab_size, (4, 64), generator=torch.Generator().manual_seed(0))
out = {}
with torch.no_grad():
    ref = model(batch).logits
    for label, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        rounded = copy.deepcopy(model)
        for p in rounded.parameters():
            p.copy_(p.to(dtype).float())
        got = rounded(batch).logits
        out[label] = (ref - got).abs().max().item()
        del rounded
json.dump(out, open(sys.argv[2], "w"))
"""


LIMIT_KIND = "data"


def drift_json(label: str, folder: Path, out: Path, limit: int | None, *flags: str, expect: int | None = 0) -> Run:
    cmd = [sys.executable, "-m", "ckinspect", "drift", str(folder), "--report", "--format", "json", "-o", str(out)]
    cmd += ["--no-progress", *flags]
    if limit is not None:
        cmd = ["prlimit", f"--{LIMIT_KIND}={limit}", "--", *cmd]
    return run(label, cmd, env=child_env(), expect=expect)


def logits_of(path: Path) -> dict:
    return json.loads(path.read_text())["drift"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=5632)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--limit-gb", type=float, default=1.5, help="memory limit of the limited runs")
    parser.add_argument(
        "--limit",
        choices=("as", "data"),
        default="data",
        help="what is limited: the data segment (RLIMIT_DATA, default: heap and private anonymous memory) or "
        "the address space (RLIMIT_AS: every mapping, libraries and untouched reservations included: torch and "
        "transformers alone reserve ~1 GB of it)",
    )
    parser.add_argument("--dir", type=Path, help="where to write the model (default: a fresh temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the model (then --dir D --reuse runs again on it)")
    parser.add_argument("--reuse", action="store_true", help="the model in --dir is already written")
    parser.add_argument("--skip-transformers", action="store_true", help="leave out row 4")
    args = parser.parse_args()

    global LIMIT_KIND
    LIMIT_KIND = args.limit
    folder = args.dir or Path(tempfile.mkdtemp(prefix="ckinspect-drift-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    limit = int(args.limit_gb * 1e9)
    try:
        if args.reuse:
            weights = json.loads((folder / "model.safetensors.index.json").read_text())["metadata"]["total_size"]
        else:
            sizes = [str(args.layers), str(args.hidden), str(args.intermediate), str(args.vocab)]
            written = subprocess.run(
                [sys.executable, "-c", WRITE, str(folder), *sizes],
                env=child_env(),
                check=True,
                stdout=subprocess.PIPE,
                text=True,
            )
            weights = int(written.stdout.split()[-1])
        print(
            f"model: {folder}  fp32 weights {weights / 1e9:.2f} GB ({weights / GIB:.2f} GiB), "
            f"limit {limit / 1e9:.2f} GB (RLIMIT_{args.limit.upper()})"
        )
        if weights <= limit:
            raise SystemExit("the weights fit under the limit: raise --layers or lower --limit-gb")

        rows = []
        with tempfile.TemporaryDirectory() as scratch:
            tmp = Path(scratch)
            rows.append(drift_json("block by block, limited", folder, tmp / "blocks.json", limit))
            blocks = logits_of(tmp / "blocks.json")
            whole_limited = drift_json(
                "whole model, limited", folder, tmp / "whole-limited.json", limit, "--whole-model", expect=None
            )
            rows.append(whole_limited)
            rows.append(drift_json("whole model, no limit", folder, tmp / "whole.json", None, "--whole-model"))
            whole = logits_of(tmp / "whole.json")
            direct = None
            if not args.skip_transformers:
                cmd = [sys.executable, "-c", TRANSFORMERS_USER, str(folder), str(tmp / "direct.json")]
                rows.append(run("transformers: fp32 + rounded copy", cmd, env=child_env()))
                direct = json.loads((tmp / "direct.json").read_text())
            limited_reason = (
                logits_of(tmp / "whole-limited.json")["logits_skipped"]
                if (tmp / "whole-limited.json").is_file()
                else f"exit {whole_limited.returncode}, no report"
            )

        lg = blocks["logits"]
        if lg is None:
            raise SystemExit(f"block by block gave no logit drift: {blocks['logits_skipped']}")
        formats = lg["formats"]
        same = all(lg[f] == whole["logits"][f] for f in formats)
        base = rows[0].peak_rss
        print(f"\n{'run':<36} {'exit':>4} {'seconds':>8} {'CPU s':>7} {'peak RSS':>10} {'vs block by block':>18}")
        for r in rows:
            print(
                f"{r.label:<36} {r.returncode:>4} {r.wall:>8.1f} {r.cpu:>7.1f} {r.peak_rss / GIB:>6.2f} GiB "
                f"{r.peak_rss / base:>17.2f}x"
            )
        print(f"load average after the runs: {' '.join(f'{x:.2f}' for x in os.getloadavg())} (2 cores)")
        print(
            f"fp32 weights / limit: {weights / limit:.2f}; block by block peak RSS / limit: {base / limit:.2f} "
            f"(RSS also counts file-backed pages: libraries, and the weights' mapped windows while read)"
        )
        print(
            f"\nblock by block under {limit / 1e9:.2f} GB: {lg['blocks']} blocks, "
            f"{lg['weights_held_peak_bytes'] / GIB:.3f} GiB of fp32 weights held at once, at most"
        )
        for f in formats:
            r = lg[f]
            print(
                f"  {f}: max |Δlogit| {r['max_abs']:.4g}  mean {r['mean_abs']:.4g}  top-1 {r['top1_agreement']:.2%}"
                f"  KL {r['kl_mean']:.3g}"
            )
        print(f"whole model under the same limit: {limited_reason}")
        print(f"whole model without a limit gives the same figures: {same}")
        if direct is not None:
            print(f"transformers' own fp16/bf16 max |Δlogit|: {direct['fp16']:.4g} / {direct['bf16']:.4g}")
        return 0 if same else 1
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
