"""Errors the user caused or can act on: the CLI prints them as one line and exits 2."""


class CkinspectError(Exception):
    """A usage or environment problem: a missing path, an unwritable output, a refused action."""
