"""Nothing the reports show is hidden in the TUI (issue 30, point 9): a safetensors file's
`__metadata__`, optimizer param_groups by the names of their parameters, and a tree view whose details
never show a row other than the one highlighted. Real files written by torch, read by the real core."""

from __future__ import annotations

import pytest
from textual.widgets import Tree

from ckinspect.tui.app import create_app
from ckinspect.tui.screens.inspect import InspectScreen
from ckinspect.tui.screens.metadata import MetadataScreen
from ckinspect.tui.widgets.details_pane import DetailsPane
from ckinspect.tui.widgets.tensor_table import TensorTable
from tests.tui.apps import settle

torch = pytest.importorskip("torch")


def labels(tree: Tree) -> list[str]:
    out: list[str] = []

    def visit(node, depth: int) -> None:
        out.append("  " * depth + str(node.label))
        for child in node.children:
            visit(child, depth + 1)

    visit(tree.root, 0)
    return out


def facts(app) -> str:
    return str(app.screen.query_one(DetailsPane).query_one("#facts").render())


async def open_metadata(path) -> list[str]:
    app = create_app("main", [path], cursor_blink=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, InspectScreen)
        await pilot.press("m")
        await settle(pilot)
        assert isinstance(app.screen, MetadataScreen)
        await pilot.press("e")  # expand all
        await pilot.pause()
        return labels(app.screen.query_one(Tree))


async def test_a_safetensors_files_metadata_is_shown(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "model.safetensors"
    save_file({"w": torch.ones(2, 3)}, str(path), metadata={"format": "pt", "producer": "ckinspect test"})
    shown = await open_metadata(path)
    assert "  __metadata__" in shown, shown
    assert "    format: pt" in shown and "    producer: ckinspect test" in shown, shown
    assert "  no values beside the tensors" not in shown


async def test_param_groups_name_their_parameters(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.ones(1, 4)).sum().backward()
    opt.step()
    path = tmp_path / "ckpt.pt"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
    names = list(model.state_dict())  # torch's own order: 0.weight 0.bias 1.weight 1.bias
    shown = await open_metadata(path)
    at = shown.index("        params")
    params = [line.strip() for line in shown[at + 1 : at + 1 + len(names)]]
    assert params == [f"{i}: {i} model.{name}" for i, name in enumerate(names)], shown


async def test_the_tree_views_details_never_keep_a_stale_row(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    path = tmp_path / "weights.pt"
    torch.save({"model": model.state_dict()}, path)
    app = create_app("main", [path], cursor_blink=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(TensorTable)
        await pilot.press("end")
        await pilot.pause()
        last = table.current_row.key
        assert facts(app).startswith(last)
        await pilot.press("g")  # the tree: its first line is the module `model`
        await pilot.pause()
        assert not facts(app).startswith(last), facts(app)
        assert facts(app).startswith("model\n4 tensor(s)"), facts(app)
        await pilot.press("space", "down")  # open `model`, down to its first module `0`
        await pilot.pause()
        assert facts(app).startswith("model.0\n2 tensor(s)"), facts(app)
        await pilot.press("space", "down")  # into `0`: its first tensor
        await pilot.pause()
        assert facts(app).startswith("model.0.weight\n"), facts(app)
        assert table.current_row.key == "model.0.weight"
        await pilot.press("up")  # back on the module
        await pilot.pause()
        assert facts(app).startswith("model.0\n"), facts(app)
        await pilot.press("g")  # the table again: its own row
        await pilot.pause()
        assert facts(app).startswith(table.current_row.key + "\n"), facts(app)
