"""Readers: bytes on disk -> Checkpoint. Never imports torch, never executes anything from a file."""
