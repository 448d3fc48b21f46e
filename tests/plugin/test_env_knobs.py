"""pipecheck's environment variables are validated like its options (pytest_pipecheck/envvars.py): a value a
variable does not accept, or an empty one, stops the run at start-up with a usage error that names the variable
and what it accepts; ``PIPECHECK_SANITIZER_OVERLAP=off`` used to mean on. And every ``PIPECHECK_*`` variable
the package reads is declared in the one table, so none is read past that check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_pipecheck import envvars
from pytest_pipecheck.envvars import VARIABLES, EnvError

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

PACKAGE = Path(envvars.__file__).resolve().parent

#: set by pipecheck for a sanitizer child's test code, never read by the package (children.CHILD_ENV)
NOT_READ = {"PIPECHECK_CHILD"}

DECODED = [
    ("PIPECHECK_SANITIZER_OVERLAP", "1", "1"), ("PIPECHECK_SANITIZER_OVERLAP", "on", "1"),
    ("PIPECHECK_SANITIZER_OVERLAP", "0", "0"), ("PIPECHECK_SANITIZER_OVERLAP", "off", "0"),
    ("PIPECHECK_SANITIZER_OVERLAP", " False ", "0"), ("PIPECHECK_SANITIZER_OVERLAP", "trail", "trail"),
    ("PIPECHECK_SANITIZER_OVERLAP", "TRAIL", "trail"),
    ("PIPECHECK_SANITIZER_XML", "0", False), ("PIPECHECK_SANITIZER_XML", "yes", True),
    ("PIPECHECK_NO_GPU", "1", True), ("PIPECHECK_NO_GPU", "0", False), ("PIPECHECK_NO_GPU", "off", False),
    ("PIPECHECK_CANARY_DRYRUN", "1", True), ("PIPECHECK_CANARY_DRYRUN", "no", False),
    ("PIPECHECK_TEST_FAKE_TIMER", "return", True),
    ("PIPECHECK_NVCC", "/opt/cuda/bin/nvcc", "/opt/cuda/bin/nvcc"),
]


@pytest.mark.parametrize(("name", "raw", "want"), DECODED)
def test_each_accepted_value_decodes_to_what_it_says(name: str, raw: str, want: object) -> None:
    assert envvars.value(name, {name: raw}) == want


@pytest.mark.parametrize("var", VARIABLES, ids=lambda v: v.name)
def test_unset_is_the_default_and_garbage_or_empty_is_an_error(var: envvars.Variable) -> None:
    assert envvars.value(var.name, {}) == var.unset
    bad = [""] if var.decode is None else ["", "  ", "sometimes"]
    for raw in bad:
        with pytest.raises(EnvError, match=re.escape(var.name)) as err:
            envvars.value(var.name, {var.name: raw})
        assert var.accepts in str(err.value)


def test_every_pipecheck_variable_the_package_reads_is_declared() -> None:
    """A ``PIPECHECK_*`` name in the package's source is a declared variable, or one it sets and never reads;
    and no module reads one from the environment but envvars.py (its check would not see it)."""
    declared = {v.name for v in VARIABLES}
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        for name in set(re.findall(r"\bPIPECHECK_[A-Z][A-Z0-9_]*\b", text)) - {"PIPECHECK_TOOL"}:
            assert name in declared | NOT_READ, f"{path.relative_to(PACKAGE)} names {name}, not in envvars.VARIABLES"
        if path.name != "envvars.py":
            read = re.findall(r"(?:environ\.get|getenv|environ\[)\(?\s*[\"']PIPECHECK_", text)
            assert not read, f"{path.relative_to(PACKAGE)} reads a PIPECHECK_ variable itself: {read}"


def test_every_variable_is_in_the_reference() -> None:
    text = (PACKAGE.parent / "docs" / "reference.md").read_text(encoding="utf-8")
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    for var in VARIABLES:
        assert f"| `{var.name}` | {var.accepts} |" in section, var.name


@pytest.mark.parametrize(("name", "raw"), [(v.name, "sometimes") for v in VARIABLES if v.decode is not None]
                         + [(v.name, "") for v in VARIABLES])
def test_a_bad_value_stops_the_run_at_start_up(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                               name: str, raw: str) -> None:
    monkeypatch.setenv(name, raw)
    pytester.makepyfile("def test_x():\n    raise AssertionError('must not run')\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    why = " is set but empty in the environment" if not raw else f"={raw} in the environment is not a value it accepts"
    result.stderr.fnmatch_lines([f"ERROR: pipecheck: {name}{why}*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
    assert "must not run" not in result.stdout.str()


def test_the_issues_value_through_a_real_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPECHECK_SANITIZER_OVERLAP", "sometimes")
    pytester.makepyfile("def test_x(pipecheck):\n    pass\n")
    result = pytester.runpytest_subprocess("--pipecheck", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pipecheck: PIPECHECK_SANITIZER_OVERLAP=sometimes in the environment is not "
                                 "a value it accepts: it must be 1, 0 or trail*"])


@pytest.mark.parametrize(("raw", "beside", "trails"), [("off", False, False), ("0", False, False),
                                                        ("on", True, False), ("trail", True, True)])
def test_overlap_off_means_off(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, raw: str,
                               beside: bool, trails: bool) -> None:
    """What the sanitizer's parent of a real run makes of the variable (it runs the children beside the tests,
    or to their end before the first test); no GPU is needed to decide that."""
    monkeypatch.setenv("PIPECHECK_SANITIZER_OVERLAP", raw)
    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    pytester.makepyfile("""
        def test_mode(pipecheck, request):
            plugin = request.config.pluginmanager.get_plugin("pipecheck-sanitizer")
            print("MODE", plugin.overlap, plugin.trails)
        """)
    result = pytester.runpytest_inprocess("--pipecheck", "--pipecheck-crash-isolation=off", "-p", "no:cacheprovider",
                                          "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*MODE {beside} {trails}"])


def test_no_gpu_zero_does_not_hide_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """``PIPECHECK_NO_GPU=0`` used to hide them like ``=1``: any value did."""
    from pytest_pipecheck import device

    monkeypatch.setenv("PIPECHECK_NO_GPU", "1")
    assert device.list_devices() == ([], "PIPECHECK_NO_GPU is set")
    monkeypatch.setenv("PIPECHECK_NO_GPU", "0")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")  # then the next reason is the one given, on any machine
    assert device.list_devices() == ([], "CUDA_VISIBLE_DEVICES hides every device")


@pytest.mark.parametrize(("args", "message"), [
    (["--pipecheck-child="], "--pipecheck-child= is empty: it is an internal option*"),
    (["--pipecheck-relay="], "--pipecheck-relay= is empty: it is an internal option*"),
    (["--pipecheck-compare-socket", ""], "--pipecheck-compare-socket= is empty: it is an internal option*"),
    (["--pipecheck-child=racechek"], "--pipecheck-child=racechek names no sanitizer pipecheck runs*"),
])
def test_the_childrens_internal_options_refuse_garbage(pytester: pytest.Pytester, args: list[str],
                                                       message: str) -> None:
    """An empty role would make the process a run the user started (reports written, children started)."""
    pytester.makepyfile("def test_x():\n    raise AssertionError('must not run')\n")
    result = pytester.runpytest_inprocess(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines([f"ERROR: pipecheck: {message}"])
