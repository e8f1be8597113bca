"""Accelerate: a `save_state` folder judged after the save, and the resume from the last good one.

    location = accelerator.save_state()
    verify_state(accelerator, location, fail_on="error")        # waits for every process, judges on the main one
    ...
    accelerator.load_state(ckinspect.last_good(checkpoints_dir))

Or off the training loop's thread: `checker = StateVerifier(accelerator)`, then `checker.after_save(location)`
after each save, `checker.check()` where the loop may stop (each step) and `checker.wait()` at the end.
Nothing from accelerate is imported: the helpers call the Accelerator they are given.
"""

from __future__ import annotations

import os

from ckinspect.integrations.verifier import Verifier

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckinspect.api import Candidate


def verify_state(
    accelerator: Any, location: str | os.PathLike[str], *, fail_on: str | None = "error", verify: bool = True
) -> Candidate | None:
    """Judge the folder `save_state` has just written, on the main process, after every process saved its
    part (`random_states_K.pkl` ...). Logs the verdict; with `fail_on`, raises CheckpointRejected naming the
    finding. Returns the verdict on the main process, None on the others."""
    accelerator.wait_for_everyone()
    if not accelerator.is_main_process:
        return None
    verifier = Verifier(fail_on=fail_on, verify=verify, background=False)
    verifier.submit(location)
    verifier.check()
    return verifier.verdicts[-1]


class StateVerifier:
    """`verify_state` on a worker thread: `after_save(location)` returns at once, `check()` (each step)
    logs the verdicts that are in and raises under `fail_on`, `wait()` waits for them all."""

    def __init__(
        self, accelerator: Any, *, fail_on: str | None = "error", verify: bool = True, background: bool = True
    ) -> None:
        self.accelerator = accelerator
        self.verifier = Verifier(fail_on=fail_on, verify=verify, background=background)

    @property
    def verdicts(self) -> list[Candidate]:
        return self.verifier.verdicts

    def after_save(self, location: str | os.PathLike[str]) -> None:
        self.verifier.wait()  # the previous save's verdict first: save_state's total_limit may remove it next
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            self.verifier.submit(location)

    def check(self) -> None:
        self.verifier.check()

    def wait(self) -> None:
        try:
            self.verifier.wait()
        finally:
            self.verifier.close()
