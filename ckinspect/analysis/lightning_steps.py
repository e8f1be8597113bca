"""Lightning's step counters held against each other: PARTS_DISAGREE where one records another save.

A Lightning checkpoint records its progress three times: `global_step` and `epoch` at the top ("saved for
compatibility but not relevant for restoration", checkpoint_connector.dump_checkpoint), the loop state the
trainer restores and counts on from (`loops.fit_loop`, lightning/pytorch/loops/), and each optimizer's own
per-parameter `step`. What must agree, from Lightning's own code:

- `global_step` is the optimizer-step counter of the mode that ran (`_TrainingEpochLoop.global_step`):
  automatic optimization's `optimizer.step` progress, or manual optimization's `optim_step_progress`,
  which counts every `step()` of every optimizer (two optimizers: their steps summed). A mode switched on
  resume leaves the other's count, so global_step must equal one of the two.
- Automatic optimization steps its one optimizer once per counted step: the optimizer's per-parameter step
  equals it, or, under AMP (a scaler state), falls behind by the steps the scaler skipped. Gradient
  accumulation steps once per several batches (and on an epoch's last batch), so batches only bound it:
  no optimizer step without a batch processed. Manual optimization steps as the user's code says: no
  relation to the batches or to one optimizer is assumed, and global_step is not held against an optimizer's
  step (a user who steps the raw optimizer, `self.optimizers(use_pl_optimizer=False).step()`, leaves every
  loop counter and global_step at 0 while the optimizer's step grows). The loops keep no flag for the mode:
  where neither optimization counter has moved, the mode is unknown and judged as manual; a save without
  loops (an older Lightning) is held as automatic.
- Automatic optimization steps each scheduler as its interval and frequency say and counts every such step
  in `scheduler_progress` (`_TrainingEpochLoop._update_learning_rates`); a torch scheduler's `last_epoch`
  counts its own steps from 0, so the schedulers' `last_epoch` add up to that count. Manual optimization
  steps them in the user's code, uncounted.
- `_batches_that_stepped` (the step loggers log at) grows once per batch that ends in an optimizer step:
  automatic optimization's step count, manual optimization's batches (it never accumulates); a save made
  inside a batch is one behind.
- `epoch` is `trainer.current_epoch`, the loop's `epoch_progress.current.completed`. A save at an epoch's
  end has processed the epoch but not completed it (both `epoch=0`); the counters compared are the ones
  Lightning itself reads, so mid-epoch, validation and epoch-end saves agree alike.
"""

from __future__ import annotations

from collections.abc import Mapping

from ckinspect.analysis.layouts import Layout, optimizer_step, top_mapping
from ckinspect.model import Checkpoint, Finding

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

# Where Lightning 2.x keeps each counter under `loops.fit_loop` (key paths as its state_dict nests them).
AUTOMATIC_STEPS = ("epoch_loop.automatic_optimization.optim_progress", "optimizer", "step", "total", "completed")
MANUAL_STEPS = ("epoch_loop.manual_optimization.optim_step_progress", "total", "completed")
BATCHES = ("epoch_loop.batch_progress", "total", "processed")
SCHEDULER_STEPS = ("epoch_loop.scheduler_progress", "total", "completed")
EPOCH = ("epoch_progress", "current", "completed")
STEPPED_BATCHES = ("epoch_loop.state_dict", "_batches_that_stepped")  # the step loggers log at
AMP_STATE = "native_amp_scaling_state"  # the precision plugin's GradScaler state
_LOOPS = "loops.fit_loop."
_FROM_ANOTHER_SAVE = "the loop state comes from another save"


def _counter(fit_loop: Mapping[str, Any], path: tuple[str, ...]) -> int | None:
    node: Any = fit_loop
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node if isinstance(node, int) and not isinstance(node, bool) else None


def _where(path: tuple[str, ...]) -> str:
    return _LOOPS + ".".join(path)


def _plain(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _optimizer_says(recorded: float, prefix: str) -> str:
    return f"the optimizer's per-parameter step is {_plain(recorded)} ({prefix}state.*.step)"


def _agrees(optimizer: float, counted: int, behind_ok: bool) -> bool:
    return optimizer == counted or (behind_ok and optimizer < counted)


def step_findings(ckpt: Checkpoint, layout: Layout) -> list[Finding]:
    """Lightning: global_step, the loops' counters and epoch against each other and against the one
    optimizer's per-parameter step; a disagreement names both values."""
    top = top_mapping(ckpt)
    step = ckpt.metadata.get("step")
    if layout.name != "lightning" or top is None or not isinstance(step, int) or isinstance(step, bool):
        return []
    prefix, recorded = _one_optimizer(ckpt, layout)
    behind_ok = AMP_STATE in top
    fit_loop = _fit_loop(top)
    findings = _optimizer_findings(step, (recorded, prefix, behind_ok), fit_loop)
    if fit_loop is None:
        return findings
    if not findings:  # an optimizer from another save is said once, not again against each counter
        findings += _loop_findings(fit_loop, step, (recorded, prefix, behind_ok))
    findings += _epoch_findings(fit_loop, ckpt.metadata.get("epoch"))
    if not findings:  # loops from another save disagree with the schedulers too: said once, above
        findings += _scheduler_findings(fit_loop, top.get("lr_schedulers"))
    return findings


def _optimizer_findings(
    step: int, optimizer: tuple[Any, str, bool], fit_loop: Mapping[str, Any] | None
) -> list[Finding]:
    """global_step against the one optimizer's step, unless manual optimization may have run."""
    recorded, prefix, behind_ok = optimizer
    if recorded is None or _maybe_manual(fit_loop) or _agrees(recorded, step, behind_ok):
        return []
    message = (f"global_step is {step} but {_optimizer_says(recorded, prefix)}: the optimizer state comes "
               "from another save")  # fmt: skip
    return [Finding("PARTS_DISAGREE", message, f"{prefix}state")]


def _one_optimizer(ckpt: Checkpoint, layout: Layout) -> tuple[str, float | None]:
    """The prefix and per-parameter step of the checkpoint's one optimizer; ("", None) with several or none."""
    if len(layout.optimizers) != 1:
        return "", None
    prefix, opt = layout.optimizers[0]
    return prefix, optimizer_step(ckpt, opt)


def _fit_loop(top: Mapping[str, Any]) -> Mapping[str, Any] | None:
    loops = top.get("loops")
    fit_loop = loops.get("fit_loop") if isinstance(loops, Mapping) else None
    return fit_loop if isinstance(fit_loop, Mapping) else None


def _maybe_manual(fit_loop: Mapping[str, Any] | None) -> bool:
    """The loops say manual optimization may have run: its counter moved, or neither mode's has (the raw
    optimizer stepped, uncounted). False without loops or without both counters: held as automatic."""
    automatic, manual = (None, None) if fit_loop is None else (_counter(fit_loop, AUTOMATIC_STEPS),
                                                               _counter(fit_loop, MANUAL_STEPS))  # fmt: skip
    return automatic is not None and manual is not None and (manual > 0 or automatic == 0)


def _loop_findings(fit_loop: Mapping[str, Any], step: int, optimizer: tuple[Any, str, bool]) -> list[Finding]:
    automatic, manual = _counter(fit_loop, AUTOMATIC_STEPS), _counter(fit_loop, MANUAL_STEPS)
    if automatic is None or manual is None:
        return []  # another Lightning's loop layout: nothing is assumed of it
    if step in (automatic, manual):
        found = [] if _maybe_manual(fit_loop) else _batch_findings(fit_loop, automatic, optimizer[0])
        return found or _stepped_batches_findings(fit_loop, automatic)
    return _counter_findings(automatic, manual, step, optimizer)


def _stepped_batches_findings(fit_loop: Mapping[str, Any], automatic: int) -> list[Finding]:
    """`_batches_that_stepped` (what the loggers log at) grows once per batch that ends in an optimizer step
    (_TrainingEpochLoop): automatic optimization's steps; under manual optimization, which never accumulates,
    every batch. A save made inside a batch (a step or validation callback) is one behind, and a resume
    from one counts that batch again: within one of the count it agrees."""
    stepped = _counter(fit_loop, STEPPED_BATCHES)
    path: tuple[str, ...]
    if _maybe_manual(fit_loop):
        counted, path, what = _counter(fit_loop, BATCHES), BATCHES, "training batches processed"
    else:
        counted, path, what = automatic, AUTOMATIC_STEPS, "optimizer steps"
    if stepped is None or counted is None or abs(stepped - counted) <= 1:
        return []
    message = (f"the loops record {stepped} batches that stepped ({_where(STEPPED_BATCHES)}) but {counted} {what} "
               f"({_where(path)}), one for each: {_FROM_ANOTHER_SAVE}")  # fmt: skip
    return [Finding("PARTS_DISAGREE", message, "loops")]


def _counter_findings(automatic: int, manual: int, step: int, optimizer: tuple[Any, str, bool]) -> list[Finding]:
    """The loops' optimizer-step count is not global_step: held against the optimizer where it has one."""
    recorded, prefix, behind_ok = optimizer if manual == 0 else (None, "", False)
    if recorded is not None and _agrees(recorded, automatic, behind_ok):
        return []  # global_step is the odd one out: said against the optimizer already
    counted, path = (manual, MANUAL_STEPS) if manual and not automatic else (automatic, AUTOMATIC_STEPS)
    against = "" if recorded is None else f"{_optimizer_says(recorded, prefix)} and "
    message = (f"the loops record {counted} optimizer steps ({_where(path)}) but {against}global_step is {step}: "
               f"{_FROM_ANOTHER_SAVE}")  # fmt: skip
    return [Finding("PARTS_DISAGREE", message, "loops")]


def _batch_findings(fit_loop: Mapping[str, Any], automatic: int, recorded: float | None) -> list[Finding]:
    """Automatic optimization: no optimizer step without a training batch processed."""
    batches = _counter(fit_loop, BATCHES)
    stepped = recorded if recorded is not None else automatic
    if batches is None or stepped <= batches:
        return []
    message = (f"the optimizer has stepped {_plain(stepped)} times but the loops record {batches} training batches "
               f"processed ({_where(BATCHES)}), and each step takes at least one: {_FROM_ANOTHER_SAVE}")  # fmt: skip
    return [Finding("PARTS_DISAGREE", message, "loops")]


def _epoch_findings(fit_loop: Mapping[str, Any], epoch: Any) -> list[Finding]:
    counted = _counter(fit_loop, EPOCH)
    if counted is None or not isinstance(epoch, int) or isinstance(epoch, bool) or counted == epoch:
        return []
    message = f"epoch is {epoch} but the loops record epoch {counted} ({_where(EPOCH)}): {_FROM_ANOTHER_SAVE}"
    return [Finding("PARTS_DISAGREE", message, "loops")]


def _last_epochs(schedulers: Any) -> list[int] | None:
    """Each scheduler's last_epoch; None where one keeps none (not torch's: it says nothing)."""
    epochs = [s.get("last_epoch") if isinstance(s, Mapping) else None for s in schedulers or ()]
    counts = [e for e in epochs if isinstance(e, int) and not isinstance(e, bool)]
    return counts if counts and len(counts) == len(epochs) and isinstance(schedulers, list) else None


def _scheduler_findings(fit_loop: Mapping[str, Any], schedulers: Any) -> list[Finding]:
    counted, manual, epochs = (
        _counter(fit_loop, SCHEDULER_STEPS),
        _counter(fit_loop, MANUAL_STEPS),
        _last_epochs(schedulers),
    )
    if counted is None or manual != 0 or epochs is None or sum(epochs) == counted:
        return []
    each = "" if len(epochs) == 1 else f" ({' + '.join(map(str, epochs))})"
    message = (f"the schedulers' last_epoch come to {sum(epochs)}{each} (lr_schedulers.*.last_epoch) but the loops "
               f"record {counted} scheduler steps ({_where(SCHEDULER_STEPS)}): the scheduler state comes from "
               "another save")  # fmt: skip
    return [Finding("PARTS_DISAGREE", message, "lr_schedulers")]
