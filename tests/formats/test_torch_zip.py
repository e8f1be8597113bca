"""read_torch_zip against files torch.save really writes (torch is imported here only to make them)."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest
import torch

from ckinspect.formats.torch_zip import read_torch_zip
from ckinspect.formats.unpickler import ArrayInfo
from tests.conftest import REPO, cli_env
from tests.formats.storage_bytes import raw_bytes

pytestmark = pytest.mark.usefixtures("pickle_paths")  # on the compiled pickle pass and the pure path


def codes(ckpt) -> list[str]:
    return [f.code for f in ckpt.findings]


@pytest.fixture(scope="module")
def resume_file(tmp_path_factory) -> tuple[Path, dict]:
    torch.manual_seed(0)
    embed = torch.randn(16, 8)
    model = {
        "embed.weight": embed,
        "head.weight": embed,  # tied: the same tensor twice
        "proj.weight": torch.randn(8, 6).t(),  # transposed view: strides (1, 6)
        "tail": embed[4:],  # a slice: storage_offset 32
        "half": torch.randn(3, 2).half(),
        "bf16": torch.randn(5).bfloat16(),
        "mask": torch.tensor([True, False, True]),
        "ids": torch.arange(7, dtype=torch.int64),
        "param": torch.nn.Parameter(torch.ones(4)),
        "scalar": torch.tensor(2.5),
        "empty": torch.empty(0, 3),
    }
    state = {
        "model": model,
        "optimizer": {
            "state": {0: {"step": torch.tensor(30.0), "exp_avg": torch.zeros(16, 8), "exp_avg_sq": torch.zeros(16, 8)}},
            "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.95), "params": [0]}],
        },
        "step": 30,
        "config": {"dim": 8, "name": "tiny"},
        "rng": {"torch": torch.get_rng_state()},
    }
    path = tmp_path_factory.mktemp("zip") / "resume.pth"
    torch.save(state, path)
    return path, state


def test_lists_names_dtypes_shapes(resume_file):
    path, _ = resume_file
    ckpt = read_torch_zip(path)
    assert ckpt.findings == []
    assert ckpt.format == "torch-zip" and ckpt.file_bytes == path.stat().st_size and ckpt.files == [path]
    by_name = {t.name: t for t in ckpt.tensors}
    assert list(by_name)[:3] == ["model.embed.weight", "model.head.weight", "model.proj.weight"]
    assert by_name["model.embed.weight"].dtype == "float32" and by_name["model.embed.weight"].shape == (16, 8)
    assert by_name["model.half"].dtype == "float16"
    assert by_name["model.bf16"].dtype == "bfloat16"
    assert by_name["model.mask"].dtype == "bool"
    assert by_name["model.ids"].dtype == "int64" and by_name["model.ids"].shape == (7,)
    assert by_name["model.param"].shape == (4,)
    assert by_name["model.scalar"].shape == () and by_name["model.scalar"].numel == 1
    assert by_name["model.empty"].shape == (0, 3)
    assert by_name["optimizer.state.0.exp_avg_sq"].shape == (16, 8)
    assert by_name["rng.torch"].dtype == "uint8"
    assert all(t.group == "other" for t in ckpt.tensors)


def test_views_strides_offsets_and_tied_weights(resume_file):
    path, state = resume_file
    ckpt = read_torch_zip(path)
    by_name = {t.name: t for t in ckpt.tensors}
    proj = by_name["model.proj.weight"]
    assert proj.shape == (6, 8) and proj.stride == (1, 6) and not proj.is_contiguous
    tail = by_name["model.tail"]
    assert tail.storage_offset == 32 and tail.byte_offset == 128
    embed, head = by_name["model.embed.weight"], by_name["model.head.weight"]
    assert embed.storage_key == head.storage_key == tail.storage_key
    assert len({t.storage_key for t in ckpt.tensors}) == len(ckpt.storages)


def test_storages_point_at_the_raw_bytes(resume_file):
    path, state = resume_file
    ckpt = read_torch_zip(path)
    by_name = {t.name: t for t in ckpt.tensors}
    for name, tensor in [("model.embed.weight", state["model"]["embed.weight"]), ("model.bf16", state["model"]["bf16"]),
                         ("model.ids", state["model"]["ids"]), ("model.mask", state["model"]["mask"])]:  # fmt: skip
        storage = ckpt.storages[by_name[name].storage_key]
        assert storage.offset % 64 == 0  # torch aligns stored members
        assert raw_bytes(storage) == bytes(tensor.untyped_storage())
        assert storage.crc32 == zlib.crc32(raw_bytes(storage))
        assert storage.dtype == by_name[name].dtype and storage.location == "cpu"
        assert storage.member.endswith(f"data/{storage.key}")
    assert ckpt.storages[by_name["model.embed.weight"].storage_key].nbytes == 16 * 8 * 4


def test_tree_keeps_scalars_and_structure(resume_file):
    path, _ = resume_file
    ckpt = read_torch_zip(path)
    assert ckpt.tree["step"] == 30
    assert ckpt.tree["config"] == {"dim": 8, "name": "tiny"}
    assert ckpt.tree["optimizer"]["param_groups"][0]["betas"] == (0.9, 0.95)
    assert "torch._utils._rebuild_tensor_v2" in ckpt.globals
    assert ckpt.metadata.get("byteorder") == "little"


def test_bare_tensor_and_parameter(tmp_path):
    torch.save(torch.arange(6).reshape(2, 3), tmp_path / "t.pt")
    ckpt = read_torch_zip(tmp_path / "t.pt")
    assert [(t.name, t.shape, t.dtype) for t in ckpt.tensors] == [("tensor", (2, 3), "int64")]
    torch.save({"p": torch.nn.Parameter(torch.zeros(2, 2))}, tmp_path / "p.pt")
    assert [t.name for t in read_torch_zip(tmp_path / "p.pt").tensors] == ["p"]


def test_new_dtypes_use_untyped_storage_and_v3(tmp_path):
    torch.save({"f8": torch.zeros(3, dtype=torch.float8_e4m3fn), "u16": torch.ones(2, dtype=torch.uint16)},
               tmp_path / "n.pt")  # fmt: skip
    ckpt = read_torch_zip(tmp_path / "n.pt")
    assert ckpt.findings == []
    by_name = {t.name: t for t in ckpt.tensors}
    assert by_name["f8"].dtype == "float8_e4m3fn" and by_name["u16"].dtype == "uint16"
    assert ckpt.storages[by_name["u16"].storage_key].dtype == "uint16"
    assert ckpt.storages[by_name["u16"].storage_key].nbytes == 4


def test_numpy_rng_state_needs_allowlist(tmp_path):
    import numpy as np

    torch.save({"w": torch.zeros(2), "rng": {"numpy": np.random.get_state()}}, tmp_path / "r.pt")
    ckpt = read_torch_zip(tmp_path / "r.pt")
    assert codes(ckpt) == ["ALLOWLIST_NEEDED"]
    message = ckpt.findings[0].message
    assert "_reconstruct" in message and "numpy.dtype" in message and "add_safe_globals" in message
    assert isinstance(ckpt.tree["rng"]["numpy"][1], ArrayInfo)
    assert [t.name for t in ckpt.tensors] == ["w"]


def test_any_archive_folder_name(tmp_path):
    src = tmp_path / "a.pt"
    torch.save({"w": torch.ones(3)}, src)
    renamed = tmp_path / "renamed.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(renamed, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr("other_name/" + info.filename.split("/", 1)[1], zin.read(info))
    ckpt = read_torch_zip(renamed)
    assert ckpt.findings == [] and [t.name for t in ckpt.tensors] == ["w"]
    assert raw_bytes(ckpt.storages[ckpt.tensors[0].storage_key]) == bytes(torch.ones(3).untyped_storage())
    flat = tmp_path / "flat.pt"  # members at the root, as some re-packers write them
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(flat, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename.split("/", 1)[1], zin.read(info))
    ckpt = read_torch_zip(flat)
    assert ckpt.findings == [] and ckpt.storages[ckpt.tensors[0].storage_key].member == "data/0"


def test_deflated_rezip_lists_without_offsets(tmp_path):
    src = tmp_path / "a.pt"
    torch.save({"w": torch.ones(300)}, src)
    deflated = tmp_path / "deflated.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
    ckpt = read_torch_zip(deflated)
    assert ckpt.findings == [] and ckpt.tensors[0].shape == (300,)
    assert ckpt.storages[ckpt.tensors[0].storage_key].offset is None


def test_a_compression_method_torch_cannot_read_is_corrupt(tmp_path):
    import re

    src = tmp_path / "a.pt"
    torch.save({"w": torch.ones(300), "b": torch.zeros(2)}, src)
    data = bytearray(src.read_bytes())
    entries = [m.start() for m in re.finditer(rb"PK\x01\x02", data)]
    entry = next(e for e in entries if data[e + 46 :].startswith(b"a/data/0"))
    data[entry + 10 : entry + 12] = (99).to_bytes(2, "little")  # AES and friends: torch's miniz stops here
    broken = tmp_path / "m99.pt"
    broken.write_bytes(data)
    with pytest.raises(RuntimeError, match="unsupported method"):
        torch.load(broken, weights_only=True)
    ckpt = read_torch_zip(broken)
    assert [(f.code, f.message) for f in ckpt.findings] == [
        ("CORRUPT", "m99.pt: storage a/data/0 uses zip compression method 99, which torch cannot read")
    ]
    assert [t.name for t in ckpt.tensors] == ["w", "b"]


def _rewrite(src: Path, dst: Path, skip: str) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            if not info.filename.endswith(skip):
                zout.writestr(info, zin.read(info))


def test_missing_storage_member_is_corrupt(tmp_path):
    src = tmp_path / "a.pt"
    torch.save({"a": torch.ones(3), "b": torch.zeros(2)}, src)
    _rewrite(src, tmp_path / "b.pt", "data/1")
    ckpt = read_torch_zip(tmp_path / "b.pt")
    assert codes(ckpt) == ["CORRUPT"]
    assert "missing" in ckpt.findings[0].message and "data/1" in ckpt.findings[0].message
    assert [t.name for t in ckpt.tensors] == ["a", "b"]


def test_missing_data_pkl_is_corrupt(tmp_path):
    src = tmp_path / "a.pt"
    torch.save({"a": torch.ones(3)}, src)
    _rewrite(src, tmp_path / "b.pt", "data.pkl")
    ckpt = read_torch_zip(tmp_path / "b.pt")
    assert codes(ckpt) == ["CORRUPT"] and "data.pkl" in ckpt.findings[0].message


def test_truncated_save_is_corrupt_and_lists_what_survived(tmp_path):
    src = tmp_path / "a.pt"
    torch.save({f"w{i}": torch.full((1000,), float(i)) for i in range(4)}, src)
    data = src.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: int(len(data) * 0.6)])
    ckpt = read_torch_zip(cut)
    assert codes(ckpt) == ["CORRUPT"]
    message = ckpt.findings[0].message
    assert "truncated" in message or "cut short" in message
    assert [t.name for t in ckpt.tensors] == ["w0", "w1", "w2", "w3"]
    complete = [s for s in ckpt.storages.values() if s.offset is not None]
    assert 1 <= len(complete) < 4
    for storage in complete:
        key = int(storage.key)
        assert raw_bytes(storage) == bytes(torch.full((1000,), float(key)).untyped_storage())


@pytest.mark.parametrize("cut", [0, 10, 100, -10, -30])
def test_cut_anywhere_never_raises(tmp_path, cut):
    src = tmp_path / "a.pt"
    torch.save({"w": torch.ones(50), "step": 3}, src)
    data = src.read_bytes()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(data[:cut])
    ckpt = read_torch_zip(bad)
    assert "CORRUPT" in codes(ckpt)


def test_flipped_pickle_byte_is_crc_mismatch(tmp_path):
    src = tmp_path / "a.pt"
    torch.save({"w": torch.ones(5), "step": 7}, src)
    data = bytearray(src.read_bytes())
    pos = data.index(b"step")
    data[pos : pos + 4] = b"stop"
    bad = tmp_path / "bad.pt"
    bad.write_bytes(bytes(data))
    ckpt = read_torch_zip(bad)
    assert "CORRUPT" in codes(ckpt) and "CRC" in ckpt.findings[0].message


def test_listing_never_reads_storage_bytes(tmp_path, monkeypatch):
    big = tmp_path / "big.pt"
    torch.save({"w": torch.zeros(4 << 20), "b": torch.zeros(3)}, big)  # 16 MiB of storage
    from ckinspect.io import reader as zipdir  # FileReader, the positioned reads every reader uses

    read = []
    real = zipdir.FileReader.read_at

    def counting(self, offset, length):
        read.append(length)
        return real(self, offset, length)

    monkeypatch.setattr(zipdir.FileReader, "read_at", counting)
    ckpt = read_torch_zip(big)
    assert ckpt.findings == [] and len(ckpt.tensors) == 2
    assert sum(read) < 512 << 10  # the 16 MiB storage is never read


@pytest.fixture(scope="module")
def many_tensors(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("many") / "many.pt"
    torch.save({f"layers.{i}.w": torch.zeros(2) for i in range(50_000)}, path)
    return path


@pytest.mark.slow
def test_fifty_thousand_tensors_list_fast(many_tensors):
    ckpt = read_torch_zip(many_tensors)  # bench/bench_report.py times 50,000 tensors against torch.load
    assert ckpt.findings == []
    assert len(ckpt.tensors) == 50_000 and len(ckpt.storages) == 50_000
    assert ckpt.tensors[49_999].name == "layers.49999.w"


def test_reading_never_imports_torch_or_numpy(resume_file, tmp_path):
    path, _ = resume_file
    code = (
        "import sys, json\n"
        "from ckinspect.formats import torch_zip, torch_legacy, pickle_file, dcp, pickle_scan, unpickler\n"
        "import ckinspect.formats.tree\n"
        f"c = torch_zip.read_torch_zip({str(path)!r})\n"
        "print(json.dumps({'tensors': len(c.tensors), 'torch': 'torch' in sys.modules,"
        " 'numpy': 'numpy' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=cli_env(),
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result == {"tensors": result["tensors"], "torch": False, "numpy": False} and result["tensors"] > 10


def test_protocol_4_zip_resolves_stack_globals(tmp_path):
    w = torch.randn(3, 2)
    torch.save({"w": w, "t": w.t(), "n": torch.arange(4)}, tmp_path / "p4.pt", pickle_protocol=4)
    ckpt = read_torch_zip(tmp_path / "p4.pt")
    assert [f.code for f in ckpt.findings] == ["WEIGHTS_ONLY_REFUSED"]  # torch.load(weights_only=True) lacks FRAME
    assert [(t.name, t.shape, t.stride) for t in ckpt.tensors] == [("w", (3, 2), (2, 1)), ("t", (2, 3), (1, 2)),
                                                                   ("n", (4,), (1,))]  # fmt: skip
    assert "torch._utils._rebuild_tensor_v2" in ckpt.globals


def test_zip64_end_record_is_followed(tmp_path):
    # torch always writes the zip64 end records; saturate the classic record as a >65535-member
    # or >4 GiB file would, so only the zip64 values can be right
    import struct

    src = tmp_path / "a.pt"
    torch.save({"w": torch.arange(10.0), "step": 1}, src)
    data = bytearray(src.read_bytes())
    eocd = data.rfind(b"PK\x05\x06")
    data[eocd + 8 : eocd + 20] = struct.pack("<HHLL", 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
    patched = tmp_path / "zip64.pt"
    patched.write_bytes(bytes(data))
    ckpt = read_torch_zip(patched)
    assert ckpt.findings == [] and ckpt.tree["step"] == 1
    assert raw_bytes(ckpt.storages[ckpt.tensors[0].storage_key]) == bytes(torch.arange(10.0).untyped_storage())


@pytest.mark.parametrize("hostile_under", ["zip64", "end_record"])
def test_two_directories_are_both_judged_and_torch_reads_the_zip64_one(tmp_path, hostile_under):
    """An end record and a zip64 record naming different directories: torch follows the zip64 one
    (listed, judged), and the pickles of the other are judged too."""
    from tests.hostile.corpus import _add_zip64_decoy, _benign_zip_members, _hostile_data_pkl, _swap_pkl, _write_zip

    benign = _benign_zip_members()
    hostile = _swap_pkl(benign, _hostile_data_pkl(tmp_path, "x"))
    path = tmp_path / "m.pt"
    first, second = (benign, hostile) if hostile_under == "zip64" else (hostile, benign)
    _write_zip(path, first)
    _add_zip64_decoy(path, second)
    ckpt = read_torch_zip(path)
    unsafe = [f.message for f in ckpt.findings if f.code == "UNSAFE_PICKLE"]
    assert len(unsafe) == 1 and "posix.system" in unsafe[0]
    assert ("(second zip directory)" in unsafe[0]) == (hostile_under == "end_record")
    assert not (tmp_path / "MARKER_x").exists()


def test_real_module_optimizer_and_scheduler_state(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    sched.step()
    path = tmp_path / "resume.pth"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "step": 1, "rng": {"torch": torch.get_rng_state()}}, path)  # fmt: skip
    ckpt = read_torch_zip(path)
    assert ckpt.findings == []
    names = [t.name for t in ckpt.tensors]
    assert names[:4] == ["model.0.weight", "model.0.bias", "model.2.weight", "model.2.bias"]
    assert "optimizer.state.0.exp_avg" in names and "optimizer.state.3.exp_avg_sq" in names
    assert ckpt.tensor("optimizer.state.0.step").shape == ()
    assert ckpt.tree["optimizer"]["param_groups"][0]["params"] == [0, 1, 2, 3]
    assert ckpt.tree["scheduler"]["last_epoch"] == 1
    weights = ckpt.tensor("model.0.weight")
    storage = ckpt.storages[weights.storage_key]
    assert raw_bytes(storage) == bytes(model[0].weight.detach().untyped_storage())


def test_storage_member_shorter_than_its_views(tmp_path):
    src = tmp_path / "a.pt"
    torch.save({"w": torch.ones(10)}, src)
    short = tmp_path / "short.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(short, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info.filename, data[:16] if info.filename.endswith("data/0") else data)
    ckpt = read_torch_zip(short)
    messages = " | ".join(f.message for f in ckpt.findings)
    assert {f.code for f in ckpt.findings} == {"CORRUPT"}
    assert "holds 16 bytes but the pickle says 40" in messages
    assert "tensor w reaches byte 40" in messages
