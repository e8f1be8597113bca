"""Checkpoints judged the moment a training framework writes them, inside the user's own loop.

    from ckinspect.integrations.transformers import CkinspectCallback   # transformers' Trainer
    from ckinspect.integrations.lightning import CkinspectCallback      # Lightning's Trainer
    from ckinspect.integrations.accelerate import verify_state          # after accelerator.save_state()
    from ckinspect.integrations.dcp import verify_dcp, verify_async_save  # torch.distributed.checkpoint

Each module imports its framework, and only that one: importing this package imports none. They share
`Verifier` (integrations.verifier): one worker thread judges each save (ckinspect.judge_checkpoint: only
the files that save wrote) while training goes on, and the training thread collects the verdicts at its
next hook, logs them (logger "ckinspect") and, with `fail_on`, raises `ckinspect.CheckpointRejected`
naming the finding.
"""
