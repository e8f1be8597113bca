"""Issue 30: a composite tensor (sparse, nested, meta ...) is one row of the inspect table, with its kind,
logical shape and the bytes of its parts, as the text report lists it; the details pane shows its parts.
The files are made by torch in the test, and torch gives the figures."""

from __future__ import annotations

import warnings

import torch

from ckinspect.fmt import human_bytes
from ckinspect.tui.app import create_app
from ckinspect.tui.widgets.details_pane import DetailsPane
from ckinspect.tui.widgets.tensor_table import TensorTable
from tests.tui.apps import settle


def composites_file(path, values=(1.0, 2.0, 3.0)):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's notes on sparse invariant checks and on nested tensors
        sparse = torch.sparse_coo_tensor(torch.tensor([[0, 1, 3], [2, 0, 4]]), torch.tensor(values), (4, 5))
        nested = torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)])
    torch.save({"model.w": torch.ones(3), "model.sp": sparse, "model.nt": nested}, path)
    return sparse, nested


async def test_sparse_and_nested_tensors_are_one_row_each_with_their_parts_in_the_details(tmp_path):
    path = tmp_path / "composites.pt"
    sparse, nested = composites_file(path)
    sparse_bytes = sparse._indices().nbytes + sparse._values().nbytes  # what torch.save stores for it
    components = nested.unbind()
    nested_bytes = (
        sum(c.nbytes for c in components)  # the buffer
        + nested._nested_tensor_size().nbytes
        + nested._nested_tensor_strides().nbytes
        + nested._nested_tensor_storage_offsets().nbytes
    )
    app = create_app("main", [path], cursor_blink=False, quick=True)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        table = app.screen.query_one(TensorTable)
        cells = {row.key: row.cells for row in table.rows}
        assert sorted(cells) == ["model.nt", "model.sp", "model.w"]  # no row for a part
        assert cells["model.sp"] == (
            "model.sp (sparse_coo)",
            "other",
            "float32",
            "×".join(map(str, sparse.shape)),
            f"{sparse.numel():,}",
            human_bytes(sparse_bytes),
            f"{sparse_bytes / path.stat().st_size:.1%}",
        )
        assert cells["model.nt"][:3] == ("model.nt (nested)", "other", "float32")
        assert cells["model.nt"][3].startswith(f"{len(components)}×j")  # ragged dimensions as j
        assert cells["model.nt"][4:6] == ("ragged", human_bytes(nested_bytes))

        assert table.move_to_key("model.sp")
        await pilot.pause()
        facts = str(app.screen.query_one(DetailsPane).query_one("#facts").render())
        assert "sparse_coo · float32 · 4×5" in facts
        assert f"2 parts · {human_bytes(sparse_bytes)}" in facts
        assert f"indices  int64 · 2×3 · {human_bytes(sparse._indices().nbytes)}" in facts
        assert f"values  float32 · 3 · {human_bytes(sparse._values().nbytes)}" in facts
        await pilot.press("slash", *"sp", "enter")
        assert app.screen.shown_tensors() == ["model.sp.indices", "model.sp.values"]  # export and tree: the parts


async def test_a_finding_about_a_part_marks_the_composites_row_and_jumps_to_it(tmp_path):
    path = tmp_path / "nan.pt"
    composites_file(path, values=(1.0, float("nan"), 3.0))
    app = create_app("main", [path], cursor_blink=False)
    async with app.run_test(size=(120, 35)) as pilot:
        await settle(pilot)
        findings = [f for f in app.screen.ckpt.findings if f.code == "NONFINITE"]
        assert [f.tensor for f in findings] == ["model.sp.values"]
        table = app.screen.query_one(TensorTable)
        table.move_to_key("model.w")
        assert table.row_for("model.sp").cells[0] == "model.sp (sparse_coo) ✗"
        app.screen.jump_to("model.sp.values")
        assert table.current_row.key == "model.sp"
