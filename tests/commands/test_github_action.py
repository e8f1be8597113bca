"""The composite GitHub Action (action.yml), its shell steps run here as a runner would run them.

The runner's part is played by a small interpreter: each `run:` step goes to bash with the env it declares
(`${{ ... }}` resolved from inputs, github, runner and earlier steps' outputs), GITHUB_OUTPUT and
GITHUB_STEP_SUMMARY files, and the step's `if:` honoured. Anything else in an expression fails the test,
so the action can only use what this interpreter knows.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers.source_tree import PACKAGE_SOURCES, REPO, copy_sources, tracked_sources
from tests.report.ci_files import SAMPLES, clean_weights, hostile_pickle

# one worker runs the install: a module fixture is run once per worker that gets one of the module's tests
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("github-action")]
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def load_action() -> dict:
    import yaml

    return yaml.safe_load((REPO / "action.yml").read_text())


class Runner:
    """Just enough of a GitHub Actions runner for a composite action of bash steps."""

    def __init__(self, action: dict, inputs: dict[str, str], workspace: Path, temp: Path, action_path: Path) -> None:
        self.action = action
        self.action_path = action_path
        self.inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
        unknown = set(inputs) - set(self.inputs)
        assert not unknown, f"the action has no input {unknown}"
        self.inputs.update(inputs)
        self.workspace = workspace
        self.temp = temp
        self.summary = temp / "step_summary.md"
        self.summary.write_text("")
        self.steps: dict[str, dict] = {}
        self.ran: list[str] = []

    def lookup(self, name: str) -> str:
        parts = name.split(".")
        if parts[0] == "inputs" and len(parts) == 2:
            return self.inputs[parts[1]]
        if name == "github.action_path":
            return str(self.action_path)
        if name == "runner.temp":
            return str(self.temp)
        if parts[0] == "steps" and len(parts) == 4 and parts[2] in ("outputs", "outcome"):
            return self.steps.get(parts[1], {}).get("outputs", {}).get(parts[3], "")
        raise AssertionError(f"the test runner does not know ${{{{ {name} }}}}")

    def expand(self, text: str) -> str:
        return EXPRESSION.sub(lambda m: self.lookup(m[1]), str(text))

    def condition(self, text: str | None) -> bool:
        """`if:` of the forms the action uses: `A != 'x'` / `A == 'x'` (A a context name)."""
        if text is None:
            return True
        match = re.fullmatch(r"\s*([\w.-]+)\s*(==|!=)\s*'([^']*)'\s*", EXPRESSION.sub(lambda m: m[1], text))
        assert match, f"the test runner does not understand if: {text}"
        value = self.lookup(match[1])
        return (value == match[3]) == (match[2] == "==")

    def run(self) -> int:
        assert self.action["runs"]["using"] == "composite"
        for index, step in enumerate(self.action["runs"]["steps"]):
            assert step["shell"] == "bash" and "run" in step and "uses" not in step
            assert "${{" not in step["run"], "inputs go through env, never into the script"
            if not self.condition(step.get("if")):
                continue
            output = self.temp / f"output_{index}"
            output.write_text("")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_", "CKINSPECT_"))}
            env.update(
                GITHUB_OUTPUT=str(output),
                GITHUB_STEP_SUMMARY=str(self.summary),
                GITHUB_WORKSPACE=str(self.workspace),
                RUNNER_TEMP=str(self.temp),
                PIP_DISABLE_PIP_VERSION_CHECK="1",
            )
            env.update({k: self.expand(v) for k, v in (step.get("env") or {}).items()})
            proc = subprocess.run(
                ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", step["run"]],
                cwd=self.workspace,
                env=env,
                capture_output=True,
                text=True,
                timeout=1200,
            )
            self.ran.append(step["name"])
            outputs = dict(line.split("=", 1) for line in output.read_text().splitlines() if "=" in line)
            self.steps[step.get("id", str(index))] = {"outputs": outputs, "stdout": proc.stdout, "stderr": proc.stderr}
            if proc.returncode != 0:
                self.failed = (step["name"], proc)
                return proc.returncode
        return 0

    def outputs(self) -> dict[str, str]:
        return {name: self.expand(spec["value"]) for name, spec in self.action["outputs"].items()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The action's install step, run once: ckinspect from the action's files (this checkout's, copied
    as a runner checks out an action) in a virtualenv of its own."""
    temp = tmp_path_factory.mktemp("runner-temp")
    action_path = tmp_path_factory.mktemp("action")
    copy_sources(action_path, tracked_sources((*PACKAGE_SOURCES, "action.yml")))
    action = load_action()
    install = {**action, "runs": {**action["runs"], "steps": action["runs"]["steps"][:1]}}
    runner = Runner(install, {"paths": "."}, temp, temp, action_path)
    status = runner.run()
    assert status == 0, runner.steps["install"]["stderr"][-4000:]  # pip's error is at the end
    return action, temp, action_path, runner.steps["install"]


def run_action(installed, workspace: Path, **inputs: str) -> Runner:
    action, temp, action_path, install = installed
    runner = Runner(action, inputs, workspace, temp, action_path)
    runner.steps["install"] = install  # already run (module fixture): the remaining steps, as a runner would
    report_steps = action["runs"]["steps"][1:]
    runner.action = {**action, "runs": {**action["runs"], "steps": report_steps}}
    runner.status = runner.run()
    return runner


def test_action_yml_is_valid_against_the_github_action_schema():
    """SchemaStore's github-action schema, as check-jsonschema ships it (no network)."""
    import importlib.resources

    import jsonschema

    vendored = importlib.resources.files("check_jsonschema.builtin_schemas.vendor").joinpath("github-actions.json")
    schema = json.loads(vendored.read_text())
    validator = jsonschema.validators.validator_for(schema)(schema)
    assert [e.message for e in validator.iter_errors(load_action())] == []
    broken = load_action()
    del broken["runs"]["steps"][0]["shell"]  # a composite run step without a shell is refused by GitHub
    assert list(validator.iter_errors(broken))


def test_the_install_has_ckinspect_and_no_torch(installed):
    *_, install = installed
    bin_dir = Path(install["outputs"]["bin"])
    version = subprocess.run([str(bin_dir / "ckinspect"), "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("ckinspect ")
    probe = subprocess.run(
        [str(bin_dir / "python"), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
    )
    assert probe.stdout.strip() == "True"


def test_findings_fail_the_job_after_writing_summary_and_sarif(installed, tmp_path):
    workspace = tmp_path / "repo"
    (workspace / "models").mkdir(parents=True)
    hostile_pickle(workspace / "models" / "evil.pkl")
    shutil.copytree(SAMPLES / "interrupted", workspace / "run")
    runner = run_action(installed, workspace, paths="models\nrun", **{"sarif-file": "out/ckinspect.sarif"})
    assert runner.status == 1, runner.steps["report"]["stderr"]
    assert runner.ran == ["Check checkpoints", "Fail on findings"]
    assert "::error title=ckinspect::" in runner.steps["fail"]["stdout"]
    outputs = runner.outputs()
    assert outputs == {"sarif-file": "out/ckinspect.sarif", "exit-code": "1"}
    sarif = json.loads((workspace / "out" / "ckinspect.sarif").read_text())
    found = {
        (r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"])
        for r in sarif["runs"][0]["results"]
    }
    assert found == {("UNSAFE_PICKLE", "models/evil.pkl"), ("LEFTOVER_TMP", "run/tiny_resume.pth")}
    summary = runner.summary.read_text()
    assert "UNSAFE_PICKLE" in summary and "LEFTOVER_TMP" in summary and summary.lstrip().startswith("#")


def test_clean_files_pass_and_warnings_fail_only_when_asked(installed, tmp_path):
    workspace = tmp_path / "repo"
    workspace.mkdir()
    clean_weights(workspace / "w.safetensors")
    shutil.copytree(SAMPLES / "interrupted", workspace / "run")
    runner = run_action(installed, workspace, paths="w.safetensors run")
    assert runner.status == 0 and runner.ran == ["Check checkpoints"]  # LEFTOVER_TMP is a warning
    assert runner.outputs() == {"sarif-file": "ckinspect.sarif", "exit-code": "0"}
    assert "w.safetensors" in runner.summary.read_text()
    runner = run_action(installed, workspace, paths="w.safetensors run", **{"fail-on": "warning", "quick": "true"})
    assert runner.status == 1 and runner.outputs()["exit-code"] == "1"


def test_a_missing_path_is_an_error_not_a_pass(installed, tmp_path):
    runner = run_action(installed, tmp_path, paths="no/such/file.pt")
    assert runner.status == 2 and runner.ran == ["Check checkpoints"]
    assert "no such file or folder" in runner.steps["report"]["stderr"]
    assert runner.outputs()["exit-code"] == "2"
