"""Hostile input: pickles that would run code, and bytes that are not checkpoints at all.

Every payload, if it ever ran, would create a marker file; each test asserts the reader reported
UNSAFE_PICKLE naming the global and that the marker does not exist. One test first proves the
payloads are live by loading them with plain pickle in a throwaway subprocess.
"""

from __future__ import annotations

import builtins
import os
import pickle
import random
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from ckinspect.formats.dcp import read_dcp
from ckinspect.formats.errors import UnsafePickle
from ckinspect.formats.pickle_file import read_pickle
from ckinspect.formats.torch_legacy import read_torch_legacy
from ckinspect.formats.torch_zip import read_torch_zip
from ckinspect.formats.unpickler import restricted_load

pytestmark = pytest.mark.usefixtures("pickle_paths")  # on the compiled pickle pass and the pure path


class SystemPayload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class ExecPayload(SystemPayload):
    def __reduce__(self):
        return (builtins.exec, (f"open({str(self.marker)!r}, 'w').close()",))


class EvalPayload(SystemPayload):
    def __reduce__(self):
        return (builtins.eval, (f"open({str(self.marker)!r}, 'w').close()",))


class PopenPayload(SystemPayload):
    def __reduce__(self):
        return (subprocess.Popen, (["touch", str(self.marker)],))


PAYLOADS = {
    "system": (SystemPayload, f"{os.system.__module__}.system"),  # posix.system on Linux
    "exec": (ExecPayload, "builtins.exec"),
    "eval": (EvalPayload, "builtins.eval"),
    "popen": (PopenPayload, "subprocess.Popen"),
}


def assert_refused(ckpt, global_name: str, marker: Path) -> None:
    unsafe = [f for f in ckpt.findings if f.code == "UNSAFE_PICKLE"]
    assert unsafe, ckpt.findings
    assert global_name in unsafe[0].message
    assert unsafe[0].severity == "error"
    assert global_name in ckpt.globals
    assert not marker.exists(), "a hostile pickle ran"


def test_payloads_are_live(tmp_path):
    """Plain pickle.loads in a child process does run them: the tests below test something real."""
    blobs = {}
    for case, (payload, _name) in PAYLOADS.items():
        blobs[case] = pickle.dumps(payload(tmp_path / f"LIVE-{case}"), protocol=2)
    script = tmp_path / "load.py"
    script.write_text(
        "import pickle, sys, time\n"
        "for p in sys.argv[1:]:\n    r = pickle.loads(open(p, 'rb').read())\n    getattr(r, 'wait', lambda: 0)()\n"
    )  # fmt: skip
    files = []
    for case, blob in blobs.items():
        (tmp_path / f"{case}.pkl").write_bytes(blob)
        files.append(str(tmp_path / f"{case}.pkl"))
    subprocess.run([sys.executable, str(script), *files], check=True, timeout=60, cwd=tmp_path)
    assert all((tmp_path / f"LIVE-{case}").exists() for case in PAYLOADS)


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("case", list(PAYLOADS))
def test_plain_pickle(tmp_path, case, protocol):
    payload, name = PAYLOADS[case]
    marker = tmp_path / f"PWNED-{case}"
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"weights": [1.0, 2.0], "x": payload(marker)}, protocol=protocol))
    ckpt = read_pickle(path)
    assert_refused(ckpt, name, marker)
    assert ckpt.tree is None  # never decoded
    with pytest.raises(UnsafePickle) as info:
        restricted_load(path.read_bytes())
    assert name in info.value.names
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("case", list(PAYLOADS))
def test_inside_torch_zip(tmp_path, case, protocol):
    payload, name = PAYLOADS[case]
    marker = tmp_path / f"PWNED-{case}"
    path = tmp_path / "evil.pt"
    torch.save({"w": torch.ones(3), "evil": payload(marker)}, path, pickle_protocol=protocol)
    ckpt = read_torch_zip(path)
    assert_refused(ckpt, name, marker)
    assert ckpt.tensors == []  # refused before anything was decoded
    if protocol == 4:
        assert any(f"{name}" in g for g in ckpt.globals)


@pytest.mark.parametrize("case", list(PAYLOADS))
def test_legacy_format(tmp_path, case):
    payload, name = PAYLOADS[case]
    marker = tmp_path / f"PWNED-{case}"
    path = tmp_path / "evil_legacy.pt"
    torch.save({"w": torch.ones(3), "evil": payload(marker)}, path, _use_new_zipfile_serialization=False)
    ckpt = read_torch_legacy(path)
    assert_refused(ckpt, name, marker)


def _resume_dict(payload) -> dict:
    w = torch.randn(4, 4)
    return {
        "model": {"layers.0.w": w, "layers.0.b": torch.zeros(4)},
        "optimizer": {
            "state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.zeros(4, 4), "exp_avg_sq": torch.zeros(4, 4)}},
            "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1], "hook": payload}],
        },
        "step": 3,
        "epoch": 0,
        "rng": {"torch": torch.get_rng_state()},
    }


@pytest.mark.parametrize("case", list(PAYLOADS))
def test_hidden_deep_in_a_resume_dict(tmp_path, case):
    payload, name = PAYLOADS[case]
    marker = tmp_path / f"PWNED-{case}"
    path = tmp_path / "resume.pth"
    torch.save(_resume_dict(payload(marker)), path)
    ckpt = read_torch_zip(path)
    assert_refused(ckpt, name, marker)
    assert "can run code" in ckpt.findings[0].message
    legacy = tmp_path / "resume_legacy.pth"
    torch.save(_resume_dict(payload(marker)), legacy, _use_new_zipfile_serialization=False)
    assert_refused(read_torch_legacy(legacy), name, marker)


def test_every_dangerous_global_is_listed(tmp_path):
    markers = [tmp_path / f"PWNED-{case}" for case in PAYLOADS]
    path = tmp_path / "all.pt"
    torch.save({case: payload(m) for (case, (payload, _)), m in zip(PAYLOADS.items(), markers, strict=True)}, path)
    ckpt = read_torch_zip(path)
    message = ckpt.findings[0].message
    for _payload, name in PAYLOADS.values():
        assert name in message
    assert not any(m.exists() for m in markers)


def test_dcp_metadata_payload(tmp_path):
    import torch.distributed.checkpoint as dcp

    folder = tmp_path / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"w": torch.ones(2)}, checkpoint_id=str(folder))
    marker = tmp_path / "PWNED-dcp"
    (folder / ".metadata").write_bytes(pickle.dumps(SystemPayload(marker), protocol=4))
    assert_refused(read_dcp(folder), PAYLOADS["system"][1], marker)


def test_user_classes_are_unsafe_but_not_called_dangerous(tmp_path):
    path = tmp_path / "cfg.pkl"
    # what pickling a dataclass defined in a training script produces
    path.write_bytes(b"\x80\x02c__main__\nTrainConfig\n)\x81}X\x02\x00\x00\x00lrG?PbM\xd2\xf1\xa9\xfcsb.")
    ckpt = read_pickle(path)
    assert [f.code for f in ckpt.findings] == ["UNSAFE_PICKLE"]
    assert "__main__.TrainConfig" in ckpt.findings[0].message
    assert "can run code" not in ckpt.findings[0].message


# --- not checkpoints at all -------------------------------------------------------------------

NOT_CHECKPOINTS = {
    "empty": b"",
    "text": b"this is a README, not a checkpoint\n" * 20,
    "lfs": b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"a" * 64 + b"\nsize 123456\n",
    "json": b'{"step": 3, "weights": [1, 2, 3]}',
    "zip_magic_only": b"PK\x03\x04" + b"\x00" * 26,
    "memo_bomb": b"\x80\x02N" + b"r" + struct.pack("<I", 0x3FFFFFFF) + b".",
    **{f"random{i}": random.Random(i).randbytes(random.Random(i).randint(1, 5000)) for i in range(12)},
}


@pytest.mark.parametrize("name", list(NOT_CHECKPOINTS))
def test_readers_never_raise_on_garbage(tmp_path, name):
    data = NOT_CHECKPOINTS[name]
    path = tmp_path / f"{name}.bin"
    path.write_bytes(data)
    for reader in (read_torch_zip, read_torch_legacy, read_pickle):
        ckpt = reader(path)
        assert ckpt.findings, (reader.__name__, name)
        assert {f.code for f in ckpt.findings} <= {"CORRUPT", "UNSAFE_PICKLE", "ALLOWLIST_NEEDED"}
    folder = tmp_path / f"{name}_dcp"
    folder.mkdir()
    (folder / ".metadata").write_bytes(data)
    assert read_dcp(folder).findings


def test_garbage_inside_a_torch_zip(tmp_path):
    src = tmp_path / "a.pt"
    torch.save({"w": torch.ones(3)}, src)
    data = bytearray(src.read_bytes())
    start = data.index(b"\x80\x02")  # data.pkl's first bytes
    rng = random.Random(0)
    for trial in range(20):
        bad = bytearray(data)
        for _ in range(4):
            pos = start + rng.randrange(0, 150)
            bad[pos] = rng.randrange(256)
        path = tmp_path / f"bad{trial}.pt"
        path.write_bytes(bytes(bad))
        ckpt = read_torch_zip(path)
        assert ckpt.findings or ckpt.tensors  # a flipped byte may still leave a valid pickle: then CRC says so
        assert all(f.code in ("CORRUPT", "UNSAFE_PICKLE", "ALLOWLIST_NEEDED") for f in ckpt.findings)


# --- pickles that stay within the allowlist but try to bend the stand-ins ---------------------


def test_build_cannot_modify_stand_ins_for_the_next_file(tmp_path):
    from ckinspect.formats.errors import CorruptPickle

    # GLOBAL collections.OrderedDict, then BUILD with slot state {'__setstate__': None} on the class itself
    poison = b"\x80\x02ccollections\nOrderedDict\nN}X\x0c\x00\x00\x00__setstate__N s\x86b."
    with pytest.raises(CorruptPickle):
        restricted_load(poison)
    # the same trick on the storage type singleton and on a rebuild function
    for target in (b"ctorch.storage\nUntypedStorage\n", b"ctorch._utils\n_rebuild_tensor_v2\n", b"ctorch\nSize\n",
                   b"ctorch\nTensor\n"):  # fmt: skip
        with pytest.raises(CorruptPickle, match="tries to"):
            restricted_load(b"\x80\x02" + target + b"N}X\x05\x00\x00\x00dtypeX\x07\x00\x00\x00float64s\x86b.")
    path = tmp_path / "ok.pt"
    torch.save({"a": torch.zeros(2, dtype=torch.float8_e4m3fn), "od": __import__("collections").OrderedDict(x=1)}, path)
    ckpt = read_torch_zip(path)
    assert ckpt.findings == [] and ckpt.tensors[0].dtype == "float8_e4m3fn" and ckpt.tree["od"] == {"x": 1}


_BOGUS_SHAPE = b"}X\x05\x00\x00\x00shapeX\x03\x00\x00\x00abcs"


@pytest.mark.parametrize(
    "state",
    [_BOGUS_SHAPE, b"N" + _BOGUS_SHAPE + b"\x86"],  # a __dict__ state, and a (None, slots) state
    ids=["dict-state", "slot-state"],
)
def test_build_on_a_tensor_descriptor_is_caught(tmp_path, state):
    src = tmp_path / "a.pt"
    torch.save({"w": torch.ones(3)}, src)
    import zipfile

    with zipfile.ZipFile(src) as z:
        pkl = z.read("a/data.pkl")
    # after the tensor is rebuilt (the REDUCE before SETITEMS), BUILD it with a bogus shape
    evil = pkl[:-2] + state + b"b" + pkl[-2:]
    assert evil != pkl
    bad = tmp_path / "bad.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, evil if info.filename.endswith("data.pkl") else zin.read(info))
    ckpt = read_torch_zip(bad)
    assert [f.code for f in ckpt.findings] == ["CORRUPT"]
    assert "a pickle tries to rewrite a tensor descriptor" in ckpt.findings[0].message
    assert ckpt.tensors == []


def test_allocation_bombs_are_refused():
    from ckinspect.formats.errors import CorruptPickle

    for bomb in (
        b"\x80\x02c__builtin__\nbytes\nJ\xff\xff\xff\x7f\x85R.",
        b"\x80\x02c__builtin__\nbytearray\nJ\xff\xff\xff\x7f\x85R.",
    ):
        with pytest.raises(CorruptPickle):
            restricted_load(bomb)


def test_payload_in_another_pickle_of_the_archive(tmp_path):
    import zipfile

    src = tmp_path / "a.pt"
    torch.save({"w": torch.ones(3)}, src)
    marker = tmp_path / "PWNED-extra"
    bad = tmp_path / "extra.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
        zout.writestr("a/constants.pkl", pickle.dumps(SystemPayload(marker), protocol=2))
    ckpt = read_torch_zip(bad)
    assert_refused(ckpt, PAYLOADS["system"][1], marker)
    assert "constants.pkl" in ckpt.findings[0].message
    assert ckpt.metadata.get("torchscript") is True


@pytest.mark.parametrize("legacy", [False, True])
def test_report_cli_exits_1_and_nothing_runs(tmp_path, legacy):
    """End to end through `ckinspect --report`."""
    import json

    from tests.conftest import run_cli

    marker = tmp_path / "PWNED-cli"
    path = tmp_path / "resume.pth"
    torch.save(_resume_dict(SystemPayload(marker)), path, _use_new_zipfile_serialization=not legacy)
    result = run_cli("--report", path, "--format", "json", "--quick")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    codes = [f["code"] for f in report["files"][0]["findings"]]
    assert "UNSAFE_PICKLE" in codes
    assert not marker.exists()


@pytest.mark.parametrize("slot", [2, 4])
def test_legacy_payload_in_a_header_or_key_list_pickle(tmp_path, slot):
    # every pickle of the legacy stream is scanned, not only the object pickle
    from ckinspect.formats.torch_legacy import MAGIC_NUMBER, PROTOCOL_VERSION

    marker = tmp_path / f"PWNED-slot{slot}"
    parts = [MAGIC_NUMBER, PROTOCOL_VERSION, {"protocol_version": 1001, "little_endian": True}, {"step": 1}, []]
    parts[slot] = SystemPayload(marker)
    path = tmp_path / "crafted.pt"
    path.write_bytes(b"".join(pickle.dumps(p, protocol=2) for p in parts))
    assert_refused(read_torch_legacy(path), PAYLOADS["system"][1], marker)
