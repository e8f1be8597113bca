"""The one CRC-32: every installed implementation agrees with zlib's, combining works, and without the
fast bindings the scan falls back to zlib and still catches a flipped byte."""

import os
import random
import subprocess
import sys
import zlib

import pytest

from ckinspect.io import crc
from ckinspect.io.crc import python_crc32_combine as python_combine

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def payloads() -> list[bytes]:
    rng = random.Random(14)
    return [b"", b"a", bytes(range(256)) * 3, rng.randbytes(64 << 10) + b"tail", rng.randbytes((1 << 20) + 13)]


@pytest.mark.parametrize("name", sorted(crc.available()))
def test_each_installed_implementation_gives_zlibs_crc_running_and_whole(name):
    impl = crc.available()[name]
    for data in payloads():
        assert impl(data) == zlib.crc32(data)
        running = 0
        for i in range(0, len(data), 4093):  # odd pieces, from memoryviews, as the scan hands them
            running = impl(memoryview(data)[i : i + 4093], running)
        assert running == zlib.crc32(data)


def test_the_fast_binding_is_what_this_install_uses():
    # the test extra installs both bindings: the scan must run on the first, not on zlib's table loop
    assert crc.CRC_IMPL == "isal"
    assert set(crc.available()) >= {"zlib-ng", "isal", "zlib"}


def test_combine_matches_the_crc_of_the_joined_bytes():
    rng = random.Random(3)
    for _ in range(20):
        a, b = rng.randbytes(rng.randrange(0, 5000)), rng.randbytes(rng.randrange(0, 5000))
        whole = zlib.crc32(a + b)
        assert crc.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == whole
        assert python_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == whole


FALLBACK = r"""
import sys
sys.modules["zlib_ng"] = None   # an import of these now fails, exactly as when they are not installed
sys.modules["isal"] = None
from pathlib import Path
from ckinspect.io import crc
from ckinspect.formats import open_checkpoint
from ckinspect.analysis.scan import scan_values
assert crc.CRC_IMPL == "zlib", crc.CRC_IMPL
assert set(crc.available()) == {"zlib"}
result = scan_values(open_checkpoint(Path(sys.argv[1])))
print(crc.CRC_IMPL, result.crc_checked, ",".join(f.code for f in result.findings))
"""


@pytest.mark.parametrize("how", ["missing", "forced"])
def test_without_the_fast_bindings_the_scan_uses_zlib_and_still_finds_a_flipped_byte(tmp_path, how):
    torch = pytest.importorskip("torch")
    from tests.helpers.raw_zip import flip_byte, saved_checkpoint

    path = tmp_path / "ckpt.pt"
    ckpt = saved_checkpoint(path, {"w": torch.arange(4096, dtype=torch.float32), "b": torch.ones(8)})
    flip_byte(path, ckpt.storages[ckpt.tensor("w").storage_key].offset + 1000)
    env = dict(os.environ, PYTHONPATH=REPO)
    code = FALLBACK
    if how == "forced":  # the bindings are installed, but CKINSPECT_CRC picks zlib
        env["CKINSPECT_CRC"] = "zlib"
        code = code.replace('sys.modules["zlib_ng"] = None', "").replace('sys.modules["isal"] = None', "")
        code = code.replace('assert set(crc.available()) == {"zlib"}', "")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, env=env, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["zlib", "2", "CORRUPT"]
