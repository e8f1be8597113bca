"""`ckinspect watch --report`: one line per checkpoint event, as text or as a JSON object (JSON lines).

Renders `Event.to_json()` (jobs.watch), so the text line and the JSON line hold the same data:

    [3] step 30 tiny_step000030 dcp: good  Δstep 10  update model 2.10e-02 optimizer 8.02e-02  0.4 s after save
    [4] step 40 tiny_step000040 dcp: damaged  NONFINITE_ONSET (error): NaN/Inf first appears at step 40 ...
    [7] step 4 checkpoint_1 accelerate: damaged  (judged again: the run's other saves ...)  | PARTS_DISAGREE ...
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from ckinspect.fmt import terminal_safe

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

IN_PROGRESS_TEXT = "still being written"
REJUDGED_TEXT = "judged again: the run's other saves changed what they tell of it"


def json_line(event: Mapping[str, Any]) -> str:
    return json.dumps({"schema": 1, "tool": "ckinspect", "command": "watch", **event}, separators=(",", ":"))


def text_line(event: Mapping[str, Any], run_dir: str) -> str:
    step = f"step {event['step']}" if event.get("step") is not None else "step ?"
    head = f"[{event['index']}] {step} {shown(event['path'], run_dir)} {event['framework']}"
    if event["event"] == "in-progress":
        return f"{head}: {IN_PROGRESS_TEXT} (not judged)"
    words = [f"{head}: {event['verdict']}"]
    if event["event"] == "abandoned":
        words.append("(save never finished; its writer is gone)")
    if event["event"] == "rejudged":
        words.append(f"({REJUDGED_TEXT})")
    updates = event.get("updates")
    if updates:
        if updates.get("step_delta") is not None:
            words.append(f"Δstep {updates['step_delta']}")
        ratios = [f"{group} {ratio_text(norms['ratio'])}" for group, norms in updates["groups"].items()]
        if ratios:
            words.append("update " + " ".join(ratios))
        moments = updates.get("moments", {})
        if "exp_avg_sq" in moments and moments["exp_avg_sq"]["rms"] is not None:
            words.append(f"exp_avg_sq rms {moments['exp_avg_sq']['rms']:.2e}")
    words.append(f"{event['seconds_after_save']:.1f} s after save")
    by_code: dict[str, list[Mapping[str, Any]]] = {}
    for finding in event["findings"]:
        by_code.setdefault(finding["code"], []).append(finding)
    for code, findings in by_code.items():  # one line: each code once, its first message, how many more
        more = f" (+{len(findings) - 1} more)" if len(findings) > 1 else ""
        words.append(f"| {code} ({findings[0]['severity']}): {terminal_safe(findings[0]['message'])}{more}")
    return "  ".join(words)


def ratio_text(ratio: float | str | None) -> str:
    if ratio is None:
        return "-"
    if isinstance(ratio, str):
        return ratio
    return f"{ratio:.2e}"


def shown(path: str, run_dir: str) -> str:
    try:
        relative = Path(path).relative_to(run_dir)
    except ValueError:
        return terminal_safe(path)
    return terminal_safe(str(relative) if str(relative) != "." else Path(path).name)
