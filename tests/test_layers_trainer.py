"""The direction between the two packages: `trainer` may import `ckinspect`, never the reverse.

ckinspect learns how to build the trainer's model through the `ckinspect.models` entry point that
pyproject.toml declares (see ckinspect/analysis/logit_models.py), not through an import.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every import anywhere in the file (module level, in functions, under TYPE_CHECKING),
    plus importlib.import_module("...") / __import__("...") calls with a literal name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.append((node.lineno, node.args[0].value))
    return found


def _imports_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_ckinspect_never_imports_trainer():
    modules = sorted((REPO / "ckinspect").rglob("*.py"))
    assert len(modules) > 50  # the walk really covers the package
    offenders = [
        f"{path.relative_to(REPO)}:{line} imports {module}"
        for path in modules
        for line, module in _imported_modules(path)
        if _imports_package(module, "trainer")
    ]
    assert offenders == []


def test_the_import_finder_sees_function_level_and_dynamic_imports(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import os\n"
        "def f():\n"
        "    from trainer.model import build_model\n"
        "    import trainer.experiment as e\n"
        "    importlib.import_module('trainer.data')\n"
        "    from . import trainer\n"  # a relative import of a sibling is not the trainer package
        "import trainers\n"
    )
    hits = [(line, m) for line, m in _imported_modules(sample) if _imports_package(m, "trainer")]
    assert hits == [(3, "trainer.model"), (4, "trainer.experiment"), (5, "trainer.data")]


def test_trainer_may_import_ckinspect_and_registers_its_model_plugin():
    trainer_imports = {
        path.name: [m for _, m in _imported_modules(path) if _imports_package(m, "ckinspect")]
        for path in (REPO / "trainer").rglob("*.py")
    }
    assert trainer_imports["ckinspect_plugin.py"] and trainer_imports["__init__.py"] == ["ckinspect.vocab"]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '[project.entry-points."ckinspect.models"]\ntrainer = "trainer.ckinspect_plugin"\n' in pyproject


def test_the_installed_metadata_carries_the_registration():
    """Fails on an install older than the entry point: run `pip install -e .` again."""
    from importlib.metadata import entry_points

    from ckinspect.analysis.logit_models import registered_plugins

    assert [(ep.name, ep.value) for ep in entry_points(group="ckinspect.models")] == [
        ("trainer", "trainer.ckinspect_plugin")
    ]
    plugins, failures = registered_plugins()
    assert [name for name, _ in plugins] == ["trainer"] and failures == ()
