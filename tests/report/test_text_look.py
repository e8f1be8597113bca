"""`--report`, `diff --report` and `drift --report` print as one tool: same width rule, same light tables,
colour only on a terminal, and at 80 columns the trainer's tensor names stay whole."""

import re

import pytest

from ckinspect.report import diff_report, drift_report
from tests.conftest import REPO, run_cli

SAMPLES = REPO / "samples"
HEAVY_BOX = set("┃━╇│┏┓┗┛")
ANSI = re.compile(r"\x1b\[")

COMMANDS = {
    "report": ["--report", "--quick", SAMPLES / "stopped-30" / "tiny_resume.pth"],
    "diff": [
        "diff",
        SAMPLES / "straight-60" / "tiny_resume.pth",
        SAMPLES / "stopped-30" / "tiny_resume.pth",
        "--report",
    ],
    "drift": ["drift", SAMPLES / "resumed-60" / "tiny_resume.pth", "--report"],
}


def run_at(columns, *args):
    return run_cli(*args, env={"COLUMNS": str(columns)})


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_80_columns_light_tables_no_colour_in_a_pipe(command):
    proc = run_at(80, *COMMANDS[command])
    assert proc.returncode in (0, 1), proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert not HEAVY_BOX & set(proc.stdout) and not ANSI.search(proc.stdout)
    assert "─" * 40 in proc.stdout  # the header rule every table shares
    if command != "report":  # the trainer's longest tensor name stays whole on its row
        assert any(line.startswith("model.layers.1.attn_norm.weight ") for line in lines)


def test_summary_of_the_samples_keeps_each_path_on_its_row_at_80_columns():
    proc = run_at(80, "--report", "--quick", SAMPLES)
    assert proc.returncode == 0, proc.stderr
    summary = proc.stdout[proc.stdout.index("summary of 14 checkpoints in") :].split("\n\n")[0].splitlines()
    rows = [line for line in summary if ".pth" in line]
    assert len(rows) == 14 and max(map(len, summary)) <= 80
    # the longest: ablation-fresh-optimizer/tiny_resume.pth, 40 characters, once folded at 36
    assert any(row.startswith("ablation-fresh-optimizer/tiny_resume.pth ") for row in rows)


def test_wider_columns_are_used_and_drift_adds_absolute_errors():
    narrow, wide = run_at(80, *COMMANDS["drift"]).stdout, run_at(120, *COMMANDS["drift"]).stdout
    assert max(map(len, wide.splitlines())) > 80
    assert "fp16" in narrow and narrow.count("max |Δ|") == 2  # summary and logit tables only
    assert wide.count("max |Δ|") == 4  # plus fp16 and bf16 per tensor


def test_diff_table_names_what_changed_and_where():
    def change(name, reason, a, b, n_diff, numel, first):
        return {
            "name": name,
            "reason": reason,
            "max_abs_diff": 1.0,
            "max_rel_diff": 0.5,
            "n_diff": n_diff,
            "numel": numel,
            "first_index": first,
            "a": {"name": name, **a},
            "b": {"name": name, **b},
        }

    f32 = {"dtype": "float32", "shape": [40, 8]}
    diff = {
        "a": "a.pt",
        "b": "b.pt",
        "match": "names matched exactly",
        "identical": False,
        "same": 1,
        "only_a": [],
        "only_b": [],
        "atol": 0.0,
        "changed": [
            change("tok.weight", "values", f32, f32, 1, 320, [2, 3]),
            change("head.weight", "dtype", f32, {"dtype": "float16", "shape": [40, 8]}, 320, 320, [0, 0]),
        ],
    }
    assert max(map(len, diff_report.render_text(diff, width=80).splitlines())) <= 80
    text = diff_report.render_text(diff, width=80)
    assert re.search(r"tok\.weight\s+values\s+1\s+0\.5\s+1 \(0\.3%\)\s+\[2,3\]", text)
    assert re.search(r"head\.weight\s+dtype float32 -> float16\s+1\s+0\.5\s+all 320\s+\[0,0\]", text)
    text = diff_report.render_text(diff, width=100)  # wider: the dtype gets its column (DROP_ORDER)
    assert re.search(r"tok\.weight\s+values\s+float32\s+1\s+0\.5\s+1 \(0\.3%\)\s+\[2,3\]", text)
    assert re.search(r"head\.weight\s+dtype\s+float32 -> float16\s+1\s+0\.5\s+all 320\s+\[0,0\]", text)
    diff["changed"] = diff["changed"][1:]  # one kind of change: it moves to the title, first-at zeros go
    text = diff_report.render_text(diff, width=80)
    assert "changed tensors: dtype float32 -> float16" in text and "first at" not in text
    assert ANSI.search(diff_report.render_text(diff, width=80, color=True))


def test_drift_text_colours_only_when_asked():
    stats = {"max_abs": 0.0, "max_rel": 0.0, "overflow": 0, "underflow": 0, "worst_tensor": None}
    drift = {
        "path": "w.pt",
        "summary": {"tensors": 0, "values": 0, "fp16": stats, "bf16": stats},
        "weights": [],
        "logits": None,
        "logits_skipped": "no model",
        "findings": [
            {"code": "FP16_OVERFLOW", "severity": "warning", "message": "w: 1 values become inf", "tensor": "w"}
        ],
    }
    plain, coloured = drift_report.render_text(drift), drift_report.render_text(drift, color=True)
    assert "! FP16_OVERFLOW w: 1 values become inf" in plain and not ANSI.search(plain)
    assert ANSI.search(coloured)
