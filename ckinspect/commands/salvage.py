"""`ckinspect salvage BROKEN OUT`: recover every whole, CRC-valid tensor of a damaged checkpoint.

OUT ending in `.safetensors` gets a safetensors file, anything else a torch zip (torch.save).
Exit status: 0 every tensor recovered; 1 something is missing (listed), or the source names
code-running globals (UNSAFE_PICKLE, said in a note; nothing ran); 2 nothing could be salvaged or usage error.
"""

from __future__ import annotations

import json

from ckinspect.commands.emit import emit, envelope, exit_for
from ckinspect.fmt import md_code, md_text, terminal_safe
from ckinspect.io.remote import LOCAL_OUTPUT, refuse_remote
from ckinspect.ops.salvage import SalvageResult, salvage

TEXT_LIMIT = 25


def run(args) -> int:
    refuse_remote(args.broken, "salvage reads every byte of a damaged file from disk; download it first")
    refuse_remote(args.out, LOCAL_OUTPUT)
    result = salvage(args.broken, args.out)
    emit(render(result, getattr(args, "format", "text")), getattr(args, "output", None))
    return exit_for(bool(result.missing or result.unsafe), getattr(args, "fail_on", "error"))


def render(r: SalvageResult, fmt: str) -> str:
    total = len(r.recovered) + len(r.missing)
    head = f"salvage {r.source} -> {r.out} ({r.out_format}): "
    head += f"{len(r.recovered)} of {total} tensors recovered bit-exact, {len(r.missing)} missing"
    if fmt == "json":
        summary = {"tensors": total, "recovered": len(r.recovered), "missing": len(r.missing)}
        return json.dumps(envelope("salvage", **r.to_json(), summary=summary), indent=2)
    if fmt == "markdown":
        lines = [f"## {md_text(head)}", ""]
        if r.missing:
            lines += ["| missing tensor | why |", "|---|---|"]
            lines += [f"| {md_code(n)} | {md_text(w)} |" for n, w in r.missing] + [""]
        lines += [f"- dropped {md_code(p)}: {md_text(w)}" for p, w in r.dropped]
        lines += [f"- {md_text(n)}" for n in r.notes]
        return "\n".join(lines)
    lines = [head]
    lines += [f"  missing  {n}: {w}" for n, w in r.missing[:TEXT_LIMIT]]
    if len(r.missing) > TEXT_LIMIT:
        lines.append(f"  ... and {len(r.missing) - TEXT_LIMIT} more missing (--format json lists all)")
    lines += [f"  dropped  {p}: {w}" for p, w in r.dropped]
    lines += [f"  note     {n}" for n in r.notes]
    if r.missing:
        lines.append(f"wrote {r.out_bytes} bytes; the missing tensors must come from another checkpoint")
    else:
        lines.append(f"wrote {r.out_bytes} bytes; nothing was lost")
    return "\n".join(terminal_safe(line) for line in lines)  # names come from the file: no control sequences
