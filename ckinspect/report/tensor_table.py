"""The tensors a screen shows, in the order shown, as CSV or JSON: the JSON report's tensor entries
(report.json_report), so an export says what `--format json` says. ops.export writes it."""

from __future__ import annotations

from ckinspect.model import Checkpoint

EXPORT_FIELDS = ("name", "group", "dtype", "shape", "bytes", "param")


def tensor_table(ckpt: Checkpoint, names: list[str], fmt: str) -> str:
    """`fmt` json: {"path", "tensors": [entries]}; csv: one row per tensor, EXPORT_FIELDS, shape as 3x4."""
    import csv
    import io
    import json

    from ckinspect.analysis.params import optimizer_params
    from ckinspect.report.json_report import tensor_entries

    by_name = {t.name: t for t in ckpt.tensors}
    entries = tensor_entries([by_name[n] for n in names if n in by_name], optimizer_params(ckpt))
    if fmt == "json":
        return json.dumps({"path": str(ckpt.path), "tensors": entries}, indent=1) + "\n"
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, EXPORT_FIELDS, lineterminator="\n")
    writer.writeheader()
    for entry in entries:
        writer.writerow({**entry, "shape": "x".join(map(str, entry["shape"]))})
    return buffer.getvalue()
