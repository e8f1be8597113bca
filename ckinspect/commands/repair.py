"""`ckinspect repair PATH [--apply | --undo]`: the plan for interrupted saves, its application, its undo.

Exit status:
  0  nothing to do (no leftover tmp), everything applied, or the undo restored everything
  1  something needs the user: a dry run with actions pending (run with --apply), a pair left
     alone because it is unsure (reason given), an action that failed or was skipped, an undo
     that could not put something back. `--fail-on never` turns these into 0.
  2  usage or internal error
A dry run pending actions exits 1 on purpose: CI that runs `ckinspect repair DIR` must notice that
an interrupted save is lying there, the same way `--report` exits 1 on its LEFTOVER_TMP finding.
"""

from __future__ import annotations

import json
from pathlib import Path

from ckinspect.commands.emit import emit, envelope, exit_for, render_ci
from ckinspect.fmt import md_code, md_text, terminal_safe
from ckinspect.io.remote import refuse_remote
from ckinspect.ops.repair import RepairPlan, apply_plan, plan_repairs, undo
from ckinspect.vocab import CkinspectError

_VERB = {
    "promote": "promote",
    "promote-keep-old": "promote, keep old",
    "set-aside": "set aside",
    "nothing": "leave alone",
}


def run(args) -> int:
    refuse_remote(args.path, "repair moves and rewrites files in a local folder; a remote path is read-only here")
    path = Path(args.path)
    fmt = getattr(args, "format", "text")
    fail_on = getattr(args, "fail_on", "error")
    if getattr(args, "undo", False):
        return _run_undo(args, path, fmt, fail_on)
    plan = plan_repairs(path)
    mode = "apply" if getattr(args, "apply", False) else "dry-run"
    quarantines: list[Path] = []
    if mode == "apply" and plan.pending:
        quarantines = apply_plan(plan).quarantines
    if fmt in ("sarif", "junit"):
        from ckinspect.report.subjects import from_repair

        # every leftover still lying there fails the testcase, as it makes the exit status 1
        fail_on = "never" if fail_on == "never" else "warning"
        text = render_ci(fmt, from_repair(plan, _VERB), args, f"ckinspect repair {plan.path}", fail_on=fail_on)
    else:
        text = _render_plan(plan, mode, quarantines, fmt)
    emit(text, getattr(args, "output", None))
    return exit_for(_needs_attention(plan, mode), fail_on)


def _run_undo(args, path: Path, fmt: str, fail_on: str) -> int:
    if fmt in ("sarif", "junit"):
        raise CkinspectError(f"--undo reports what it restored as text, json or markdown, not {fmt}")
    if not path.exists() and not path.parent.is_dir():
        raise CkinspectError(f"{path}: no such file or folder")
    result = undo(path)
    emit(_render_undo(path, result, fmt), getattr(args, "output", None))
    return exit_for(bool(result.problems), fail_on)


def _needs_attention(plan: RepairPlan, mode: str) -> bool:
    """A leftover left alone, an action that failed, or (a dry run) one still to carry out."""
    attention = bool(plan.undecided) or any(a.state in ("failed", "skipped") for a in plan.actions)
    return attention or (mode == "dry-run" and bool(plan.pending))


def _short(plan: RepairPlan, path: Path) -> str:
    """A path relative to the folder the user named (absolute paths stay in the JSON)."""
    base = plan.path if plan.path.is_dir() else plan.path.parent
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


def _summary(plan: RepairPlan) -> dict:
    return {
        "leftovers": len(plan.actions),
        "pending": len(plan.pending),
        "done": sum(a.state == "done" for a in plan.actions),
        "left_alone": len(plan.undecided),
        "failed": sum(a.state in ("failed", "skipped") for a in plan.actions),
    }


def _render_plan(plan: RepairPlan, mode: str, quarantines: list[Path], fmt: str) -> str:
    summary = _summary(plan)
    if fmt == "json":
        doc = envelope("repair", mode=mode, **plan.to_json(), quarantine=[str(q) for q in quarantines], summary=summary)
        return json.dumps(doc, indent=2)
    title = f"repair {plan.path} ({'dry run: nothing changed' if mode == 'dry-run' else 'applied'})"
    if not plan.actions:
        if fmt == "text":
            return terminal_safe(title) + "\nno leftover temporaries: nothing to repair"
        return f"## {md_text(title)}\n\nNo leftover temporaries: nothing to repair."
    if fmt == "markdown":
        return "\n".join(_plan_markdown(plan, title, quarantines))
    return "\n".join(_plan_text(plan, mode, title, quarantines, summary))


def _plan_markdown(plan: RepairPlan, title: str, quarantines: list[Path]) -> list[str]:
    lines = [f"## {md_text(title)}", ""]
    lines += ["| action | tmp | main | found | why | state |", "|---|---|---|---|---|---|"]
    for a in plan.actions:
        found = a.status.explain() if a.status else ""
        why = a.reason + (f" ({a.note})" if a.note else "")
        tmp, main = md_code(_short(plan, a.leftover.tmp)), md_code(_short(plan, a.leftover.main))
        found, why = md_text(found), md_text(why)
        lines.append(f"| {_VERB[a.action]} | {tmp} | {main} | {found} | {why} | {a.state} |")
    lines.append("")
    for q in quarantines:
        lines.append(f"Quarantine: {md_code(q)} (undo with {md_code(f'ckinspect repair {plan.path} --undo')})")
    return lines


def _plan_text(plan: RepairPlan, mode: str, title: str, quarantines: list[Path], summary: dict) -> list[str]:
    lines = [title]
    for a in plan.actions:
        state = f" [{a.state}]" if mode == "apply" and a.action != "nothing" else ""
        lines.append(f"  {_VERB[a.action]:<18}{_short(plan, a.leftover.tmp)}{state}")
        if a.status is not None:
            lines.append(f"  {'':<18}{a.status.explain()}")
        lines.append(f"  {'':<18}-> {a.reason}" + (f" ({a.note})" if a.note else ""))
    for q in quarantines:
        lines.append(f"quarantine: {q}  (undo: ckinspect repair {plan.path} --undo)")
    lines.append(_plan_tail(plan, mode, summary))
    return [terminal_safe(line) for line in lines]  # file names come from the folder: no control sequences


def _plan_tail(plan: RepairPlan, mode: str, s: dict) -> str:
    tail = f"{s['leftovers']} leftover(s): "
    if mode != "dry-run":
        return tail + f"{s['done']} done, {s['left_alone']} left alone, {s['failed']} failed"
    tail += f"{s['pending']} action(s) pending, {s['left_alone']} left alone"
    if s["pending"]:
        tail += f"; run `ckinspect repair {plan.path} --apply` to carry them out"
    return tail


def _render_undo(path: Path, result, fmt: str) -> str:
    if fmt == "json":
        doc = envelope(
            "repair",
            mode="undo",
            path=str(path),
            run=result.run_id,
            restored=result.restored,
            problems=result.problems,
            manifests=[str(m) for m in result.manifests],
        )
        return json.dumps(doc, indent=2)
    if result.run_id is None:
        text = f"undo {path}: no applied repair to undo"
        return terminal_safe(text) if fmt == "text" else f"## {md_text(text)}"
    head = f"undo {path}: run {result.run_id}, {len(result.restored)} move(s) put back"
    head += f", {len(result.problems)} problem(s)"
    shown = md_text if fmt == "markdown" else terminal_safe  # paths and messages come from the folder
    bullet = "  " if fmt == "text" else "- "
    lines = [f"## {shown(head)}", ""] if fmt == "markdown" else [shown(head)]
    lines += [f"{bullet}restored {shown(r)}" for r in result.restored]
    lines += [f"{bullet}NOT restored: {shown(p)}" for p in result.problems]
    return "\n".join(lines)
