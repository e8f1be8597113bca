"""The three renderers draw the same data; JSON keeps to schema 1 with exact bytes."""

import json

import jsonschema
import pytest

from ckinspect.analysis.anatomy import analyze
from ckinspect.analysis.checks import structural_findings
from ckinspect.model import Finding
from ckinspect.report import json_report, markdown, text
from ckinspect.report.schema import SCHEMA_1
from tests.helpers.checkpoints import T, build, model_sd, trainer_resume

LONG = "transformer.h.11.attention.query_key_value_projection_with_a_really_long_name.weight"


def checked(tree, **kw):
    ckpt = analyze(build(tree, **kw))
    ckpt.findings += structural_findings(ckpt)
    return ckpt


@pytest.fixture
def report():
    good = checked(trainer_resume(), path="runs/good_resume.pth")
    bad = checked(trainer_resume(rng=None, model=model_sd("float16")), path="runs/fp16_resume.pth")
    bad.findings.insert(0, Finding("UNSAFE_PICKLE", "names os.system | builtins.exec; never executed"))
    wide = checked(
        {LONG: T((4096, 4096), "bfloat16"), **{f"b{i}": T((2,)) for i in range(40)}},
        path="w.safetensors",
        fmt="safetensors",
    )
    return json_report.build([good, bad, wide])


def test_json_validates_against_schema_1(report):
    jsonschema.validate(report, SCHEMA_1)
    roundtrip = json.loads(json_report.render(report))
    jsonschema.validate(roundtrip, SCHEMA_1)
    assert roundtrip["diff"] is None


def test_json_numbers_are_exact_bytes(report):
    good = report["files"][0]
    params = (16 * 8 + 32 * 8 + 8 * 32 + 8) * 4
    assert good["groups"]["model"] == {"tensor_count": 5, "bytes": params}
    assert good["groups"]["optimizer"] == {"tensor_count": 12, "bytes": 2 * params + 16}
    assert good["groups"]["other"] == {"tensor_count": 0, "bytes": 0}
    assert good["tensor_bytes"] == params * 3 + 16 + 5056
    assert good["optimizer_share"] == pytest.approx((2 * params + 16) / good["tensor_bytes"], abs=1e-6)
    assert good["metadata"]["step"] == 30 and good["metadata"]["world_size"] == 1
    assert good["findings"] == []
    assert len(good["tensors"]) == good["tensor_count"] == 18
    assert report["summary"] == {"files": 3, "errors": 1, "warnings": 2, "infos": 0}


def test_metadata_of_any_kind_becomes_plain_json():
    ckpt = checked(
        {"model": model_sd(), "step": 3, "best": float("inf"), "blob": b"\0" * 9, "odd": object(), "cfg": {1: (2, 3)}}
    )
    entry = json_report.file_entry(ckpt)
    json.dumps(entry, allow_nan=False)
    assert entry["metadata"]["best"] == "inf"
    assert entry["metadata"]["epoch"] is None  # the three schema keys are always there


def test_text_fits_80_columns_and_names_findings(report):
    out = text.render(report, width=80, verbose=True)  # every file's details (without: summary first)
    # only a name wider than the line overflows it, whole, on a line of its own
    assert [line for line in out.splitlines() if len(line) > 80] == [LONG]
    assert "UNSAFE_PICKLE" in out and "RESUME_INCOMPLETE" in out and "HALF_PRECISION_RESUME" in out
    assert "✓ no findings" in out
    assert "32.0 MiB" in out  # humanized, binary units
    assert "largest 12 of 41 tensors" in out
    assert out.rstrip().endswith("3 checkpoints: 1 error, 2 warnings")
    assert "\x1b[" not in out


def test_text_in_color_for_a_terminal(report):
    assert "\x1b[" in text.render(report, width=100, color=True)


def test_markdown_is_a_job_summary(report):
    out = markdown.render(report)
    assert out.startswith("## ckinspect report\n")
    assert "| checkpoint | format | size | tensors | optimizer share | findings |" in out
    assert "| `runs/good_resume.pth` | torch-zip |" in out and "✅ none" in out
    assert "❌ 1 error, 2 warnings" in out
    assert "os.system \\| builtins.exec" in out  # a pipe in a message does not break the table
    assert "<details><summary>Largest tensors (12 of 41)</summary>" in out
    for line in out.splitlines():
        if line.startswith("|"):
            assert line.rstrip().endswith("|")


def test_renderers_agree_on_the_numbers(report):
    share = f"{report['files'][0]['optimizer_share'] * 100:.1f}%"
    assert share in text.render(report, width=80) and share in markdown.render(report)
