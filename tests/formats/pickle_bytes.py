"""Hand-written pickle opcodes for the scan and reader tests."""

import contextlib


def sunicode(s: str) -> bytes:
    """SHORT_BINUNICODE: a string as protocol 4 writes it."""
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw


@contextlib.contextmanager
def run_lengths(short: int):
    """Every window walked with a run pattern that steps over strings under `short` bytes itself."""
    import ckinspect.formats.pickle_scan as pickle_scan

    chosen = pickle_scan._short_args
    pickle_scan._short_args = lambda seen: short
    try:
        yield
    finally:
        pickle_scan._short_args = chosen
