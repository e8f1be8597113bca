"""Finding leftover temporaries and judging them from their bytes."""

from __future__ import annotations

import json
import struct

from ckinspect.analysis.leftovers import check_integrity, classify, find_leftovers, main_for_tmp
from tests.helpers.torch_files import cut, many_tensors, save_resume


def _touch(path, data=b"PK\x03\x04junk"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_every_tmp_naming_maps_to_the_file_it_was_meant_to_become(tmp_path):
    main = _touch(tmp_path / "tiny_resume.pth")
    assert main_for_tmp(_touch(tmp_path / "tiny_resume.pth.tmp")).main == main
    assert main_for_tmp(_touch(tmp_path / ".tiny_resume.pth.k3j4h5.tmp")).main == main  # ckinspect.io.atomic style
    assert main_for_tmp(_touch(tmp_path / "tiny_resume.tmp")).main == main  # extension left out of the tmp name
    assert main_for_tmp(_touch(tmp_path / "dcp" / ".metadata.tmp")).main == tmp_path / "dcp" / ".metadata"
    orphan = main_for_tmp(_touch(tmp_path / "orphan.tmp"))
    assert orphan.guessed and orphan.main == tmp_path / "orphan"
    assert main_for_tmp(_touch(tmp_path / "notes.tmp", b"just text")) is None
    _touch(tmp_path / "report.json", b'{"schema": 1}')
    assert main_for_tmp(_touch(tmp_path / ".report.json.a1b2.tmp", b'{"sch')) is None  # not a checkpoint's tmp
    _touch(tmp_path / "latest", b"PK\x03\x04...")
    assert main_for_tmp(_touch(tmp_path / "latest.tmp")).main == tmp_path / "latest"  # extension-less checkpoint


def test_find_leftovers_for_a_file_lists_only_its_own_tmps_and_for_a_folder_all_recursively(tmp_path):
    main = _touch(tmp_path / "a.pt")
    _touch(tmp_path / "a.pt.tmp")
    _touch(tmp_path / ".a.pt.xyz.tmp")
    _touch(tmp_path / "b.pt.tmp")
    _touch(tmp_path / "sub" / "dcp" / ".metadata.tmp")
    _touch(tmp_path / ".ckinspect-quarantine" / "run" / "a.pt.tmp")  # quarantined files are not leftovers
    assert sorted(found.tmp.name for found in find_leftovers(main)) == [".a.pt.xyz.tmp", "a.pt.tmp"]
    names = sorted(str(found.tmp.relative_to(tmp_path)) for found in find_leftovers(tmp_path))
    assert names == [".a.pt.xyz.tmp", "a.pt.tmp", "b.pt.tmp", "sub/dcp/.metadata.tmp"]


def test_a_torch_zip_cut_short_is_not_intact_and_says_so(tmp_path):
    whole = save_resume(tmp_path / "r.pth", step=3)
    assert check_integrity(whole).ok
    for fraction in (0.1, 0.5, 0.95):
        broken = cut(whole, fraction, tmp_path / f"cut{fraction}.pth")
        verdict = check_integrity(broken)
        assert not verdict.ok and verdict.problem


def test_a_flipped_byte_in_a_small_storage_fails_its_crc(tmp_path):
    import torch

    path = tmp_path / "w.pth"
    torch.save({"w": torch.arange(64, dtype=torch.float32)}, path)
    data = bytearray(path.read_bytes())
    data[data.index(struct.pack("<f", 10.0))] ^= 0xFF
    path.write_bytes(bytes(data))
    verdict = check_integrity(path)
    assert not verdict.ok and "CRC" in verdict.problem


def test_a_local_header_whose_name_is_not_utf8_is_a_partial_tmp_not_a_crash(tmp_path):
    import zipfile

    main = save_resume(tmp_path / "run.pth", 30)
    data = bytearray(main.read_bytes())
    member = next(i for i in zipfile.ZipFile(main).infolist() if i.filename.endswith("/data/0"))
    assert member.flag_bits & 0x800  # torch marks its names UTF-8, so zipfile decodes them strictly
    data[member.header_offset + 30 + 5] = 0xB5  # a lone continuation byte in the local header's name
    tmp = tmp_path / "run.pth.tmp"
    tmp.write_bytes(bytes(data))
    verdict = check_integrity(tmp)
    assert not verdict.ok and verdict.problem == f"member {member.filename}: its local header names another file"
    [leftover] = find_leftovers(tmp_path)
    status = classify(leftover)
    assert not status.tmp_complete and status.main_intact and status.main_step == 30


def test_safetensors_whole_cut_and_padded(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "w.safetensors"
    save_file({k: v.contiguous() for k, v in many_tensors(4).items()}, path)
    assert check_integrity(path).ok
    assert "cut short" in check_integrity(cut(path, 0.7, tmp_path / "c.safetensors")).problem
    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    half_header = cut(path, (8 + n // 2) / path.stat().st_size, tmp_path / "h.safetensors")
    assert "header cut short" in check_integrity(half_header).problem
    (tmp_path / "p.safetensors").write_bytes(path.read_bytes() + b"\0" * 8)
    assert "after the last tensor" in check_integrity(tmp_path / "p.safetensors").problem
    header = json.loads(path.read_bytes()[8 : 8 + n])
    assert header  # sanity: it parsed


def test_classify_reads_which_is_newer_from_the_step_not_the_mtime(tmp_path):
    import os

    main = save_resume(tmp_path / "r.pth", step=30, seed=1)
    tmp = save_resume(tmp_path / "r.pth.tmp", step=20, seed=2)
    os.utime(tmp, ns=(main.stat().st_mtime_ns + 10**9,) * 2)  # the tmp looks newer by mtime
    status = classify(find_leftovers(main)[0])
    assert (status.main_step, status.tmp_step, status.newer) == (30, 20, "main")
    assert status.tmp_complete and status.main_intact
    assert "step 30" in status.explain() and "main file is newer" in status.explain()


def _beside_an_identical_tmp(folder, name: str) -> None:
    """`<stem><suffix>` and a byte-identical `<stem>.tmp`: a save that wrote under a suffix-less temporary."""
    import pickle
    import shutil

    import numpy as np

    folder.mkdir()
    main = folder / name
    if name.endswith(".npy"):
        np.save(main, np.arange(10.0))
    else:
        main.write_bytes(pickle.dumps({"weights": [1.0, 2.0]}, protocol=4))
    shutil.copyfile(main, folder / "model.tmp")


def test_a_suffixless_tmp_beside_a_npy_or_pickle_pairs_with_it_and_no_phantom_checkpoint_appears(tmp_path):
    """The one suffix table: `model.tmp` beside `model.npy` (or `model.pickle`) belongs to that file, as beside
    `model.pt`. Once, leftovers knew fewer suffixes than discovery: a phantom checkpoint `model` was reported
    missing, and repair said it would leave the tmp alone."""
    import subprocess
    import sys

    from ckinspect.ops.repair import plan_repairs
    from tests.conftest import cli_env

    for name in ("model.npy", "model.pickle"):
        folder = tmp_path / name.replace(".", "_")
        _beside_an_identical_tmp(folder, name)
        assert main_for_tmp(folder / "model.tmp").main == folder / name
        [action] = plan_repairs(folder).actions
        assert (action.action, action.leftover.main) == ("set-aside", folder / name)
        report = subprocess.run(
            [sys.executable, "-m", "ckinspect", "--report", str(folder), "--format", "json"],
            capture_output=True,
            text=True,
            env=cli_env(),
        )
        files = json.loads(report.stdout)["files"]
        assert [f["path"] for f in files] == [str(folder / name)]
        [finding] = [f for f in files[0]["findings"] if f["code"] == "LEFTOVER_TMP"]
        assert finding["message"].endswith("both hold the same checkpoint byte for byte")
