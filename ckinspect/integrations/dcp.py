"""torch.distributed.checkpoint: a `dcp.save` folder judged, and a verdict attached to `dcp.async_save`.

    dcp.save(state, checkpoint_id=folder)
    verify_dcp(folder, fail_on="error")                  # on the rank that asks (rank 0): after dcp.save returns,
                                                         # .metadata and every rank's data file are written
    future = dcp.async_save(state, checkpoint_id=folder)
    verdict = verify_async_save(future, folder)           # a Future: the save's completion, then the verdict
    ...
    verdict.result()                                      # Candidate, or raises CheckpointRejected / the save's error

Nothing from torch is imported here: the futures are concurrent.futures.Future (what async_save returns,
or the `upload_completion` of its AsyncSaveResponse).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future

from ckinspect.integrations.verifier import Verifier

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckinspect.api import Candidate


def verify_dcp(
    checkpoint_id: str | os.PathLike[str], *, fail_on: str | None = "error", verify: bool = True
) -> Candidate:
    """Judge a DCP folder `dcp.save` has written (every file its `.metadata` names, each item's bytes); logs
    the verdict and, with `fail_on`, raises CheckpointRejected naming the finding."""
    verifier = Verifier(fail_on=fail_on, verify=verify, background=False)
    verifier.submit(checkpoint_id)
    verifier.check()
    return verifier.verdicts[-1]


def verify_async_save(
    saving: Any, checkpoint_id: str | os.PathLike[str], *, fail_on: str | None = "error", verify: bool = True
) -> Future[Candidate]:
    """A Future of the verdict on what `dcp.async_save` is writing: judged on a worker thread once the
    save completes (`saving`: its Future, or its AsyncSaveResponse). The result is the Candidate; with
    `fail_on`, a rejected save's Future raises CheckpointRejected; a save that failed raises its error."""
    upload: Future[Any] = getattr(saving, "upload_completion", saving)
    verdict: Future[Candidate] = Future()

    def judge() -> None:
        try:
            verdict.set_result(verify_dcp(checkpoint_id, fail_on=fail_on, verify=verify))
        except Exception as exc:  # noqa: BLE001 - the rejection (or the judge's error) is the verdict's
            verdict.set_exception(exc)

    def saved(done: Future[Any]) -> None:
        error = done.exception()
        if error is not None:
            verdict.set_exception(error)
        else:  # on a thread of ours, not on the one that finished the upload
            threading.Thread(target=judge, name="ckinspect-verify", daemon=True).start()

    upload.add_done_callback(saved)
    return verdict
