"""What only a run's other saves can tell of one save, decided from a few facts kept per save.

    context = RunContext()
    context.put(ckpt, order(ckpt))     # a judged checkpoint (parts listed): its facts kept, never its listings
    context.findings(ckpt.path)        # MISSING_PARTS, PARTS_DISAGREE, MIXED_RUN as the run's saves decide them

Three findings need the run, not the save alone:
- MISSING_PARTS: fewer files of a kind (rank RNG files, model files ...) than every other save of the same
  framework in the same folder (the counts its recogniser took from the folder's listing; `peer_findings`);
- PARTS_DISAGREE: an Accelerate save whose optimizer.bin or scheduler.bin is another save's, decidable only
  once two other saves keep one relation between their steps (accelerate_steps);
- MIXED_RUN: a model of other shapes than the run's newest save of the same framework (a restart with
  another model): resuming from it would cross from one run into another.
A save's facts are its place in the run (the order it was listed in), its file counts, its Accelerate steps
(four numbers) and its model's tensor shapes, interned (the saves of one model share one copy). So a run's
context grows by a few small records per save, never by a listing, and deciding these reads no save again.

last-good (analysis.runs.judge_run) fills one as it judges, newest first; watch (jobs.watch) keeps one over the
whole run and asks it again when a save comes or goes: both decide these findings with the same functions
over the same facts, so they agree on every save.
"""

from __future__ import annotations

from pathlib import Path

from ckinspect.analysis.runs import accelerate_steps
from ckinspect.analysis.runs.model import RunCheckpoint
from ckinspect.model import Finding
from ckinspect.record import Record, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ckinspect.analysis.runs.judge import Reader

Order = tuple[int, float, str]  # (step as listed, or -1; time; path): oldest first
Shapes = tuple[tuple[str, tuple[int, ...]], ...]  # a model's (tensor name, shape), sorted: hashable, interned


class SaveFacts(Record):
    """What the run-level findings need of one save."""

    __hash__ = None  # type: ignore[assignment]

    path: Path
    framework: str
    order: Order
    counts: dict[str, int] = field(default_factory=dict)
    steps: accelerate_steps.SaveSteps | None = None  # an Accelerate save's optimizer and scheduler steps
    model: Shapes | None = None  # its model's shapes, where its model parts read whole (None: not known)
    judged: bool = True  # False: only its Accelerate steps were read (last-good's older peers)

    @property
    def group(self) -> tuple[str, Path]:
        return (self.framework, self.path.parent)


class RunContext:
    """The facts of every save put so far, and the findings they decide (see the module docstring). What
    the saves decide together (each group's peer counts, each framework's newest model) is worked out once
    after a save comes or goes, so asking for every save's findings costs one pass over the facts."""

    def __init__(self) -> None:
        self.saves: dict[Path, SaveFacts] = {}
        self._models: dict[Shapes, tuple[Shapes, dict[str, tuple[int, ...]]]] = {}  # interned: the key, by name
        self._peers: dict[tuple[str, Path], Peers] | None = None  # per group; None: to work out again
        self._newest: dict[str, SaveFacts] = {}  # per framework: the newest save whose model is known

    def put(self, ckpt: RunCheckpoint, order: Order, reader: Reader | None = None) -> SaveFacts:
        """A judged checkpoint's facts (its parts listed: nothing is read), in place of any kept for its path."""
        steps = accelerate_steps.read_steps(ckpt, reader) if ckpt.framework == "accelerate" else None
        facts = SaveFacts(ckpt.path, ckpt.framework, order, dict(ckpt.counts), steps, self._intern(model_shapes(ckpt)))
        self._set(facts)
        return facts

    def put_steps(self, ckpt: RunCheckpoint, order: Order, reader: Reader) -> None:
        """An Accelerate save not judged yet: only its steps (its optimizer and scheduler listed through the
        reader, which keeps them for when it is judged)."""
        if ckpt.path not in self.saves:
            steps = accelerate_steps.read_steps(ckpt, reader)
            self._set(SaveFacts(ckpt.path, ckpt.framework, order, dict(ckpt.counts), steps, judged=False))

    def drop(self, path: Path) -> None:
        if self.saves.pop(path, None) is not None:
            self._changed()
            used = {id(s.model) for s in self.saves.values() if s.model is not None}
            self._models = {k: v for k, v in self._models.items() if id(v[0]) in used}

    def findings(self, path: Path, peers: bool = True) -> list[Finding]:
        """The run-level findings of the save at `path` (`peers`: with MISSING_PARTS against its peers'
        counts; last-good takes those from the run's listing, analysis.runs.collect, as they are the same)."""
        save = self.saves[path]
        out = self._peers_of(save).findings(save.counts) if peers and save.counts else []
        if save.steps is not None and not accelerate_steps.keeps_a_relation(save.steps):
            found = accelerate_steps.steps_disagree(save.steps, self._accelerate_peers(save))
            if found is not None:
                out.append(found)
        mixed = self._mixed_run(save)
        if mixed is not None:
            out.append(mixed)
        return out

    def _mixed_run(self, save: SaveFacts) -> Finding | None:
        newest = self._newest.get(save.framework)
        if save.model is None or newest is None or newest.model is None or newest.model is save.model:
            return None  # not known, or the newest's own model (the saves of one model share its shapes)
        return mixed_run(self._models[save.model][1], newest.path.name, self._models[newest.model][1])

    def _set(self, facts: SaveFacts) -> None:
        replaced = self.saves.get(facts.path)
        self.saves[facts.path] = facts
        self._peers = None
        newest = self._newest.get(facts.framework)
        if replaced is not None and newest is replaced:
            self._changed()  # the newest model was this path's: find it again
        elif facts.model is not None and (newest is None or facts.order > newest.order):
            self._newest[facts.framework] = facts

    def _changed(self) -> None:
        self._peers = None
        self._newest = {}
        for save in self.saves.values():
            newest = self._newest.get(save.framework)
            if save.model is not None and (newest is None or save.order > newest.order):
                self._newest[save.framework] = save

    def _peers_of(self, save: SaveFacts) -> Peers:
        if self._peers is None:
            groups: dict[tuple[str, Path], list[dict[str, int]]] = {}
            for other in self.saves.values():
                if other.counts:
                    groups.setdefault(other.group, []).append(other.counts)
            self._peers = {group: Peers(counts) for group, counts in groups.items()}
        return self._peers[save.group]

    def _accelerate_peers(self, save: SaveFacts) -> list[accelerate_steps.Other]:
        """The run's other Accelerate saves in the same folder that record their steps, newest first."""
        peers = [s for s in self.saves.values() if s is not save and s.group == save.group and s.steps is not None]
        return [(s.path, s.steps) for s in sorted(peers, key=lambda s: s.order, reverse=True) if s.steps is not None]

    def _intern(self, shapes: dict[str, tuple[int, ...]] | None) -> Shapes | None:
        """The shapes as a key shared by every save of the same model."""
        if shapes is None:
            return None
        key = tuple(sorted(shapes.items()))
        return self._models.setdefault(key, (key, shapes))[0]


class Peers:
    """The file counts of one group of saves (a framework's saves in one folder): for each kind, the fewest
    any save has and the fewest once that save is left out, so each save is held against the others at once."""

    def __init__(self, counts: list[dict[str, int]]) -> None:
        self.size = len(counts)
        self.kinds = sorted({kind for c in counts for kind in c})
        # per kind: (fewest, how many saves have that few, the fewest among the rest)
        self.least: dict[str, tuple[int, int, float]] = {}
        for kind in self.kinds:
            values = sorted(c.get(kind, 0) for c in counts)
            self.least[kind] = (values[0], values.count(values[0]), values[1] if len(values) > 1 else float("inf"))

    def findings(self, counts: dict[str, int]) -> list[Finding]:
        """MISSING_PARTS for each kind of file this save (one of the group) has fewer of than every other
        save of the group has: a rank file no record names, but every peer has. Judged with a peer or more."""
        if self.size < 2:
            return []
        out = []
        for kind in self.kinds:
            count = counts.get(kind, 0)
            fewest, ties, next_fewest = self.least[kind]
            others_fewest = next_fewest if count == fewest and ties == 1 else fewest
            if count < others_fewest:
                message = (f"{count} {kind} file(s), where the run's {self.size - 1} other checkpoint(s) each have "
                           f"{int(others_fewest)}: a part was never written")  # fmt: skip
                out.append(Finding("MISSING_PARTS", message))
        return out


def model_shapes(ckpt: RunCheckpoint) -> dict[str, tuple[int, ...]] | None:
    """The model's tensor shapes, where its model parts read whole (listed: no byte read)."""
    shapes: dict[str, tuple[int, ...]] = {}
    for part in ckpt.parts:
        opened = part.checkpoint
        if opened is None or part.role not in ("model", "checkpoint"):
            continue
        if any(f.code in ("CORRUPT", "MISSING_PARTS") for f in part.findings):
            return None
        shapes.update((t.name, t.shape) for t in opened.tensors if t.group == "model")
    return shapes or None


def mixed_run(mine: dict[str, tuple[int, ...]], newest: str, shapes: dict[str, tuple[int, ...]]) -> Finding | None:
    """MIXED_RUN when this model is not the shape of the run's newest (`newest` its name, `shapes` its model)."""
    changed = [n for n in mine if n in shapes and mine[n] != shapes[n]]
    if changed:
        name = changed[0]
        detail = f"{len(changed)} tensor(s) of other shapes ({name}: {mine[name]} here, {shapes[name]} there)"
    elif sorted(mine.values()) != sorted(shapes.values()):  # named otherwise (a prefix): the shapes decide
        detail = f"{len(mine)} model tensors here, {len(shapes)} there, of other shapes"
    else:
        return None
    message = (f"its model differs from {newest}'s, the run's newest: {detail}; a checkpoint of another run (a "
               "restart with another model), which the current model cannot load")  # fmt: skip
    return Finding("MIXED_RUN", message)
