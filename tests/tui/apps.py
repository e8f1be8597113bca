"""The tiny app module the TUI tests import: the same `create_app` the CLI uses, over fixture data.

`FixtureBackend` serves hand-built Checkpoints by fixed, relative paths (so nothing about this machine
is drawn). Anatomy, diff and weight drift are the real core on the fixtures' raw storage files; only
what would need a real folder or a model is stood in for: the repair plan of `runs/demo/` (real
RepairPlan objects, nothing moved) and the logit drift.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ckinspect.analysis.leftovers import Leftover
from ckinspect.model import Checkpoint
from ckinspect.ops.repair import ApplyResult, RepairAction, RepairPlan, UndoResult
from ckinspect.tui.app import CkinspectApp, create_app
from ckinspect.tui.core import Backend, ScanOutcome
from tests.tui.fixtures import DEMO_B_PATH, DEMO_PATH, demo_checkpoint


class FixtureBackend(Backend):
    def __init__(self, checkpoints: dict[Path, Checkpoint]) -> None:
        self.checkpoints = checkpoints
        self.applied: list[RepairPlan] = []
        self.undone = 0

    def load(self, target: Path) -> Checkpoint:
        return self.checkpoints[Path(target)]

    def scan(self, ckpt: Checkpoint, progress=None) -> ScanOutcome:
        return ScanOutcome([], {})  # the fixtures carry their value findings already

    def find(self, paths: list[Path]) -> list[Path]:
        return list(self.checkpoints)

    def logit_drift(self, ckpt: Checkpoint, progress=None) -> tuple[Any, str]:
        return None, "the fixture has no model to run"

    def plan_repairs(self, path: Path) -> RepairPlan:
        folder = Path(path)
        if self.applied:
            return RepairPlan(folder)
        return RepairPlan(
            folder,
            [
                RepairAction(
                    "set-aside",
                    Leftover(folder / "step_30_resume.pth.tmp", folder / "step_30_resume.pth"),
                    None,
                    "partial tmp (zip directory missing) beside an intact main file",
                ),
                RepairAction(
                    "promote",
                    Leftover(folder / "step_60_resume.pth.tmp", folder / "step_60_resume.pth"),
                    None,
                    "complete tmp (step 60) is newer than the main file (step 30); the old main is kept aside",
                ),
            ],
        )

    def apply_plan(self, plan: RepairPlan) -> ApplyResult:
        self.applied.append(plan)
        for action in plan.pending:
            action.state = "done"
        return ApplyResult(plan, "fixture-run")

    def undo(self, folder: Path) -> UndoResult:
        self.undone += 1
        self.applied.clear()
        return UndoResult("fixture-run", restored=["step_30_resume.pth.tmp", "step_60_resume.pth.tmp"])


def demo_backend(data_dir: Path) -> FixtureBackend:
    a = demo_checkpoint(data_dir)
    b = demo_checkpoint(
        data_dir,
        path=DEMO_B_PATH,
        nudge=1e-3,
        drop=("model.layers.1.ffn_norm.weight",),
        extra=True,
        with_findings=False,
    )
    b.metadata["step"] = 60
    return FixtureBackend({DEMO_PATH: a, DEMO_B_PATH: b})


def make_app(command: str, paths: list[Path], data_dir: Path, *, theme: str = "ckinspect-dark") -> CkinspectApp:
    return create_app(command, paths, backend=demo_backend(data_dir), theme=theme, cursor_blink=False)


async def settle(pilot) -> None:
    """Let the app finish what it started: mount, the loading worker, and the redraw after it."""
    await pilot.pause()
    await workers_done(pilot.app)
    await pilot.pause()


async def workers_done(app) -> None:
    """Every worker the app has now, finished. One cancelled on the way (an exclusive worker replaced by a
    newer one, its screen dismissed) is finished too: Textual's `wait_for_complete` raised WorkerCancelled
    for it, which made the repair test fail once on a loaded machine. A worker that
    failed still raises."""
    import contextlib

    from textual.worker import WorkerCancelled

    for worker in list(app.workers):
        with contextlib.suppress(WorkerCancelled):
            await worker.wait()


class PausedBackend:
    """The real backend, for a test that pauses a long step part way (`paused` set by the step, `release`
    set by the test) to see what the screen shows meanwhile; subclasses override the step they pause."""

    def __init__(self) -> None:
        import threading

        from ckinspect.tui.core import Backend

        self.real = Backend()
        self.paused = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name):
        return getattr(self.real, name)
