"""ckinspect's Python API against its CLI: the same checkpoints give the same JSON, key for key.

The CLI's JSON is the oracle here (itself tested against torch elsewhere): `inspect(p).to_json()` is
`--report p --format json`'s file entry, `diff(a, b).to_json()` the `diff` of `diff a b --report
--format json`, `last_good(d)` the path `last-good d` prints and `judge_run(d).to_json()` its JSON's `run`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ckinspect
from tests.conftest import REPO, cli_env, run_cli
from tests.helpers.shards import write_set
from tests.helpers.torch_files import cut, save_resume

REPORT_CASES = [
    "good_resume.pth",
    "no_rng_resume.pth",
    "fp16_resume.pth",
    "mismatch_resume.pth",
    "weights.pth",
    "bloat.pth",
    "nan_weights.pth",
    "dcp",
    "hf_folder/model.safetensors",
]


def _cli_json(*args) -> dict:
    result = run_cli(*args, "--format", "json")
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def _path(ckpts, case: str) -> Path:
    head, _, tail = case.partition("/")
    return ckpts[head] / tail if tail else ckpts[head]


@pytest.mark.parametrize("quick", [False, True], ids=["scan", "quick"])
@pytest.mark.parametrize("case", REPORT_CASES)
def test_inspect_equals_the_json_report(ckpts, case, quick):
    path = _path(ckpts, case)
    report = ckinspect.inspect(path, quick=quick)
    entry = _cli_json("--report", path, *(["--quick"] if quick else []))["files"][0]
    assert json.loads(json.dumps(report.to_json())) == entry
    assert (str(report.path), report.format, report.optimizer_share) == (
        entry["path"],
        entry["format"],
        entry["optimizer_share"],
    )
    assert report.metadata == entry["metadata"]
    assert [f.to_json() for f in report.findings] == entry["findings"]
    assert [(t.name, t.dtype, list(t.shape), t.group) for t in report.tensors] == [
        (t["name"], t["dtype"], t["shape"], t["group"]) for t in entry["tensors"]
    ]


def test_inspect_names_the_finding_of_each_damage(ckpts, tmp_path):
    assert {f.code for f in ckinspect.inspect(ckpts["nan_weights.pth"]).findings} == {"NONFINITE"}
    nan = next(f for f in ckinspect.inspect(ckpts["nan_weights.pth"]).findings if f.code == "NONFINITE")
    assert (nan.severity, nan.tensor) == ("error", "1.weight")
    assert ckinspect.inspect(ckpts["nan_weights.pth"], quick=True).findings == []  # quick reads no value
    assert [f.code for f in ckinspect.inspect(ckpts["mismatch_resume.pth"]).errors] == ["OPTIMIZER_MISMATCH"]
    short = cut(shutil.copy(ckpts["good_resume.pth"], tmp_path / "short.pth"), 0.6)
    report = ckinspect.inspect(short)
    assert "CORRUPT" in {f.code for f in report.findings}
    assert json.loads(json.dumps(report.to_json())) == _cli_json("--report", short)["files"][0]


def test_inspect_a_sharded_set_and_its_damage(tmp_path):
    for damaged in (False, True):
        index = write_set(tmp_path / str(damaged), damaged=damaged)
        report = ckinspect.inspect(index)
        assert report.format == "sharded"
        assert json.loads(json.dumps(report.to_json())) == _cli_json("--report", index)["files"][0]
        assert bool(report.errors) is damaged


@pytest.mark.remote
def test_inspect_a_url_as_the_cli_does(samples_server):
    url = f"{samples_server.url}/resumed-60/tiny_resume.pth"
    report = ckinspect.inspect(url)
    assert str(report.path) == url
    assert json.loads(json.dumps(report.to_json())) == _cli_json("--report", url)["files"][0]


@pytest.mark.parametrize(
    ("a", "b", "options"),
    [
        ("straight-60/tiny_resume.pth", "resumed-60/tiny_resume.pth", {}),
        ("straight-60/tiny_resume.pth", "stopped-30/tiny_resume.pth", {}),
        ("straight-60/tiny_resume.pth", "ablation-from-fp16/tiny_resume.pth", {"only": ["model"]}),
        ("straight-60/tiny_resume.pth", "stopped-30/tiny_resume.pth", {"only": ["model"], "atol": 1.0}),
        ("straight-60/tiny_resume.pth", "straight-60/tiny.pth", {"only": ["model"]}),
    ],
)
def test_diff_equals_the_json_diff(samples, a, b, options):
    result = ckinspect.diff(samples / a, samples / b, **options)
    args = [arg for group in options.get("only", []) for arg in ("--only", group)]
    args += ["--atol", str(options["atol"])] if "atol" in options else []
    status = run_cli("diff", samples / a, samples / b, "--report", "--format", "json", *args)
    document = json.loads(status.stdout)
    assert json.loads(json.dumps(result.to_json())) == document["diff"]
    assert result.identical is document["diff"]["identical"] is (status.returncode == 0)
    assert [c.name for c in result.changed] == [c["name"] for c in document["diff"]["changed"]]
    assert json.loads(json.dumps(result.a.to_json())) == document["files"][0]


def test_diff_of_a_resume_and_the_straight_run(samples):
    assert ckinspect.diff(samples / "straight-60/tiny_resume.pth", samples / "resumed-60/tiny_resume.pth").identical
    result = ckinspect.diff(samples / "straight-60/tiny_resume.pth", samples / "stopped-30/tiny_resume.pth")
    assert (result.identical, result.verdict) == (False, "different")
    assert {c.reason for c in result.changed} == {"values"}
    assert all(c.max_abs_diff > 0 for c in result.changed)


def test_inspect_and_diff_pause_the_collector_as_the_commands_do(samples, monkeypatch):
    """A collector's full pass walks every object a listing made (millions at 640,000 tensors) and frees nothing:
    it took 5.3 of inspect's 14.5 CPU-s there and 10.9 of diff's 28.0. The calls pause it, as the commands do,
    and leave it as they found it."""
    import gc

    from ckinspect.analysis import inspect as inspect_module

    seen: list[bool] = []
    listing = inspect_module.structural_findings

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return listing(*args, **kwargs)

    monkeypatch.setattr(inspect_module, "structural_findings", recording)
    ckinspect.inspect(samples / "straight-60/tiny_resume.pth", quick=True)
    ckinspect.diff(samples / "straight-60/tiny_resume.pth", samples / "stopped-30/tiny_resume.pth", quick=True)
    assert seen == [False, False, False] and gc.isenabled()


def _run_folder(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for step in (10, 20, 30):
        save_resume(run / f"step_{step}.pth", step)
    return run


FLAGS = [([], {}), (["--quick"], {"quick": True}), (["--verify"], {"verify": True})]


def test_last_good_is_the_cli_answer(tmp_path):
    run = _run_folder(tmp_path)
    for flags, options in FLAGS:
        expected = run_cli("last-good", run, *flags)
        assert expected.returncode == 0
        assert str(ckinspect.last_good(run, **options)) == expected.stdout.strip() == str(run / "step_30.pth")
    cut(run / "step_30.pth", 0.5)  # a crash mid-save without the tmp-and-rename: the newest is damaged
    assert ckinspect.last_good(run) == run / "step_20.pth"
    assert run_cli("last-good", run).stdout.strip() == str(run / "step_20.pth")
    for step in (10, 20):
        cut(run / f"step_{step}.pth", 0.5)
    assert ckinspect.last_good(run) is None
    assert run_cli("last-good", run).returncode == 1


def test_last_good_reads_values_unless_quick(tmp_path):
    """NaN weights in the newest save: the values read (the default) make the one before the answer."""
    import torch

    run = _run_folder(tmp_path)
    state = torch.load(run / "step_30.pth", weights_only=True)
    state["model"]["body.weight"][0, 0] = float("nan")
    torch.save(state, run / "step_30.pth")
    for flags, options in FLAGS:
        answer = ckinspect.last_good(run, **options)
        assert answer == run / ("step_30.pth" if options.get("quick") else "step_20.pth")
        assert str(answer) == run_cli("last-good", run, *flags).stdout.strip()


def test_judge_run_equals_the_json_listing(tmp_path):
    run = _run_folder(tmp_path)
    cut(run / "step_30.pth", 0.5)
    for flags, options in FLAGS:
        listing = _cli_json("last-good", run, *flags)["run"]
        assert json.loads(json.dumps(ckinspect.judge_run(run, **options).to_json())) == listing
    verdict = ckinspect.judge_run(run)
    assert [(c.path.name, c.verdict) for c in verdict.candidates] == [
        ("step_10.pth", "good"),
        ("step_20.pth", "good"),
        ("step_30.pth", "damaged"),
    ]
    assert verdict.last_good is not None and verdict.last_good.path == run / "step_20.pth"
    damaged = verdict.candidates[-1]
    assert damaged.reasons and damaged.reasons[0].startswith("CORRUPT: ")
    assert [f.code for f in damaged.held_against] == ["CORRUPT"]


def test_judge_checkpoint_reads_only_that_checkpoint(tmp_path):
    run = _run_folder(tmp_path)
    (run / "step_10.pth").write_bytes(b"garbage")  # another save's damage is not this one's
    judged = ckinspect.judge_checkpoint(run / "step_30.pth")
    assert (judged.path, judged.verdict, judged.step) == (run / "step_30.pth", "good", 30)
    with pytest.raises(ckinspect.CkinspectError, match="is not one checkpoint"):
        ckinspect.judge_checkpoint(run)


def test_errors_are_one_family_and_nothing_prints(ckpts, tmp_path, capsys, monkeypatch):
    with pytest.raises(ckinspect.CkinspectError, match="no such file or folder"):
        ckinspect.inspect(tmp_path / "missing.pth")
    with pytest.raises(ckinspect.CkinspectError, match="no such file or folder"):
        ckinspect.last_good(tmp_path / "missing")
    with pytest.raises(ckinspect.CkinspectError, match="is not a group"):
        ckinspect.diff(ckpts["good_resume.pth"], ckpts["good_resume.pth"], only=["weights"])
    with pytest.raises(ckinspect.CkinspectError, match="holds 2 checkpoints"):
        ckinspect.inspect(ckpts["hf_folder"])

    import ckinspect.analysis.inspect as pipeline

    def broken(*_args, **_kwargs):
        raise KeyError("a bug of ours")

    monkeypatch.setattr(pipeline, "inspect_path", broken)
    with pytest.raises(ckinspect.InternalError, match="internal error: KeyError") as raised:
        ckinspect.inspect(ckpts["good_resume.pth"])
    assert isinstance(raised.value, ckinspect.CkinspectError)
    assert isinstance(raised.value.__cause__, KeyError)
    assert capsys.readouterr() == ("", "")


def test_internal_errors_belong_to_the_family():
    from ckinspect.formats.joblib_walk import JoblibError
    from ckinspect.formats.numpy_file import NpyError
    from ckinspect.io.blobs import UnreadableStorage
    from ckinspect.io.contain import OutsideTarget
    from ckinspect.io.zipdir import ZipError

    for error in (ZipError, UnreadableStorage, NpyError, JoblibError, OutsideTarget, ckinspect.InternalError):
        assert issubclass(error, ckinspect.CkinspectError), error
    assert issubclass(NpyError, ValueError) and issubclass(JoblibError, ValueError)  # as before


PROBE = r"""
import sys, time
start = time.perf_counter()
import ckinspect
imported = time.perf_counter() - start
lazy = "ckinspect.api" not in sys.modules and "numpy" not in sys.modules
report = ckinspect.inspect(sys.argv[1])
result = ckinspect.diff(sys.argv[1], sys.argv[1])
best = ckinspect.last_good(sys.argv[2])
run = ckinspect.judge_run(sys.argv[2])
print(lazy, report.format, result.identical, best is not None, len(run.candidates),
      "torch" in sys.modules, "textual" in sys.modules, "rich" in sys.modules)
"""


def test_the_api_imports_neither_torch_nor_textual(samples):
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, str(samples / "resumed-60/tiny_resume.pth"), str(samples / "interrupted")],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=REPO,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "torch-zip", "True", "True", "2", "False", "False", "False"]


def test_public_names_and_types_ship():
    assert {"inspect", "diff", "last_good", "judge_run", "CkinspectError", "integrations"} <= set(dir(ckinspect))
    assert sorted(ckinspect.__all__) == sorted(["CkinspectError", "InternalError", "__version__", *ckinspect._LAZY])
    assert all(getattr(ckinspect, name) is not None for name in ckinspect.__all__)
    assert ckinspect.Report.__module__ == "ckinspect.api"
    assert (REPO / "ckinspect" / "py.typed").is_file()
    assert '"ckinspect" = ["py.typed"]' in (REPO / "pyproject.toml").read_text()  # shipped as package data
    with pytest.raises(AttributeError):
        ckinspect.no_such_name  # noqa: B018


def test_last_good_of_a_run_not_started_yet(tmp_path):
    with pytest.raises(ckinspect.CkinspectError, match="no such file or folder"):
        ckinspect.last_good(tmp_path / "checkpoints")  # a mistyped path does not start a run afresh
    assert ckinspect.last_good(tmp_path / "checkpoints", missing_ok=True) is None
    (tmp_path / "checkpoints").mkdir()
    assert ckinspect.last_good(tmp_path / "checkpoints") is None  # empty: nothing to resume from


def test_integrations_import_no_framework_until_asked():
    code = (
        "import sys, ckinspect\n"
        "import ckinspect.integrations, ckinspect.integrations.verifier\n"
        "import ckinspect.integrations.accelerate, ckinspect.integrations.dcp\n"
        "print([m for m in ('torch', 'transformers', 'lightning', 'accelerate', 'textual') if m in sys.modules])\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.remote
def test_urls_wherever_the_cli_takes_them(samples_server):
    prefix = f"{samples_server.url}/interrupted/"
    best = ckinspect.last_good(prefix)
    assert (
        str(best) == run_cli("last-good", prefix).stdout.strip() == f"{samples_server.url}/interrupted/tiny_resume.pth"
    )
    assert json.loads(json.dumps(ckinspect.judge_run(prefix).to_json())) == _cli_json("last-good", prefix)["run"]
    a, b = f"{samples_server.url}/straight-60/tiny_resume.pth", f"{samples_server.url}/resumed-60/tiny_resume.pth"
    result = ckinspect.diff(a, b)
    assert result.identical
    assert (
        json.loads(json.dumps(result.to_json()))
        == json.loads(run_cli("diff", a, b, "--report", "--format", "json").stdout)["diff"]
    )
