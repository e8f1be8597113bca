"""Plan and apply the repair of interrupted saves; undo the last apply.

One action per leftover tmp:
  promote           a complete tmp becomes the main file (a damaged main goes to quarantine first)
  promote-keep-old  both whole and the tmp is newer: the tmp becomes the main, the old main is kept in quarantine
  set-aside         the tmp is partial, stale or a duplicate: it moves to quarantine, the main is untouched
  nothing           unsure (or nothing whole to keep): say why and touch nothing

Nothing is deleted: what is replaced or set aside moves to `<folder>/.ckinspect-quarantine/<run>/`
with a `manifest.json` that `undo` replays backwards. Every step is one atomic rename or link,
followed by an fsync of the folders involved, and the steps are ordered so that a SIGKILL at any
instant leaves the newest whole checkpoint under its tmp name or its main name.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckinspect.analysis.leftovers import Leftover, TmpStatus, check_integrity, classify, find_leftovers
from ckinspect.io.atomic import atomic_write_text, fsync_dir
from ckinspect.io.contain import OutsideTarget, inside, refuse_symlink
from ckinspect.record import Record, field
from ckinspect.vocab import QUARANTINE_DIR, CkinspectError, RepairKind

MANIFEST = "manifest.json"
ACTIONS = tuple(RepairKind)
AfterStep = Callable[[int], None]  # called with the count of filesystem steps made so far


class RepairAction(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    action: str  # one of ACTIONS
    leftover: Leftover
    status: TmpStatus | None
    reason: str
    state: str = "planned"  # planned | done | skipped | failed | left-alone (action "nothing")
    note: str = ""
    tmp_stat: tuple[int, int] | None = None  # (size, mtime_ns) when planned: apply refuses a file that changed
    main_stat: tuple[int, int] | None = None
    tmp_sha256: str | None = None  # what a promote planned to put under the main name, by content

    def __post_init__(self) -> None:
        if self.action == "nothing" and self.state == "planned":
            self.state = "left-alone"

    @property
    def pending(self) -> bool:
        return self.action != "nothing" and self.state == "planned"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "action": self.action,
            "tmp": str(self.leftover.tmp),
            "main": str(self.leftover.main),
            "reason": self.reason,
            "state": self.state,
        }
        if self.note:
            out["note"] = self.note
        if self.status is not None:
            s = self.status
            out["status"] = {
                "tmp_complete": s.tmp_complete,
                "main_exists": s.main_exists,
                "main_intact": s.main_intact,
                "tmp_step": s.tmp_step,
                "main_step": s.main_step,
                "newer": s.newer,
                "explain": s.explain(),
            }
        return out


class RepairPlan(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    path: Path
    actions: list[RepairAction] = field(default_factory=list)

    @property
    def pending(self) -> list[RepairAction]:
        return [a for a in self.actions if a.pending]

    @property
    def undecided(self) -> list[RepairAction]:
        return [a for a in self.actions if a.action == "nothing"]

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.path), "actions": [a.to_json() for a in self.actions]}


class ApplyResult(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    plan: RepairPlan
    run_id: str
    quarantines: list[Path] = field(default_factory=list)

    @property
    def done(self) -> list[RepairAction]:
        return [a for a in self.plan.actions if a.state == "done"]

    @property
    def failed(self) -> list[RepairAction]:
        return [a for a in self.plan.actions if a.state in ("failed", "skipped")]


class UndoResult(Record):
    __hash__ = None  # type: ignore[assignment]  # changed after it is built

    run_id: str | None
    restored: list[str] = field(default_factory=list)  # one line per move put back
    problems: list[str] = field(default_factory=list)
    manifests: list[Path] = field(default_factory=list)


# ---------------------------------------------------------------------------------------- planning


def plan_repairs(path: str | os.PathLike[str], full_crc: bool = False) -> RepairPlan:
    path = Path(path)
    leftovers = find_leftovers(path)  # a missing main file named by the user still has its tmps found
    if not path.exists() and not leftovers:
        raise CkinspectError(f"{path}: no such file or folder, and no leftover temporary of it")
    plan = RepairPlan(path)
    by_main: dict[Path, list[TmpStatus]] = {}
    for leftover in leftovers:
        status = classify(leftover, full_crc=full_crc)  # with full_crc every member is checked already
        by_main.setdefault(leftover.main, []).append(status if full_crc else _full_check(status))
    for statuses in by_main.values():
        plan.actions.extend(_decide(statuses))
    for action in plan.actions:
        action.tmp_stat = _stat(action.leftover.tmp)
        action.main_stat = _stat(action.leftover.main)
        if action.action.startswith("promote"):
            action.tmp_sha256 = _sha256(action.leftover.tmp)
    return plan


def _decide(statuses: list[TmpStatus]) -> list[RepairAction]:
    """One action per tmp of the same main file; at most one of them is promoted."""
    if len(statuses) == 1:
        return [_decide_one(statuses[0])]
    complete = [s for s in statuses if s.tmp_complete]
    undecidable = _no_newest(complete)
    if undecidable:
        return [RepairAction("nothing", s.leftover, s, undecidable) for s in statuses]
    actions = _promote_newest(statuses, complete)
    return _settle_partials(statuses, actions)


def _no_newest(complete: list[TmpStatus]) -> str:
    """Why none of several whole tmps can be promoted ('' when their steps say which is newest)."""
    if len(complete) < 2:
        return ""
    steps = [s.tmp_step for s in complete]
    if None not in steps and len(set(steps)) == len(steps):
        return ""
    names = ", ".join(s.leftover.tmp.name for s in complete)
    return f"several whole tmps ({names}) and their steps do not say which is newest; rename by hand"


def _promote_newest(statuses: list[TmpStatus], complete: list[TmpStatus]) -> list[RepairAction]:
    """Each tmp decided alone, except that the whole ones older than the newest (when it is promoted) are
    set aside."""
    best = max(complete, key=lambda s: s.tmp_step or 0) if complete else None
    promoted = best if best is not None and _decide_one(best).action.startswith("promote") else None
    actions = []
    for s in statuses:
        if promoted is not None and s is not promoted and s.tmp_complete:
            reason = f"older than {promoted.leftover.tmp.name}, which is promoted"
            actions.append(RepairAction("set-aside", s.leftover, s, reason))
        else:
            actions.append(_decide_one(s))
    return actions


def _settle_partials(statuses: list[TmpStatus], actions: list[RepairAction]) -> list[RepairAction]:
    """A partial tmp is set aside only when something whole will be under the main name."""
    will_be_whole = (statuses[0].main_exists and statuses[0].main_intact) or any(
        a.action.startswith("promote") for a in actions
    )
    for i, (s, a) in enumerate(zip(statuses, actions, strict=True)):  # one action per status, s is a.status
        if a.action == "set-aside" and not s.tmp_complete and not will_be_whole:
            actions[i] = RepairAction("nothing", a.leftover, s, "neither this tmp nor the main file is whole")
        elif a.action == "nothing" and not s.tmp_complete and will_be_whole:
            reason = "partial tmp of an interrupted save; another file is promoted"
            actions[i] = RepairAction("set-aside", a.leftover, s, reason)
    return actions


def _full_check(s: TmpStatus) -> TmpStatus:
    """A tmp that may become the main file gets every member's CRC checked, not only the small ones."""
    if not s.tmp_complete:
        return s
    verdict = check_integrity(s.leftover.tmp, full_crc=True)
    if verdict.ok:
        return s
    return s.replace(tmp_complete=False, tmp_problem=verdict.problem, tmp_step=None, newer="unknown", identical=False)


def _decide_one(s: TmpStatus) -> RepairAction:
    action, reason = _unless_both_whole(s) or _both_whole(s)
    return RepairAction(action, s.leftover, s, reason)


def _unless_both_whole(s: TmpStatus) -> tuple[str, str] | None:
    """(action, reason) for a symlink, a partial or unsafe tmp, a main file missing or damaged; None when
    the tmp and the main file are both whole."""
    left = s.leftover
    if left.main.is_symlink() or left.tmp.is_symlink():
        return "nothing", "a symlink is involved; repair the file it points to instead"
    if not s.tmp_complete:
        if s.main_exists and s.main_intact:
            return "set-aside", "partial tmp of an interrupted save; the main file is intact"
        return "nothing", "neither is whole; try `ckinspect salvage` on each"
    if s.tmp_danger:
        return "nothing", f"not promoted: the tmp is UNSAFE_PICKLE ({s.tmp_danger})"
    if not s.main_exists:
        if left.guessed:
            return "nothing", "the tmp is whole but which name it was meant to get is unknown; rename it by hand"
        return "promote", "the tmp is whole and the main file is missing: the save died before its rename"
    if not s.main_intact:
        return "promote", "the tmp is whole and the main file is damaged; the damaged file goes to quarantine"
    return None


def _both_whole(s: TmpStatus) -> tuple[str, str]:
    """(action, reason) when both are whole: the newer one by step, an identical copy set aside."""
    steps = f"step {s.tmp_step} vs {s.main_step}"
    if s.newer == "tmp":
        return "promote-keep-old", f"both whole and the tmp is newer ({steps}); the old main goes to quarantine"
    if s.newer == "main":
        return "set-aside", f"a stale tmp: the main file is newer ({steps})"
    if s.newer == "same" and s.identical:
        return "set-aside", "the tmp is a byte-identical copy of the main file"
    if s.newer == "same":
        return "nothing", f"both whole, same step {s.tmp_step}, different bytes; compare with `ckinspect diff`"
    return (
        "nothing",
        f"both whole and neither says its step, so which is newer is unknown{_mtime_hint(s.leftover)}; "
        "compare with `ckinspect diff`",
    )


def _mtime_hint(left: Leftover) -> str:
    try:
        newer = "tmp" if left.tmp.stat().st_mtime_ns > left.main.stat().st_mtime_ns else "main file"
    except OSError:
        return ""
    return f" (by mtime alone the {newer} is newer)"


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns)


def _sha256(path: Path) -> str | None:
    """The content hash of a regular file (a symlink is not opened), or None when it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        while chunk := handle.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------- applying


class _Steps:
    """Counts filesystem steps and tells `after_step`, the seam crash-injection tests hook (a pause, or a
    SIGKILL after step N); shipping code passes none."""

    def __init__(self, after_step: AfterStep | None = None) -> None:
        self.count = 0
        self.after_step = after_step

    def __call__(self) -> None:
        self.count += 1
        if self.after_step is not None:
            self.after_step(self.count)


def new_run_id() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S_%fZ")


def apply_plan(plan: RepairPlan, run_id: str | None = None, after_step: AfterStep | None = None) -> ApplyResult:
    """Apply the pending actions; `after_step(n)` runs after each filesystem step (tests inject crashes there)."""
    run_id = run_id or new_run_id()
    result = ApplyResult(plan, run_id)
    step = _Steps(after_step)
    by_folder: dict[Path, list[RepairAction]] = {}
    for action in plan.pending:
        by_folder.setdefault(action.leftover.folder, []).append(action)
    for folder in by_folder:
        _check_writable(folder)
    for folder, actions in by_folder.items():
        quarantine = _make_quarantine(folder, run_id)
        result.quarantines.append(quarantine)
        manifest = _Manifest(quarantine, folder, run_id, actions, step)
        _write_or_fail(manifest, "applying")
        step()
        for action in actions:
            try:
                _apply_one(action, quarantine, manifest, step)
            except OSError as exc:
                action.state, action.note = "failed", f"{type(exc).__name__}: {exc.strerror or exc}"
        _write_or_fail(manifest, "applied")  # every move was written down before it was made
    return result


def _write_or_fail(manifest: _Manifest, status: str) -> None:
    try:
        manifest.write(status)
    except OSError as exc:
        raise CkinspectError(f"cannot write {manifest.path}: {exc.strerror or exc}") from exc


def _check_writable(folder: Path) -> None:
    """Refuse before anything moves: a quarantine that is a symlink or a file, a folder we cannot write."""
    qroot = refuse_symlink(folder / QUARANTINE_DIR)
    if qroot.exists() and not qroot.is_dir():
        raise CkinspectError(f"{qroot} is not a folder; move it away to repair here")
    if not os.access(folder, os.W_OK | os.X_OK) or (qroot.is_dir() and not os.access(qroot, os.W_OK | os.X_OK)):
        raise CkinspectError(f"cannot repair in {folder}: the folder is not writable")


def _make_quarantine(folder: Path, run_id: str) -> Path:
    """`<folder>/.ckinspect-quarantine/<run>`, each level made by one mkdir (nothing followed)."""
    qroot = refuse_symlink(folder / QUARANTINE_DIR)
    try:
        if not qroot.is_dir():
            os.mkdir(qroot)
        quarantine = refuse_symlink(qroot / run_id)
        os.mkdir(quarantine)
    except OSError as exc:
        raise CkinspectError(f"cannot create the quarantine in {folder}: {exc.strerror or exc}") from exc
    fsync_dir(qroot)
    fsync_dir(folder)
    return quarantine


def _apply_one(action: RepairAction, quarantine: Path, manifest: _Manifest, step: _Steps) -> None:
    skipped = _changed_since_plan(action)
    if skipped is not None:
        action.state, action.note = "skipped", skipped
        return
    moves = manifest.moves_for(action)
    if action.action == "set-aside":
        tmp = action.leftover.tmp
        _record_and(moves, "rename", tmp, quarantine / tmp.name, manifest)
        _move_no_clobber(tmp, quarantine / tmp.name)
        _sync(quarantine, tmp.parent)
        step()
    elif action.action in ("promote", "promote-keep-old"):
        _promote(action.leftover, quarantine, manifest, moves, step)
    action.state = "done"


def _changed_since_plan(action: RepairAction) -> str | None:
    """Why the action is skipped: its files are not those the plan looked at (gone, changed, now a
    symlink, other bytes); None when they are."""
    tmp, main = action.leftover.tmp, action.leftover.main
    if action.tmp_stat is None or not tmp.is_file():
        return "the tmp is gone (a trainer may have finished its save)"
    # a set-aside leaves the main alone (another tmp of the same main may just have been promoted)
    if _stat(tmp) != action.tmp_stat or (action.action != "set-aside" and _stat(main) != action.main_stat):
        return "a file changed since the plan was made; run repair again"
    if tmp.is_symlink() or main.is_symlink():
        return "a symlink appeared since the plan was made; not followed"
    if action.action != "set-aside" and _sha256(tmp) != action.tmp_sha256:
        return "the tmp's bytes are not those the plan checked; run repair again"
    return None


def _promote(left: Leftover, quarantine: Path, manifest: _Manifest, moves: list[dict[str, Any]], step: _Steps) -> None:
    """The tmp takes the main name; an old main is first kept in quarantine (reachable by its own name
    until the tmp replaces it)."""
    tmp, main = left.tmp, left.main
    if main.exists():
        _record_and(moves, "link", main, quarantine / main.name, manifest)
        _keep_copy(main, quarantine / main.name)
        _sync(quarantine, main.parent)
        step()
        _record_and(moves, "replace", tmp, main, manifest)
        os.replace(tmp, main)
    else:
        _record_and(moves, "rename", tmp, main, manifest)
        _move_no_clobber(tmp, main)
    _sync(main.parent)
    step()


def _record_and(moves: list[dict[str, Any]], op: str, src: Path, dst: Path, manifest: _Manifest) -> None:
    """Write the intent to the manifest before the move, so undo knows about a move a crash interrupted."""
    size, mtime_ns = _stat(src) or (None, None)
    moves.append({"op": op, "from": manifest.rel(src), "to": manifest.rel(dst), "size": size, "mtime_ns": mtime_ns})
    manifest.write("applying")
    manifest.step()


def _keep_copy(src: Path, dst: Path) -> None:
    """A second name for src in quarantine: a hard link (src keeps its name), else a rename."""
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError:
        os.rename(src, dst)


def _move_no_clobber(src: Path, dst: Path) -> None:
    """Rename that refuses to replace an existing file (link + unlink where links work)."""
    try:
        os.link(src, dst)
    except FileExistsError:
        raise
    except OSError:
        if dst.exists():
            raise FileExistsError(dst) from None
        os.rename(src, dst)
        return
    os.unlink(src)  # src's bytes live on under dst


def _sync(*folders: Path) -> None:
    for folder in dict.fromkeys(folders):
        fsync_dir(folder)


class _Manifest:
    def __init__(self, quarantine: Path, folder: Path, run_id: str, actions: list[RepairAction], step: _Steps) -> None:
        self.path = quarantine / MANIFEST
        self.step = step
        self.folder = folder
        self.run_id = run_id
        self.actions = actions
        self.entries: list[dict[str, Any]] = [
            {"action": a.action, "tmp": a.leftover.tmp.name, "main": a.leftover.main.name, "reason": a.reason}
            | {"moves": []}
            for a in actions
        ]

    def rel(self, path: Path) -> str:
        return os.path.relpath(path, self.folder)

    def moves_for(self, action: RepairAction) -> list[dict[str, Any]]:
        return self.entries[self.actions.index(action)]["moves"]

    def write(self, status: str) -> None:
        for entry, action in zip(self.entries, self.actions, strict=True):
            entry["state"] = action.state
        doc = {
            "schema": 1,
            "tool": "ckinspect",
            "run": self.run_id,
            "folder": str(self.folder.resolve()),
            "status": status,
            "entries": self.entries,
        }
        atomic_write_text(self.path, json.dumps(doc, indent=2) + "\n")


# ------------------------------------------------------------------------------------------- undo


def find_manifests(folder: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """(run id, manifest path) of every apply under `folder`, oldest first. A quarantine, run folder or
    manifest that is a symlink is refused (OutsideTarget), never followed."""
    folder = Path(folder)
    if folder.is_file():
        folder = folder.parent
    found = []
    for root, dirs, _files in os.walk(folder):
        if QUARANTINE_DIR in dirs:
            qroot = refuse_symlink(Path(root) / QUARANTINE_DIR)
            for run in sorted(qroot.iterdir()):
                manifest = refuse_symlink(run) / MANIFEST
                if run.is_dir() and refuse_symlink(manifest).is_file():
                    found.append((run.name, manifest))
        dirs[:] = [d for d in dirs if d not in (QUARANTINE_DIR, ".git")]
    return sorted(found)


_MOVE_OPS = ("rename", "link", "replace")


def read_manifest(manifest: Path) -> dict[str, Any]:
    """A manifest checked for shape and types, every path in it inside its folder; CkinspectError if not.

    Whoever could write under the folder could have written the manifest, so nothing in it is trusted
    before it passes: undo moves nothing unless every move of the run passes.
    """
    where = f"{manifest}: not a repair manifest"
    try:
        doc = json.loads(manifest.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CkinspectError(f"{where} ({type(exc).__name__})") from exc
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not isinstance(doc.get("status"), str):
        raise CkinspectError(f"{where} (no status and entries)")
    base = manifest.parent.parent.parent  # <folder>/.ckinspect-quarantine/<run>/manifest.json
    for entry in entries:
        moves = entry.get("moves") if isinstance(entry, dict) else None
        if not isinstance(moves, list):
            raise CkinspectError(f"{where} (an entry without a list of moves)")
        for move in moves:
            _check_move(move, where, manifest, base)
    return doc


def _check_move(move: object, where: str, manifest: Path, base: Path) -> None:
    """One move of a manifest: a known op, counts that are counts, both paths inside `base`."""
    if not isinstance(move, dict) or move.get("op") not in _MOVE_OPS:
        raise CkinspectError(f"{where} (a move that is not rename, link or replace)")
    for key in ("size", "mtime_ns"):
        value = move.get(key)
        if value is not None and (type(value) is not int or value < 0):
            raise CkinspectError(f"{where} (a move whose {key} is not a count)")
    for key in ("from", "to"):
        try:
            inside(base, move.get(key))
        except OutsideTarget as exc:
            raise OutsideTarget(f"{manifest}: refused, a move's {key!r} path {exc}") from exc


def undo(folder: str | os.PathLike[str]) -> UndoResult:
    """Put back everything the last apply (under `folder`) moved, newest move first."""
    runs: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for run_id, manifest in find_manifests(folder):
        doc = read_manifest(manifest)
        if doc.get("status") != "undone":
            runs.setdefault(run_id, []).append((manifest, doc))
    if not runs:
        return UndoResult(None)
    run_id = max(runs)
    result = UndoResult(run_id, manifests=[m for m, _doc in runs[run_id]])
    for manifest, doc in runs[run_id]:
        base = manifest.parent.parent.parent
        try:
            for entry in reversed(doc["entries"]):
                for move in reversed(entry["moves"]):
                    _undo_move(base, move, result)
            doc["status"] = "undone"
            atomic_write_text(manifest, json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            raise CkinspectError(f"undo in {base} stopped: {exc.strerror or exc}") from exc
    return result


def _undo_link(src: Path, dst: Path, recorded: tuple[Any, Any], move: dict[str, Any], result: UndoResult) -> None:
    """src (the old main) was linked into quarantine as dst; src's name then went to the promoted tmp."""
    if not dst.exists():
        return  # the link never happened
    if src.exists() and os.path.samefile(src, dst):
        os.unlink(dst)  # the replace never happened: src still is the old file; drop the extra name
        fsync_dir(dst.parent)
        result.restored.append(f"{move['from']} was never replaced")
        return
    if src.exists() and _stat(src) != (recorded[0], recorded[1]) and not _has_other_name(src):
        why = f"{move['from']} is not the file this apply put there; {move['to']} stays in quarantine"
        result.problems.append(why)
        return
    os.replace(dst, src)
    fsync_dir(src.parent)
    result.restored.append(f"{move['to']} -> {move['from']}")


def _undo_move(base: Path, move: dict[str, Any], result: UndoResult) -> None:
    src, dst = inside(base, move["from"]), inside(base, move["to"])  # the apply moved src -> dst; checked again
    recorded = (move.get("size"), move.get("mtime_ns"))
    what = f"{move['to']} -> {move['from']}"
    if move["op"] == "link":
        _undo_link(src, dst, recorded, move, result)
        return
    if not dst.exists():
        return  # never happened
    moved = _stat(dst) == recorded
    if src.exists():
        if os.path.samefile(src, dst):
            if move["op"] == "replace":
                result.restored.append(what)  # an earlier, interrupted undo already gave it its tmp name back
                return
            os.unlink(dst)  # a crash came between the link and the unlink: src never lost its name
            fsync_dir(dst.parent)
            result.restored.append(f"{move['from']} was never moved")
        elif moved:
            result.problems.append(f"{move['from']} exists again; {move['to']} not moved back")
        return  # otherwise the move never happened
    if not moved:
        result.problems.append(f"{move['to']} changed since the apply (a new save?); not moved back")
        return
    if move["op"] == "replace":
        # give the promoted file its tmp name back; the link undo that follows puts the old main back
        try:
            os.link(dst, src)
        except OSError:
            os.rename(dst, src)
    else:
        _move_no_clobber(dst, src)
    _sync(src.parent, dst.parent)
    result.restored.append(what)


def _has_other_name(path: Path) -> bool:
    try:
        return path.stat().st_nlink > 1
    except OSError:
        return False
