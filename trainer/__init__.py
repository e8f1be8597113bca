"""A small, real trainer whose resume files continue a run bit for bit (see design.md, "Trainer contract")."""

FORMAT = "ckinspect-trainer/1"
