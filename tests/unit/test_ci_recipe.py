"""The GPU merge gate as written: .github/workflows/pipecheck-gpu.yml and the GitLab CI job of docs/ci.md.

Both are read as YAML. Every option their pytest command passes must be one that pytest's parser knows
with pipecheck loaded (the parser is built as pytest builds it, and asked), the reports they upload must be
exactly the ones they ask pipecheck and pytest to write, and the steps the gate depends on must be there:
the whole history, the merge base, the GPU runner, the sanitizer extra, the upload of failed runs.

``--pipecheck-compare`` belongs to the compare mode, which is built on a branch of its own. Until that is
merged, pytest's parser does not know the option and
:func:`test_every_option_of_the_recipes_is_one_pytest_knows` fails, naming it: on purpose, since the
recipes would fail the same way on a runner. Nothing here tolerates a missing option.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow (pip install -e '.[dev]' installs it)")

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / ".github" / "workflows" / "pipecheck-gpu.yml"
CI_DOC = ROOT / "docs" / "ci.md"
#: the options that name a report file, and what writes it
REPORT_OPTIONS = ("--pipecheck-json", "--pipecheck-html", "--pipecheck-markdown", "--junitxml")


def _workflow() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    return data


def _gitlab_job() -> dict[str, Any]:
    """The job of docs/ci.md's ``yaml`` blocks that has a ``script`` running pytest."""
    text = CI_DOC.read_text(encoding="utf-8")
    for block in re.findall(r"^```yaml\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        data = yaml.safe_load(block)
        if not isinstance(data, dict):
            continue
        for job in data.values():
            if isinstance(job, dict) and any("pytest" in str(line) for line in job.get("script") or []):
                return job
    raise AssertionError(f"{CI_DOC.relative_to(ROOT)} has no ```yaml block with a job whose script runs pytest")


def _commands(script: str) -> Iterator[list[str]]:
    """The shell commands of ``script``, each as its words (lines joined at a trailing backslash)."""
    joined = re.sub(r"\\\n\s*", " ", script)
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            yield shlex.split(line, comments=True)


def _pytest_args(scripts: list[str], where: str) -> list[str]:
    """The arguments of the one pytest command of ``scripts``."""
    found = []
    for script in scripts:
        for words in _commands(script):
            if "pytest" in words:
                found.append(words[words.index("pytest") + 1:])
    assert len(found) == 1, f"{where}: expected one pytest command, found {len(found)}"
    return found[0]


def _options(args: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for arg in args:
        if arg.startswith("--"):
            name, _, value = arg.partition("=")
            out[name] = value if _ else None
    return out


def _steps() -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = _workflow()["jobs"]["gpu"]["steps"]
    return steps


def _workflow_pytest_step() -> dict[str, Any]:
    steps = [s for s in _steps() if "pytest" in str(s.get("run", ""))]
    assert len(steps) == 1, "the workflow should run pytest in one step"
    return steps[0]


def _workflow_args() -> list[str]:
    return _pytest_args([_workflow_pytest_step()["run"]], str(WORKFLOW.relative_to(ROOT)))


def _gitlab_args() -> list[str]:
    return _pytest_args([str(line) for line in _gitlab_job()["script"]], f"{CI_DOC.relative_to(ROOT)} (GitLab job)")


def test_the_workflow_gates_pull_requests_on_a_gpu_runner_against_the_merge_base() -> None:
    workflow = _workflow()
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as true
    assert "pull_request" in on
    job = workflow["jobs"]["gpu"]
    assert {"self-hosted", "gpu"} <= set(job["runs-on"])
    steps = _steps()
    checkout = next(s for s in steps if str(s.get("uses", "")).startswith("actions/checkout@"))
    assert checkout["with"]["fetch-depth"] == 0, "the merge base must be in the clone"
    base = next(s for s in steps if "git merge-base" in str(s.get("run", "")))
    assert base["env"]["BASE_REF"] == "${{ github.base_ref }}"
    assert 'git merge-base "origin/$BASE_REF" HEAD' in base["run"] and '"sha=' in base["run"]
    assert "$GITHUB_OUTPUT" in base["run"]
    gate = _workflow_pytest_step()
    options = _options(_workflow_args())
    assert options["--pipecheck-compare"] == "$BASE_SHA"
    assert gate["env"]["BASE_SHA"] == "${{ steps." + base["id"] + ".outputs.sha }}"
    assert "--pipecheck" in options and options["--pipecheck-tier"] == "gpu"
    assert "--pipecheck-sanitizer" not in options  # the default tools; the extra pins the version
    assert "no:cacheprovider" not in _workflow_args()  # the sanitizer's per-test costs live in pytest's cache
    install = [words for s in steps for words in _commands(str(s.get("run", ""))) if "install" in words
               and any(w.startswith(".[") for w in words)]
    assert install, "the workflow should install pipecheck from the checkout"
    extras = {e for words in install for w in words if w.startswith(".[") for e in w[2:-1].split(",")}
    assert "sanitizer" in extras and "-e" in install[0]
    assert steps.index(gate) > steps.index(base)


def test_the_workflow_uploads_the_reports_it_asks_for_even_when_the_run_fails() -> None:
    options = _options(_workflow_args())
    written = {options[o] for o in REPORT_OPTIONS}
    assert None not in written and len(written) == len(REPORT_OPTIONS), options
    upload = next(s for s in _steps() if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["if"] == "always()"
    uploaded = {line.strip() for line in upload["with"]["path"].splitlines() if line.strip()}
    assert uploaded == written


def test_the_gitlab_job_runs_the_same_gate_and_keeps_its_reports() -> None:
    job = _gitlab_job()
    assert "gpu" in job["tags"]
    assert str(job["variables"]["GIT_DEPTH"]) == "0"
    options = _options(_gitlab_args())
    assert options["--pipecheck-compare"] == "$CI_MERGE_REQUEST_DIFF_BASE_SHA"
    assert "--pipecheck" in options and options["--pipecheck-tier"] == "gpu"
    written = {options[o] for o in REPORT_OPTIONS}
    assert None not in written and len(written) == len(REPORT_OPTIONS), options
    artifacts = job["artifacts"]
    assert artifacts["when"] == "always"
    assert set(artifacts["paths"]) == written
    assert artifacts["reports"]["junit"] == options["--junitxml"]
    # the workflow and the GitLab job run the same gate
    assert _options(_workflow_args()).keys() == options.keys()


def test_every_option_of_the_recipes_is_one_pytest_knows(pytester: pytest.Pytester) -> None:
    """Fails until the compare mode (``--pipecheck-compare``) is merged: see the module's docstring."""
    from pytest_pipecheck.children import _option_table

    config = pytester.parseconfig()  # pytest's parser, every plugin loaded as in a run: pipecheck's options
    known = _option_table(config)
    assert "--pipecheck-json" in known, "pipecheck's options were not registered: is the plugin installed?"
    unknown = []
    for where, args in ((WORKFLOW.relative_to(ROOT), _workflow_args()),
                        (f"{CI_DOC.relative_to(ROOT)} (GitLab job)", _gitlab_args())):
        for name in _options(args):
            if name not in known:
                unknown.append(f"{where}: {name}")
        # and the whole command line as pytest would read it
        try:
            pytester.parseconfig(*args)
        except (pytest.UsageError, SystemExit) as exc:
            unknown.append(f"{where}: pytest does not accept the command line: {exc}")
    assert not unknown, "options pytest does not know:\n" + "\n".join(unknown)
