"""`ckinspect drift PATH --report`: fp16/bf16 round-trip error of every weight, and logit drift where the
model is known. Exit 1 when values would overflow in fp16 and --fail-on is warning; 2 on errors."""

from __future__ import annotations

import argparse

from ckinspect.model import Finding, fails
from ckinspect.vocab import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, CkinspectError


def run(args: argparse.Namespace) -> int:
    from ckinspect.analysis import drift
    from ckinspect.analysis.scan import terminal_progress
    from ckinspect.api import open_checked
    from ckinspect.commands.diff import _unreadable
    from ckinspect.commands.emit import emit, render_ci, text_layout
    from ckinspect.formats.discover import model_folder_weights
    from ckinspect.report import drift_report
    from ckinspect.vocab import FP8_FORMATS, LOGIT_FORMATS

    ckpt = open_checked(model_folder_weights(args.path) or args.path)
    why = _unreadable(ckpt)
    if why:
        raise CkinspectError(f"cannot measure drift: {why}")
    with terminal_progress("rounding weights", enabled=not getattr(args, "no_progress", False)) as progress:
        drifts = drift.weight_drift(ckpt, progress)
    formats = LOGIT_FORMATS + (FP8_FORMATS if getattr(args, "fp8", False) else ())
    given = _config_file(getattr(args, "config", None))
    logits, reason = drift.logit_drift_or_why(
        ckpt, drifts, formats, whole=getattr(args, "whole_model", False), config=given
    )
    findings = [
        Finding("FP16_OVERFLOW", f"{d.name}: {d.fp16.overflow:,} values become inf when stored as float16", d.name)
        for d in drifts
        if d.fp16.overflow and d.dtype != "float16"
    ]
    data = drift_report.drift_json(ckpt, drifts, logits, reason)
    data["findings"] = [f.to_json() for f in findings]
    fmt = getattr(args, "format", "text")
    if fmt in ("sarif", "junit"):
        from ckinspect.report.subjects import Subject

        subject = Subject(str(ckpt.path), ckpt.path, findings)
        text = render_ci(fmt, [subject], args, f"ckinspect drift {ckpt.path}")
    elif fmt == "json":
        text = drift_report.render_json(drift_report.build_document(ckpt, data))
    elif fmt == "markdown":
        text = drift_report.render_markdown(data, ckpt)
    else:
        text = drift_report.render_text(data, ckpt, *text_layout(args))
    emit(text, getattr(args, "output", None))
    if any(d.error for d in drifts):
        return EXIT_ERROR
    return EXIT_FINDINGS if fails(findings, getattr(args, "fail_on", "error")) else EXIT_OK


def _config_file(path: str | None) -> dict | None:
    """`--config FILE`: a JSON object with a `model_type` (transformers' config.json) or nanoGPT's model_args
    (n_layer, n_head, n_embd ...), or one line why not."""
    if path is None:
        return None
    import json

    from ckinspect.analysis.bare_models import NANOGPT_ARGS

    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except OSError as exc:
        raise CkinspectError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CkinspectError(f"{path}: not JSON ({exc})") from None
    if not isinstance(config, dict) or not (isinstance(config.get("model_type"), str) or NANOGPT_ARGS & config.keys()):
        raise CkinspectError(f"{path}: not a model config (a JSON object with a model_type, as config.json has, "
                             "or nanoGPT's model_args)")  # fmt: skip
    return config
