"""The per-test timeout on every tier (docs/verdicts.md item 25), through real pytest runs.

Nothing here waits on the wall clock: the watchdog's clock is injected (a conftest hands the plugin a
clock the tests move), so a test "runs for 10 s" by moving it. The tests that hang loop forever or
block: the watchdog is the only way out, so the outcome cannot depend on the machine's speed.
"""

from __future__ import annotations

import pytest

from pytest_pipecheck.watchdog import EXIT_HUNG

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

CONFTEST = """
import pytest


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


CLOCK = Clock()


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    plugin = config.pluginmanager.get_plugin("pipecheck-timeout")
    if plugin is not None:
        plugin.clock, plugin.poll, plugin.grace = CLOCK, 0.01, 5.0


@pytest.fixture
def clock():
    return CLOCK
"""

LOOPS = """
import time
import pytest

def spin(clock):
    # an interpreter kernel whose loop never ends; each turn "takes" one second of the injected clock
    while True:
        clock.now += 1.0
        time.sleep(0.001)

def test_loops_forever(clock):
    spin(clock)

def test_after(clock):
    pass
"""


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeconftest(CONFTEST)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=300)


def test_a_test_that_never_ends_fails_naming_the_limit_and_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_k=LOOPS)
    result = _run(pytester, "--pipecheck-timeout=10")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines([
        "*def spin(clock):*",  # the failure shows where the test was stuck
        "*test_k.py::test_loops_forever ran past its timeout of 10 s (from --pipecheck-timeout) in its call*",
    ])


def test_the_default_applies_on_the_cpu_tier_under_pipecheck(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_k=LOOPS)
    result = _run(pytester, "--pipecheck", "--pipecheck-tier=cpu", "--pipecheck-sanitizer=none")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(["*ran past its timeout of 300 s (from pipecheck's default; set --pipecheck-timeout*"])


def test_ini_and_marker_layers(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\npipecheck_timeout = 50\n")
    pytester.makepyfile(test_k="""
        import pytest
        from test_spin import spin

        def test_ini(clock):
            spin(clock)

        @pytest.mark.pipecheck(timeout=7)
        def test_marker(clock):
            spin(clock)

        @pytest.mark.pipecheck(timeout=0)
        def test_off(clock):
            clock.now += 1e9  # far past any limit: with the timeout off nothing fires
        """, test_spin=LOOPS.replace("def test_", "def _no_test_"))
    result = _run(pytester)
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines_random([
        "*test_k.py::test_ini ran past its timeout of 50 s (from ini key pipecheck_timeout)*",
        "*test_k.py::test_marker ran past its timeout of 7 s (from timeout= of the pipecheck marker on "
        "test_k.py::test_marker)*",
    ])


def test_a_blocked_test_is_interrupted_and_a_hung_fixture_errors_its_setup(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_k="""
        import time
        import pytest

        def test_blocks(clock):
            clock.now += 100.0  # past the limit; then block: the watchdog's signal ends the sleep
            time.sleep(600)

        @pytest.fixture
        def stuck(clock):
            clock.now += 100.0
            time.sleep(600)
            yield

        def test_stuck_setup(stuck):
            pass
        """)
    result = _run(pytester, "--pipecheck-timeout=10")
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines_random(["*test_blocks ran past its timeout of 10 s*in its call*",
                                        "*test_stuck_setup ran past its timeout of 10 s*in its setup*"])


@pytest.mark.parametrize("how", ["ignores the signal", "catches the failure"])
def test_a_test_that_cannot_be_stopped_ends_the_run_with_stacks_and_exit_88(pytester: pytest.Pytester,
                                                                              how: str) -> None:
    body = {"ignores the signal": "signal.signal(signal.SIGUSR2, signal.SIG_IGN)\n    spin(clock)",
            "catches the failure": "try:\n        spin(clock)\n    except BaseException:\n        spin(clock)"}[how]
    pytester.makepyfile(test_k=LOOPS.replace("import time", "import signal, time") + f"""
def test_unstoppable(clock):
    {body}
""")
    result = _run(pytester, "--pipecheck-timeout=10", "-k", "unstoppable")
    assert result.ret == EXIT_HUNG
    result.stderr.fnmatch_lines([
        "*test_k.py::test_unstoppable ran past its timeout of 10 s (from --pipecheck-timeout) in its call; it "
        "could not be stopped*exit status 88. Stacks of every thread:",
        "*test_k.py*in spin",  # where the main thread is stuck
    ])


def test_not_registered_in_a_sanitizer_child_which_has_its_own_watchdog(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_k="""
        def test_registered(request):
            assert not request.config.pluginmanager.has_plugin("pipecheck-timeout")
        """)
    result = _run(pytester, "--pipecheck", "--pipecheck-tier=cpu", "--pipecheck-child=racecheck")
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(("args", "message"), [
    (["--pipecheck-timeout=-1"], "`--pipecheck-timeout=-1` from the command line must be >= 0"),
    (["--pipecheck-timeout=soon"], "`--pipecheck-timeout=soon` from the command line must be a number"),
])
def test_a_bad_timeout_is_an_error_naming_its_source(pytester: pytest.Pytester, args: list[str],
                                                     message: str) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


NOT_COUNTING = """
import time
import pytest

def timeout_plugin(request):
    return request.config.pluginmanager.get_plugin("pipecheck-timeout")

def test_waits_for_the_gpu(clock, request):
    with timeout_plugin(request).not_counting():
        for _ in range(200):  # 200 s of other processes' time (its sanitizer children): the watchdog looks on
            clock.now += 1.0
            time.sleep(0.001)
    clock.now += 5.0  # its own time, within its 10 s

@pytest.fixture
def waited_in_setup(clock, request):
    with timeout_plugin(request).not_counting():
        clock.now += 100.0

def test_after_a_wait_in_its_setup(waited_in_setup, clock):
    clock.now += 5.0  # setup and call share one limit: the wait moved it

def test_still_watched_after_a_wait(clock, request):
    with timeout_plugin(request).not_counting():
        clock.now += 100.0
    while True:  # its own time, past its limit
        clock.now += 1.0
        time.sleep(0.001)
"""


def test_time_spent_not_counting_is_not_the_tests(pytester: pytest.Pytester) -> None:
    """A test that waits for this process's sanitizer children before it times a kernel does not spend its
    limit on the wait (sanitizer/beside.py); its own time after the wait is still watched."""
    pytester.makepyfile(test_k=NOT_COUNTING)
    result = _run(pytester, "--pipecheck-timeout=10")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_still_watched_after_a_wait ran past its timeout of 10 s*in its call*"])
