"""`ckinspect convert IN OUT [--dtype fp32|fp16|bf16] [--only GROUP]... [--trust] [--refuse-left-out]`.

OUT's suffix picks the output: `.safetensors`, anything else a torch zip (torch.save).
Exit status: 0 written; 2 refused (UNSAFE_PICKLE without --trust, a damaged input) or usage error.
"""

from __future__ import annotations

import json
import sys

from ckinspect.commands.emit import emit, envelope
from ckinspect.fmt import md_text
from ckinspect.io.remote import LOCAL_OUTPUT, refuse_remote
from ckinspect.ops.convert import ConvertResult, convert
from ckinspect.vocab import EXIT_OK


def run(args) -> int:
    refuse_remote(args.input, "convert reads local files; download it first (--report and diff read URLs)")
    refuse_remote(args.out, LOCAL_OUTPUT)
    fmt = getattr(args, "format", "text")
    # the --trust announcement goes to stderr so it is seen before the load runs, whatever --format
    result = convert(
        args.input,
        args.out,
        dtype=getattr(args, "dtype", None),
        only=getattr(args, "only", None),
        trust=getattr(args, "trust", False),
        refuse_left_out=getattr(args, "refuse_left_out", False),
        announce=lambda line: print(line, file=sys.stderr, flush=True),
    )
    emit(render(result, fmt), getattr(args, "output", None))
    return EXIT_OK


def render(r: ConvertResult, fmt: str) -> str:
    head = f"convert {r.source} ({r.source_format}) -> {r.out} ({r.out_format}): "
    head += f"{r.tensors} tensors, {r.out_bytes} bytes"
    if r.left_out:
        head += f", {len(r.left_out)} left out"
    if fmt == "json":
        return json.dumps(envelope("convert", **r.to_json()), indent=2)
    if fmt == "markdown":
        return "\n".join([f"## {md_text(head)}", ""] + [f"- {md_text(n)}" for n in r.notes])
    return "\n".join([head] + [f"  note  {n}" for n in r.notes])
