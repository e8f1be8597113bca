"""Anatomy: what each part of a checkpoint costs, with storages counted once."""

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckinspect.analysis.anatomy import analyze, summarize
from ckinspect.analysis.scalars import read_scalar
from ckinspect.model import StorageInfo, TensorInfo
from tests.helpers.checkpoints import T, build, model_sd, trainer_resume

F32 = 4


def test_trainer_resume_groups_and_bytes_add_up():
    ckpt = analyze(build(trainer_resume()))
    anatomy = summarize(ckpt)
    params = (16 * 8 + 32 * 8 + 8 * 32 + 8) * F32  # tied lm_head counted once
    moments = 2 * params
    steps = 4 * F32
    rng = 5056
    assert anatomy.groups["model"].bytes == params
    assert anatomy.groups["optimizer"].bytes == moments + steps
    assert anatomy.groups["rng"].bytes == rng
    assert anatomy.groups["other"].bytes == 0
    assert anatomy.tensor_bytes == params + moments + steps + rng == anatomy.storage_bytes
    assert anatomy.unused_bytes == 0
    assert anatomy.optimizer_share == pytest.approx((moments + steps) / anatomy.tensor_bytes)
    # counts are views: the tied lm_head is a tensor of its own
    assert anatomy.groups["model"].tensor_count == 5
    assert anatomy.groups["optimizer"].tensor_count == 12
    assert anatomy.tensor_count == 5 + 12 + 1


def test_tied_weights_count_once_but_list_twice():
    ckpt = analyze(build(model_sd()))
    anatomy = summarize(ckpt)
    assert ckpt.layout == "state_dict"
    assert [t.name for t in ckpt.tensors][-1] == "lm_head.weight"
    assert anatomy.tensor_bytes == (16 * 8 + 32 * 8 + 8 * 32 + 8) * F32
    assert sum(t.nbytes for t in ckpt.tensors) == anatomy.tensor_bytes + 16 * 8 * F32


def test_saved_slice_of_a_large_tensor_is_unused_storage():
    # x[:10] of a 1000x1000 float32 tensor, saved as a view: the whole 4 MB storage goes to disk
    ckpt = analyze(build({"head": T((10, 1000), storage_numel=1000 * 1000)}))
    anatomy = summarize(ckpt)
    assert anatomy.storage_bytes == 4_000_000
    assert anatomy.tensor_bytes == 40_000
    assert anatomy.unused_bytes == 3_960_000
    assert anatomy.partly_used[0].largest_view == "head"


def test_overlapping_views_count_each_byte_once():
    ckpt = build({"a": T((100,), storage="s"), "b": T((100,), storage="s", offset=50)})
    anatomy = summarize(analyze(ckpt))
    assert anatomy.storage_bytes == 150 * F32
    assert anatomy.tensor_bytes == 150 * F32 and anatomy.unused_bytes == 0


def test_storage_shared_across_groups_goes_to_model_first():
    # an optimizer entry that aliases a model weight (as a buggy save could): bytes once, to model
    tree = {
        "model": {"w": T((10,), storage="s")},
        "optimizer": {"state": {0: {"exp_avg": T((10,), storage="s")}}, "param_groups": [{"params": [0]}]},
    }
    anatomy = summarize(analyze(build(tree)))
    assert anatomy.groups["model"].bytes == 40 and anatomy.groups["optimizer"].bytes == 0
    assert anatomy.groups["optimizer"].tensor_count == 1
    assert anatomy.tensor_bytes == 40


def test_strided_view_reaches_its_span():
    ckpt = build({"w": T((4, 4))})
    ckpt.tensors[0] = TensorInfo("w", "float32", (4, 2), (4, 1), ckpt.tensors[0].storage_key, 0)  # w[:, :2]
    anatomy = summarize(analyze(ckpt))
    assert anatomy.tensor_bytes == (3 * 4 + 1 + 1) * F32  # first element to last element


def test_share_of_file_uses_file_bytes():
    ckpt = analyze(build(model_sd(), file_bytes=10_000))
    anatomy = summarize(ckpt)
    assert anatomy.share_of_file(ckpt.tensor("layers.0.w1.weight")) == pytest.approx(1024 / 10_000)


def test_empty_checkpoint_has_zero_share():
    anatomy = summarize(analyze(build({})))
    assert (anatomy.tensor_bytes, anatomy.optimizer_share) == (0, 0.0)


def test_step_saved_as_a_tensor_is_read_from_disk(tmp_path):
    blob = tmp_path / "ckpt.bin"
    blob.write_bytes(b"HEADER" + struct.pack("<q", 1234) + b"tail")
    ckpt = build({"model": model_sd(), "optimizer": {}, "step": T((), "int64")}, path=blob)
    step = ckpt.tensor("step")
    ckpt.storages[step.storage_key] = StorageInfo(step.storage_key, "int64", 8, blob, offset=6)
    analyze(ckpt)
    assert ckpt.metadata["step"] == 1234
    assert read_scalar(ckpt, ckpt.tensor("model.norm.weight")) is None  # not a one-element tensor


def test_summary_follows_changes_to_the_checkpoint():
    ckpt = analyze(build(model_sd()))
    first = summarize(ckpt)
    assert summarize(ckpt) is first  # asked twice (checks, report): computed once
    ckpt.tensors[1] = TensorInfo("extra", "float32", (1000,), (1,), "new")
    assert summarize(ckpt).tensor_bytes == first.tensor_bytes - 32 * 8 * 4 + 4000


GROUP_NAMES = ["model", "optimizer", "rng", "other"]


@st.composite
def views_over_storages(draw):
    """Random 1-D views (offset, length, group) over a few float32 storages of random size."""
    tree = {}
    for s in range(draw(st.integers(1, 3))):
        size = draw(st.integers(1, 64))
        for v in range(draw(st.integers(0, 4))):
            offset = draw(st.integers(0, size - 1))
            length = draw(st.integers(0, size - offset))
            group = draw(st.sampled_from(GROUP_NAMES))
            tree[f"{group}.s{s}v{v}"] = T((length,), storage=f"s{s}", offset=offset, storage_numel=size)
    return tree


@settings(max_examples=60, deadline=None)
@given(views_over_storages())
def test_groups_add_up_to_tensor_bytes_and_never_exceed_storage(tree):
    ckpt = build(tree)
    # build() leaves every group "other", as a reader does: take the group from the name's first part
    ckpt.tensors = [
        TensorInfo(t.name, t.dtype, t.shape, t.stride, t.storage_key, t.storage_offset, t.name.split(".")[0])
        for t in ckpt.tensors
    ]
    anatomy = summarize(ckpt)
    assert sum(g.bytes for g in anatomy.groups.values()) == anatomy.tensor_bytes
    assert 0 <= anatomy.tensor_bytes <= anatomy.storage_bytes
    assert anatomy.unused_bytes == anatomy.storage_bytes - anatomy.tensor_bytes
    # a byte reached by a model view always counts for model
    model_only = summarize(
        type(ckpt)(
            ckpt.path, ckpt.format, ckpt.file_bytes, [t for t in ckpt.tensors if t.group == "model"], ckpt.storages
        )
    )
    assert anatomy.groups["model"].bytes == model_only.tensor_bytes


def test_a_step_counter_saved_on_a_big_endian_host_is_read_as_torch_reads_it(tmp_path):
    """torch.save on a big-endian host stores the counter byte-swapped under a `big` byteorder record; torch
    swaps it back on load. The step read straight from the bytes must be torch's, not 2**56 times it."""
    import torch

    from ckinspect.formats import open_checkpoint
    from tests.parity.torch_cases import save_big_endian

    obj = {"model": {"w": torch.ones(2)}, "step": torch.tensor(1234), "optimizer": {"state": {}}}
    save_big_endian(obj, tmp_path / "be.pt")
    assert torch.load(tmp_path / "be.pt", weights_only=True)["step"].item() == 1234
    ckpt = analyze(open_checkpoint(tmp_path / "be.pt"))
    assert read_scalar(ckpt, ckpt.tensor("step")) == 1234
    assert ckpt.metadata["step"] == 1234


class _KeysReversed(dict):
    """A storages dict whose keys, listed, never read as the tensors' keys in order: the paths that pair tensor i
    with storage i in place (summarize, check_views) must then look each storage up, and say the same."""

    def __iter__(self):
        return iter(list(super().__iter__())[::-1])


def _paired_checkpoint(seed: int):
    """Tensors viewing storages one to one in the storages' order (torch.save's), of every shape the pairing
    meets: 1-D, n-D, 0-d, size 0, negative strides, offsets, sub-byte dtypes, views past their storage, a storage
    missing or holding nothing, groups outside GROUPS."""
    import random

    from ckinspect.model import Checkpoint

    rng = random.Random(seed)
    ckpt = Checkpoint(path="x.pt", format="torch-zip", file_bytes=1 << 20)
    tensors, storages = [], {}
    for i in range(40):
        dtype = rng.choice(["float32", "bfloat16", "int8", "float4_e2m1fn", "bool"])
        ndim = rng.choice([0, 1, 1, 1, 2, 3])
        shape = tuple(rng.choice([0, 1, 3, 5]) for _ in range(ndim))
        stride = tuple(rng.choice([1, 3, 15, -1]) for _ in range(ndim))
        offset = rng.choice([0, 0, 2, 7])
        key = str(i)
        group = rng.choice(["model", "optimizer", "rng", "other", "custom"])
        tensors.append(TensorInfo(f"t{i}", dtype, shape, stride, key, offset, group))
        if seed % 4 or rng.random() < 0.9:  # every fourth checkpoint lacks some storages
            size = rng.choice([0, 1, 4, 16, 64, 200])
            storages[key] = StorageInfo(key, dtype, size, "x.pt", None if size == 0 and rng.random() < 0.5 else 64)
    ckpt.tensors, ckpt.storages = tensors, storages
    return ckpt


def test_tensors_paired_with_storages_in_place_count_as_when_looked_up():
    from ckinspect.analysis.anatomy import _summarize

    for seed in range(200):
        ckpt = _paired_checkpoint(seed)
        in_place = _summarize(ckpt)
        ckpt.storages = _KeysReversed(ckpt.storages)
        looked_up = _summarize(ckpt)
        assert in_place.to_json() == looked_up.to_json()
        assert in_place.missing == looked_up.missing


def test_views_paired_with_storages_in_place_are_checked_as_when_looked_up():
    from ckinspect.formats.pickle_findings import check_views

    for seed in range(200):
        in_place, looked_up = _paired_checkpoint(seed), _paired_checkpoint(seed)
        looked_up.storages = _KeysReversed(looked_up.storages)
        check_views(in_place)
        check_views(looked_up)
        assert [(f.code, f.message) for f in in_place.findings] == [(f.code, f.message) for f in looked_up.findings]
        assert in_place.tensors == looked_up.tensors


def test_regrouping_copies_only_the_tensors_whose_group_changes_on_both_paths(pickle_paths):
    """apply_layout gives each tensor its group by a copy (a TensorInfo is never changed once built), in C where
    built (_native/records.c): the same copies as TensorInfo(...) makes, the same objects kept where the group
    holds, and a subclass (which the C pass does not copy) still copied as TensorInfo."""
    from ckinspect.analysis.anatomy import _regroup

    class Tagged(TensorInfo):
        pass

    tensors = [TensorInfo(f"t{i}", "float32", (i, 2), (2, 1), str(i), i, ["other", "model"][i % 2]) for i in range(6)]
    groups = ["model", "model", "rng", "optimizer", "other", "model"]
    before = list(tensors)
    _regroup(tensors, groups)
    assert [t.group for t in tensors] == groups
    assert [t is b for t, b in zip(tensors, before, strict=True)] == [False, True, False, False, True, True]
    assert all(type(t) is TensorInfo for t in tensors)
    assert [t.replace(group="x") for t in tensors] == [b.replace(group="x") for b in before]
    mixed = [Tagged("a", "int8", (1,), (1,), "k", 0), TensorInfo("b", "int8", (1,), (1,), "k", 0)]
    _regroup(mixed, ["model", "other"])
    assert [type(t) for t in mixed] == [TensorInfo, TensorInfo] and mixed[0].group == "model"


def test_the_compiled_record_passes_are_built_where_ci_builds_them():
    import os

    from ckinspect._native import load
    from ckinspect.settings import PURE

    if os.environ.get("CKINSPECT_EXPECT_NATIVE") and not os.environ.get(PURE):
        for name in ("records", "views"):
            assert load(name) is not None, f"ckinspect._native.{name} was not built: `pip install -e .` needs gcc"


def _odd_descriptor(rng, i: int) -> TensorInfo:
    """A tensor descriptor as a reader makes it, or with one field of another type or out of range."""
    big = 1 << 70
    fields = {
        "name": f"t{i}",
        "dtype": rng.choice(["float32", "bfloat16", "float4_e2m1fn", "quint2x4", "made_up"]),
        "shape": tuple(rng.choice([0, 1, 3, 7]) for _ in range(rng.choice([0, 1, 1, 2, 3]))),
        "stride": None,
        "storage_key": str(i % 7),
        "storage_offset": rng.choice([0, 0, 3, 9]),
        "group": "model",
    }
    fields["stride"] = tuple(rng.choice([1, 2, 7, -1, 0]) for _ in fields["shape"])
    if rng.random() < 0.35:
        name = rng.choice(list(fields))
        odd = {"shape": [list(fields["shape"]), (1, -2), (1.0,), (big,), ("3",)], "stride": [(1, 2, 3, 4), (big,), [1]],
               "storage_offset": [-1, 2.0, big, True, None], "name": [None, b"x"], "dtype": [None, ["f"], 4],
               "storage_key": [1, ("k",)], "group": [None, 3]}[name]  # fmt: skip
        fields[name] = rng.choice(odd)
    tensor = TensorInfo("", "float32", (), (), "k")  # every field set below, whatever its type
    for name, value in fields.items():
        object.__setattr__(tensor, name, value)
    return tensor


def test_check_views_in_c_judges_as_the_python_loop(monkeypatch):
    """views.check (check_views' loop in C) against the loop itself on descriptors with fields of other types,
    sizes past 64 bits, negative strides and sizes, empty views, packed and unknown dtypes, storages missing,
    short or holding nothing: the same tensors dropped and the same findings, in the same order."""
    import random

    from ckinspect._native import load
    from ckinspect.formats import pickle_findings
    from ckinspect.model import Checkpoint

    if load("views") is None:
        pytest.skip("ckinspect._native.views not built")
    rng = random.Random(11)
    for case in range(300):
        tensors = [_odd_descriptor(rng, i) for i in range(rng.randint(1, 12))]
        storages = {
            str(k): StorageInfo(
                str(k), "float32", rng.choice([0, 1, 8, 40, 1 << 70]), "x.pt", None if rng.random() < 0.2 else 64
            )  # fmt: skip
            for k in range(7)
            if rng.random() < 0.85
        }
        runs = []
        for compiled in (True, False):
            ckpt = Checkpoint(path="x.pt", format="torch-zip", file_bytes=1)
            ckpt.tensors, ckpt.storages = list(tensors), dict(storages)
            with monkeypatch.context() as m:
                if not compiled:
                    m.setattr(pickle_findings, "load_native", lambda name: None)
                pickle_findings.check_views(ckpt)
            runs.append(([id(t) for t in ckpt.tensors], [(f.code, f.message, f.tensor) for f in ckpt.findings]))
        assert runs[0] == runs[1], case
