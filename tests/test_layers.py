"""The house's one-way flow, read from the source: a lower layer never imports a higher one.

bytes -> io -> formats -> analysis -> jobs -> ops -> report -> api -> integrations -> commands -> tui -> cli,
with the root base modules (record, vocab, settings, dtypes, model, fmt, optional, steps, lifetime, and _native, the
optional compiled fast paths) under everything. Every
module under ckinspect/ is parsed with `ast` (nothing is imported, so the test is fast and cannot be fooled
by lazy imports); every import counts wherever it stands: at module level, inside a function (the lazy imports that keep
torch and textual off the report path), under `if TYPE_CHECKING:`, and as a string naming a ckinspect
module (`importlib.import_module("ckinspect.x")`, the lazy tables of package `__init__`s). Type-only imports
are held to the same rule on purpose: a lower layer that names a higher layer's types depends on
that layer's design even when nothing is imported at run time, and the fix is the same (move the
shared type down to its one home). Imports within one layer are free.

Also: nothing outside ckinspect/tui/ imports textual (the CLI, the readers and the renderers must
work without it).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ckinspect"

ROOT_BASE = ("record", "vocab", "settings", "dtypes", "model", "fmt", "optional", "steps", "lifetime", "_native")
ORDER = ("io", "formats", "analysis", "jobs", "ops", "report", "api", "integrations", "commands", "tui")
TOP = ("cli", "__main__", "__init__")

LAYER: dict[str, int] = {name: 0 for name in ROOT_BASE}
LAYER.update({name: i + 1 for i, name in enumerate(ORDER)})
LAYER.update({name: len(ORDER) + 1 for name in TOP})
LAYER_NAME = {0: "root base modules", **{i + 1: name for i, name in enumerate(ORDER)}, len(ORDER) + 1: "cli"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """`ckinspect.a.b` names a module or a package in the tree."""
    rel = Path(*name.split("."))
    return (PACKAGE.parent / rel).with_suffix(".py").is_file() or (PACKAGE.parent / rel / "__init__.py").is_file()


def _layer_of(module: str) -> int:
    """Layer of a ckinspect module: its first component below the package (ckinspect itself is its
    __init__, the top)."""
    parts = module.split(".")
    if len(parts) == 1:
        return LAYER["__init__"]
    head = parts[1]
    assert head in LAYER, f"ckinspect.{head} has no layer: add it to ROOT_BASE, ORDER or TOP in {__file__}"
    return LAYER[head]


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) of every import in the file, at any depth, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:  # `from ckinspect import fmt` imports the module ckinspect.fmt
                sub = f"{module}.{alias.name}"
                found.append((node.lineno, sub if module.startswith("ckinspect") and _is_module(sub) else module))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("ckinspect.")
            and _is_module(node.value)
        ):  # a lazy import by name: importlib.import_module("ckinspect.x") or a table of module names
            found.append((node.lineno, node.value))
    return found


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer():
    for path in _sources():
        _layer_of(_module_name(path))


def test_no_layer_imports_a_higher_one():
    upward = []
    for path in _sources():
        here = _module_name(path)
        mine = _layer_of(here)
        for line, target in _imports(path):
            if target != "ckinspect" and not target.startswith("ckinspect."):
                continue
            theirs = _layer_of(target)
            if theirs > mine:
                upward.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line} ({LAYER_NAME[mine]}) imports {target} "
                    f"({LAYER_NAME[theirs]})"
                )
    assert upward == [], "imports that point up:\n" + "\n".join(upward)


def test_only_the_tui_imports_textual():
    tui = PACKAGE / "tui"
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}"
        for path in _sources()
        if tui not in path.parents
        for line, target in _imports(path)
        if target == "textual" or target.startswith("textual.")
    ]
    assert offenders == []


def test_the_checker_sees_every_kind_of_import(tmp_path, monkeypatch):
    """The reader above must see function-level, TYPE_CHECKING and relative imports, or the rules
    it enforces would pass by not looking."""
    fake = tmp_path / "ckinspect"
    (fake / "io").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "io" / "__init__.py").write_text("")
    (fake / "report.py").write_text("")  # a module, so `from ckinspect import report` resolves to it
    (fake / "io" / "probe.py").write_text(
        "TYPE_CHECKING = False\n"
        "if TYPE_CHECKING:\n"
        "    from ckinspect.tui.app import App\n"
        "def lazy():\n"
        "    importlib.import_module('ckinspect.report')\n"
        "    import ckinspect.commands.emit\n"
        "    from ..analysis import scan\n"
        "    from ckinspect import report\n"
        "    import textual.widgets\n"
    )
    monkeypatch.setitem(globals(), "PACKAGE", fake)
    assert sorted(t for _, t in _imports(fake / "io" / "probe.py")) == [
        "ckinspect.analysis",
        "ckinspect.commands.emit",
        "ckinspect.report",
        "ckinspect.report",
        "ckinspect.tui.app",
        "textual.widgets",
    ]


def _same_layer_graph() -> dict[str, set[str]]:
    """module -> the modules of its own layer it imports (at any depth, as above)."""
    graph: dict[str, set[str]] = {}
    for path in _sources():
        here = _module_name(path)
        mine = graph.setdefault(here, set())
        for _line, target in _imports(path):
            if target.startswith("ckinspect.") and target != here and _layer_of(target) == _layer_of(here):
                mine.add(target)
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of two or more modules (Tarjan): each is an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle_inside_a_layer():
    """Two modules of one layer never import each other, directly or round a loop: each piece of a layer
    can be read, tested and changed from the bottom up (a shared name moves down to a module both import)."""
    graph = _same_layer_graph()
    circles = [" -> ".join(group) + " -> " + group[0] for group in _circles(graph)]
    assert circles == [], "import circles:\n" + "\n".join(circles)


def test_the_circle_finder_finds_a_loop_and_only_a_loop():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert _circles(graph) == [["a", "b", "c"]]


# What says a path is a URL, and a URL's own pieces: only io/ uses them. Everything above asks io.folders
# the question it has (opened, names_folder, names_file, known_missing, real, on_disk ...).
SCHEME_NAMES = frozenset({"is_url", "RemotePath", "is_folder_url"})


def _scheme_looks(path: Path, root: Path = PACKAGE.parent) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    where = path.relative_to(root)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, f"imports {a.name}") for a in node.names if a.name in SCHEME_NAMES]
        elif isinstance(node, ast.Attribute) and node.attr in SCHEME_NAMES:
            found.append((node.lineno, f"uses .{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in SCHEME_NAMES:
            found.append((node.lineno, f"uses {node.id}"))
    return [f"{where}:{line} {what}" for line, what in sorted(found)]


def test_only_io_looks_at_a_url_scheme():
    io = PACKAGE / "io"
    offenders = [look for path in _sources() if io not in path.parents for look in _scheme_looks(path)]
    assert offenders == [], "outside io/, ask io.folders instead:\n" + "\n".join(offenders)


def test_the_scheme_finder_sees_imports_names_and_attributes(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text("from ckinspect.io.remote import as_path, is_url\nx = is_url(p)\ny = p.is_folder_url()\n")
    assert _scheme_looks(source, tmp_path) == [
        "mod.py:1 imports is_url",
        "mod.py:2 uses is_url",
        "mod.py:3 uses .is_folder_url",
    ]
