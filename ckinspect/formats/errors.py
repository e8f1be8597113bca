"""Why a pickle was refused. Readers turn these into findings; they never reach the user as tracebacks."""

from __future__ import annotations


class PickleRefused(Exception):
    """Base class: the pickle was not (fully) decoded."""


class UnsafePickle(PickleRefused):
    """The pickle names globals outside the allowlist. Nothing was executed or imported."""

    def __init__(self, names: list[str]):
        self.names = list(names)
        super().__init__("pickle names globals outside the allowlist: " + ", ".join(self.names))


class CorruptPickle(PickleRefused):
    """The bytes are not a well-formed pickle (truncated, unknown opcode, inconsistent stack)."""
