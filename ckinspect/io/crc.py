"""The one CRC-32 of ckinspect: the fastest implementation installed, zlib's when none is.

    crc = crc32(block, crc)          # the zip CRC-32 (same values as zlib.crc32), running
    crc32_combine(crc_a, crc_b, len_b)
    CRC_IMPL                         # "isal", "zlib-ng" or "zlib": which one this process uses

Why: the full value scan reads every stored byte once, and CPython's zlib CRC-32 (a byte-table
loop) was what bound it to the CPU. Both bindings below are vectorised (PCLMULQDQ / VPCLMULQDQ), give
zlib's exact values, release the GIL for large buffers as zlib does (the scan's threads still run side
by side), and ship wheels for the usual platforms. Measured on this project's 2-core machine with
`python bench/bench_crc.py` (512 KiB blocks, the scan's), three runs on a busy machine:

    256 MiB, 1 thread:   ISA-L 2.28-2.51 GB/s   zlib-ng 1.71-1.92 GB/s   zlib 0.66-0.69 GB/s
    32 MiB (in cache):   ISA-L 8.82 GB/s        zlib-ng 6.71 GB/s        zlib 2.11 GB/s
    in the scan itself (CPU s to CRC 1 GiB of page-cached mmap windows): ISA-L 0.137, zlib-ng 0.154, zlib 0.420

An earlier measurement on a quiet machine had zlib-ng ahead (23.6 vs 15.5 GB/s); on every run here
ISA-L came first by about 1.2-1.3x, so ISA-L (`isal`) is tried first, zlib-ng (`zlib-ng`) second,
and zlib last: either binding is 3-4x zlib, and the order between them matters far less than having
one. Re-measured for the fused scan (1 MiB blocks, CPU s per GiB, busy machine): on a block already in
cache zlib-ng 0.08, ISA-L 0.10; as the scan's first touch of each block (memory and page faults
included, `bench/bench_scan.py`) the two were within noise of each other (0.41-0.53 vs 0.46-0.47 for
the whole scan), so the order stays. `CKINSPECT_CRC=zlib` (or `isal`, `zlib-ng`) forces one, for
benchmarks and for the tests that prove the fallback.

Regular dependencies of `pip install ckinspect` wherever their wheels exist (CPython on x86-64 and ARM64;
see pyproject.toml's markers); elsewhere (or with `CKINSPECT_CRC=zlib`) zlib's, which tests/io/test_crc.py
proves gives the same answers.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from types import ModuleType

from ckinspect import settings

Crc32 = Callable[..., int]

_ORDER = ("isal", "zlib-ng", "zlib")


def _module(name: str) -> ModuleType | None:
    try:
        if name == "zlib-ng":
            from zlib_ng import zlib_ng

            return zlib_ng
        if name == "isal":
            from isal import isal_zlib

            return isal_zlib
    except ImportError:
        return None
    return zlib


def _choose() -> tuple[str, ModuleType]:
    forced = settings.crc_backend()
    for name in (forced,) if forced in _ORDER else _ORDER:
        module = _module(name)
        if module is not None:
            return name, module
    return "zlib", zlib


CRC_IMPL, _impl = _choose()
crc32: Crc32 = _impl.crc32


crc32_combine: Callable[[int, int, int], int]  # the backend's own when it has one (below)


def available() -> dict[str, Crc32]:
    """Every CRC-32 implementation installed, by name (zlib always): for the benchmark and the tests."""
    out: dict[str, Crc32] = {}
    for name in _ORDER:
        module = _module(name)
        if module is not None:
            out[name] = module.crc32
    return out


def python_crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC-32 of A+B from crc(A), crc(B) and len(B), as zlib's crc32_combine (which Python does not expose).

    This is what lets two threads checksum different chunks of one storage and still check the
    zip directory's CRC of the whole member.
    """
    return _multmodp(_x2nmodp(len2, 3), crc1) ^ crc2


_POLY = 0xEDB88320  # reflected CRC-32 polynomial


def _multmodp(a: int, b: int) -> int:
    """a(x) * b(x) modulo the CRC polynomial (reflected bit order)."""
    m = 1 << 31
    p = 0
    while True:
        if a & m:
            p ^= b
            if (a & (m - 1)) == 0:
                break
        m >>= 1
        b = (b >> 1) ^ _POLY if b & 1 else b >> 1
    return p


def _powers() -> list[int]:
    table = [1 << 30]  # x^1
    for _ in range(31):
        table.append(_multmodp(table[-1], table[-1]))
    return table


_X2N = _powers()  # x^(2^n) modulo the polynomial


def _x2nmodp(n: int, k: int) -> int:
    """x^(n * 2^k) modulo the polynomial."""
    p = 1 << 31  # x^0
    while n:
        if n & 1:
            p = _multmodp(_X2N[k & 31], p)
        n >>= 1
        k += 1
    return p


crc32_combine = getattr(_impl, "crc32_combine", python_crc32_combine)


def zeros_crc32(length: int) -> int:
    """The CRC-32 of `length` zero bytes, in O(log length) combines and no bytes read: a storage whose zip
    CRC is not this one is not all zeros (the duplicate-storage check skips reading such groups twice)."""
    crc, piece, piece_len = 0, crc32(b"\0"), 1
    while length:
        if length & 1:
            crc = crc32_combine(crc, piece, piece_len)
        piece = crc32_combine(piece, piece, piece_len)
        piece_len *= 2
        length >>= 1
    return crc
