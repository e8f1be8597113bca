"""The tiny app module the TUI tests import: the same `create_app` the CLI uses, over fixture data.

`FixtureBackend` serves hand-built Checkpoints by path and stands in for core functions that are
not in this checkout yet (it uses the real ones as soon as they are).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ckinspect.model import GROUPS, Checkpoint
from ckinspect.tui.app import CkinspectApp, create_app
from ckinspect.tui.core import Backend, GroupBytes, NotAvailable, ScanOutcome

from tests.tui.fixtures import DEMO_B_PATH, DEMO_PATH, demo_checkpoint


def _values(ckpt: Checkpoint, name: str) -> np.ndarray:
    t = ckpt.tensor(name)
    s = ckpt.storages[t.storage_key]
    raw = Path(s.file).read_bytes()[s.offset : s.offset + s.nbytes]
    return np.frombuffer(raw, dtype="<f4" if t.dtype == "float32" else "|u1").astype(np.float64)


@dataclass
class FakePlan:
    actions: list[dict[str, Any]] = field(default_factory=list)


class FixtureBackend(Backend):
    def __init__(self, checkpoints: dict[Path, Checkpoint], *, use_real: bool = True) -> None:
        self.checkpoints = checkpoints
        self.use_real = use_real
        self.applied: list[Any] = []
        self.undone = 0

    def load(self, target: Path, progress=None) -> Checkpoint:
        return self.checkpoints[Path(target)]

    def scan(self, ckpt: Checkpoint, progress=None) -> ScanOutcome:
        return ScanOutcome([], {})  # the fixtures carry their value findings already

    def find(self, paths: list[Path]) -> list[Path]:
        return list(self.checkpoints)

    def group_bytes(self, ckpt: Checkpoint) -> GroupBytes:
        if self.use_real:
            try:
                return super().group_bytes(ckpt)
            except NotAvailable:
                pass
        sizes = {g: 0 for g in GROUPS}
        counts = {g: 0 for g in GROUPS}
        seen: set[str] = set()
        for t in ckpt.tensors:
            counts[t.group] += 1
            if t.storage_key not in seen:
                seen.add(t.storage_key)
                sizes[t.group] += ckpt.storages[t.storage_key].nbytes
        total = sum(sizes.values())
        return GroupBytes(sizes, counts, sizes["optimizer"] / total if total else 0.0, total)

    def match_names(self, a: Checkpoint, b: Checkpoint):
        return super().match_names(a, b) if self.use_real else None

    def diff(self, a: Checkpoint, b: Checkpoint, progress=None) -> Any:
        if self.use_real:
            try:
                return super().diff(a, b, progress)
            except NotAvailable:
                pass
        names_b = {t.name for t in b.tensors}
        names_a = {t.name for t in a.tensors}
        changed, same = [], 0
        for t in a.tensors:
            other = b.tensor(t.name)
            if other is None:
                continue
            if other.shape != t.shape or other.dtype != t.dtype:
                changed.append({"name": t.name, "reason": "shape" if other.shape != t.shape else "dtype", "max_abs_diff": None})
                continue
            delta = np.abs(_values(a, t.name) - _values(b, t.name))
            worst = float(np.nanmax(delta)) if delta.size and not np.all(np.isnan(delta)) else 0.0
            if worst > 0:
                changed.append({"name": t.name, "reason": "values", "max_abs_diff": worst})
            else:
                same += 1
        only_a = sorted(names_a - names_b)
        only_b = sorted(names_b - names_a)
        return {"a": str(a.path), "b": str(b.path), "identical": not (changed or only_a or only_b),
                "only_a": only_a, "only_b": only_b, "same": same, "changed": changed}

    def weight_drift(self, ckpt: Checkpoint, progress=None) -> Any:
        if self.use_real:
            try:
                return super().weight_drift(ckpt, progress)
            except NotAvailable:
                pass
        rows = []
        for t in ckpt.tensors:
            if t.group != "model" or t.dtype != "float32":
                continue
            v = _values(ckpt, t.name)
            v = v[np.isfinite(v)]
            with np.errstate(over="ignore"):
                fp16 = np.abs(v.astype(np.float16).astype(np.float64) - v)
            rows.append({"name": t.name, "dtype": t.dtype, "fp16_max_abs": float(np.nanmax(np.where(np.isinf(fp16), np.nan, fp16))),
                         "fp16_overflow": int(np.isinf(fp16).sum())})
        return rows

    def logit_drift(self, ckpt: Checkpoint) -> Any:
        if self.use_real:
            return super().logit_drift(ckpt)
        raise NotAvailable("the fixture has no model to run")

    def plan_repairs(self, path: Path) -> Any:
        if self.use_real:
            try:
                return super().plan_repairs(path)
            except NotAvailable:
                pass
        return FakePlan([
            {"action": "set-aside", "tmp": Path(path) / "step_30_resume.pth.tmp",
             "reason": "partial tmp (zip directory missing) beside an intact main file"},
            {"action": "promote", "tmp": Path(path) / "step_60_resume.pth.tmp",
             "reason": "complete tmp (step 60) is newer than the main file (step 30); the old main is kept aside"},
        ] if not self.applied else [])

    def apply_plan(self, plan: Any) -> Any:
        if self.use_real:
            try:
                return super().apply_plan(plan)
            except NotAvailable:
                pass
        self.applied.append(plan)
        return {"applied": len(plan.actions)}

    def undo(self, folder: Path) -> Any:
        if self.use_real:
            try:
                return super().undo(folder)
            except NotAvailable:
                pass
        self.undone += 1
        self.applied.clear()
        return {"restored": 2}


def demo_backend(data_dir: Path, *, use_real: bool = True) -> FixtureBackend:
    a = demo_checkpoint(data_dir)
    b = demo_checkpoint(data_dir, path=DEMO_B_PATH, nudge=1e-3, drop=("model.layers.1.ffn_norm.weight",), extra=True, with_findings=False)
    b.metadata["step"] = 60
    return FixtureBackend({DEMO_PATH: a, DEMO_B_PATH: b}, use_real=use_real)


def make_app(command: str, paths: list[Path], data_dir: Path, *, theme: str = "textual-dark", use_real: bool = True) -> CkinspectApp:
    return create_app(command, paths, backend=demo_backend(data_dir, use_real=use_real), theme=theme, cursor_blink=False)
