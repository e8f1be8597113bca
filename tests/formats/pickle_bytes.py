"""Hand-written pickle opcodes for the scan and reader tests."""


def sunicode(s: str) -> bytes:
    """SHORT_BINUNICODE: a string as protocol 4 writes it."""
    raw = s.encode()
    return b"\x8c" + bytes([len(raw)]) + raw
