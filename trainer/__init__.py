"""A small, real trainer whose resume files continue a run bit for bit (README, "The trainer")."""

from ckinspect.vocab import TRAINER_FORMAT as FORMAT

__all__ = ["FORMAT"]
