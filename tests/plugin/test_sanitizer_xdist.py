"""The sanitizer tier under pytest-xdist: one share of the tests per worker, each on its own GPU."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ._sanitizer_fake import _fake, noop_tests

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

pytest.importorskip("xdist")

DATA = Path(__file__).resolve().parents[1] / "data"


def _fake_gpu_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: dict[str, object]) -> Path:
    """Two fake H200s and a fake compute-sanitizer: the share scheduler is the one in use."""
    log = _fake(tmp_path, monkeypatch, plan)
    monkeypatch.setenv("PATH", f"{DATA / 'fakebin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_GPUS", "NVIDIA H200,9.0;NVIDIA H200,9.0")
    monkeypatch.delenv("PIPECHECK_NO_GPU", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return log


def test_each_worker_sanitizes_its_own_share_on_its_own_gpu(pytester: pytest.Pytester, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    log = _fake_gpu_run(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    seen = tmp_path / "seen"
    seen.mkdir()
    pytester.makepyfile(**{f"test_m{m}": f"""
        import os
        import pytest

        @pytest.mark.parametrize("i", range(3))
        def test_k(pipecheck, i):
            if os.environ.get("PIPECHECK_CHILD"):
                name = f"{{pipecheck.nodeid.replace('/', '_').replace(':', '_')}}"
                with open(os.path.join({str(seen)!r}, name), "w") as fh:
                    fh.write(os.environ.get("CUDA_VISIBLE_DEVICES", "unset") + " " + str(pipecheck.seed))

        def test_racy(pipecheck):
            pass
        """ for m in range(2)})
    result = pytester.runpytest_subprocess("-n", "2", "--pipecheck", "--pipecheck-sanitizer=racecheck",
                                           "--pipecheck-json=r.json", "--pipecheck-seed=3", "-p", "xdist")
    result.assert_outcomes(passed=6, failed=2)
    doc = json.loads((pytester.path / "r.json").read_text())
    verdicts = {(r["nodeid"], r["check"]): r["verdict"] for r in doc["results"]}
    # one summary with every test's result, under the test's own node id (no xdist group suffix)
    assert len(verdicts) == 8 and all("@" not in n for n, _ in verdicts)
    assert verdicts[("test_m0.py::test_racy", "sanitizer:racecheck")] == "fail"
    assert verdicts[("test_m1.py::test_k[2]", "sanitizer:racecheck")] == "pass"
    # every sanitizer result names the GPU of the worker whose child ran it, and that child's timing
    san = [r for r in doc["results"] if r["check"] == "sanitizer:racecheck"]
    assert len({r["details"]["gpu"] for r in san}) == 2
    assert all(r["details"]["child_wall_s"] > 0 and r["details"]["child_tests"] >= 1 for r in san)
    # two children, one per worker, over disjoint shares that cover every test
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    shares = [{a for a in argv if "::test_" in a} for argv in calls]
    assert len(calls) == 2 and not shares[0] & shares[1]
    assert shares[0] | shares[1] == {f"test_m{m}.py::test_k[{i}]" for m in range(2) for i in range(3)} | {
        "test_m0.py::test_racy", "test_m1.py::test_racy"}
    # each child ran on its worker's GPU, and the two workers had different GPUs
    gpus = {f.read_text().split()[0] for f in seen.iterdir()}
    assert len(list(seen.iterdir())) == 6 and len(gpus) == 2
    # seeds do not depend on xdist: the same run without it gives each test the same seed
    by_test = {f.name: f.read_text().split()[1] for f in seen.iterdir()}
    for f in seen.iterdir():
        f.unlink()
    serial = pytester.runpytest_subprocess("--pipecheck", "--pipecheck-sanitizer=racecheck", "--pipecheck-seed=3",
                                           "-p", "xdist")
    serial.assert_outcomes(passed=6, failed=2)
    assert {f.name: f.read_text().split()[1] for f in seen.iterdir()} == by_test


@pytest.mark.parametrize("order", ["collection", "cost"])
def test_xdist_shares_gives_each_worker_several_shares_with_the_same_verdicts(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    """``--pipecheck-xdist-shares=2`` under ``-n 2``: four children over disjoint shares that cover every test,
    the race still caught, every other test still passing; in either hand-out order (``cost``: balanced and
    ordered by a durations file where the last module is the costliest)."""
    log = _fake_gpu_run(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    pytester.makeconftest("""
        import json
        import pytest

        @pytest.hookimpl(wrapper=True)
        def pytest_xdist_make_scheduler(config, log):
            sched = yield
            with open("order.json", "w") as fh:
                json.dump({"cost": getattr(sched, "_costs", None) is not None}, fh)
            return sched
    """)
    (pytester.path / ".test_durations").write_text(json.dumps(
        {f"test_m{m}.py::test_{n}": (9.0 if m == 3 else 1.0) for m in range(4) for n in ("k[0]", "k[1]", "k[2]", "racy")}))
    pytester.makepyfile(**{f"test_m{m}": """
        import pytest

        @pytest.mark.parametrize("i", range(3))
        def test_k(pipecheck, i):
            pass

        def test_racy(pipecheck):
            pass
        """ for m in range(4)})
    result = pytester.runpytest_subprocess("-n", "2", "--pipecheck", "--pipecheck-sanitizer=racecheck",
                                           "--pipecheck-xdist-shares=2", f"--pipecheck-xdist-order={order}",
                                           "--pipecheck-json=r.json", "-p", "xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=12, failed=4)
    verdicts = {(r["nodeid"], r["check"]): r["verdict"] for r in json.loads((pytester.path / "r.json").read_text())["results"]}
    assert all(v == ("fail" if "racy" in n else "pass") for (n, _), v in verdicts.items()) and len(verdicts) == 16
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    shares = [{a for a in argv if "::test_" in a} for argv in calls]
    assert len(calls) == 4 and sum(len(s) for s in shares) == 16
    assert set().union(*shares) == {f"test_m{m}.py::test_{n}" for m in range(4) for n in ("k[0]", "k[1]", "k[2]", "racy")}
    # the controller's scheduler was told the order (which share goes first: tests/unit/test_xdist_share_order.py)
    assert json.loads((pytester.path / "order.json").read_text()) == {"cost": order == "cost"}


def test_shares_are_balanced_by_the_sanitizer_seconds_of_the_last_run(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """First run: equal-count shares, and each test's seconds in its child go to pytest's cache. Second
    run: the slow module no longer lands on one worker; its tests are split over both children.

    No wall-clock timing: the seconds the first run measured are replaced in the cache by known ones
    (how a test's seconds are measured is held on an injected clock, tests/unit/test_sanitizer_run_child.py)."""
    log = _fake_gpu_run(tmp_path, monkeypatch, {})
    # the first half of the collection (test_a_slow) is slow under the sanitizer, the second half fast
    pytester.makepyfile(test_a_slow="""
        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_slow(pipecheck, i):
            pass
        """, test_b_fast="""
        import pytest

        @pytest.mark.parametrize("i", range(4))
        def test_fast(pipecheck, i):
            pass
        """)
    slow = {f"test_a_slow.py::test_slow[{i}]" for i in range(4)}

    def shares_of_last_run() -> list[set[str]]:
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        log.unlink()
        return [{a for a in argv if "::test_" in a} for argv in calls]

    args = ("-n", "2", "--pipecheck", "--pipecheck-sanitizer=racecheck", "--pipecheck-json=r.json", "-p", "xdist")
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=8)
    first = shares_of_last_run()
    assert slow in first  # equal counts: the slow module is one worker's whole share
    doc = json.loads((pytester.path / "r.json").read_text())
    seconds = {r["nodeid"]: r["details"]["test_seconds"] for r in doc["results"] if r["check"] == "sanitizer:racecheck"}
    assert len(seconds) == 8 and all(isinstance(v, float) and v >= 0 for v in seconds.values())
    cache_file = pytester.path / ".pytest_cache" / "v" / "pipecheck" / "sanitizer-seconds"
    cache = json.loads(cache_file.read_text())
    assert cache == {n: round(v, 3) for n, v in seconds.items()}  # what each child measured, kept for next run
    cache_file.write_text(json.dumps({n: (5.0 if n in slow else 0.01) for n in cache}))
    # the normal runs were measured too: equal here, so that the sanitizer seconds decide
    run_file = cache_file.parent / "run-seconds"
    assert set(json.loads(run_file.read_text())) == set(seconds)
    run_file.write_text(json.dumps(dict.fromkeys(seconds, 0.01)))
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=8)
    second = shares_of_last_run()
    assert len(second) == 2 and all(share & slow for share in second)  # the slow tests are split
    assert second[0] | second[1] == set(seconds) and not second[0] & second[1]

CRASHING_SHARE = """
    import os

    def test_a(pipecheck):
        pass

    def test_dies(pipecheck):
        if not os.environ.get("PIPECHECK_CHILD"):
            os._exit(3)  # a GPU fault or a killed process takes the whole worker down

    def test_after(pipecheck):
        pass

    def test_last(pipecheck):
        pass
    """


def test_a_test_that_kills_its_worker_fails_once_and_the_rest_of_its_share_still_runs(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The share scheduler must not send the crashing test again to every new worker: that goes on until
    xdist's "maximum crashed workers reached", and the tests after it in its share never run and are never
    reported."""
    _fake_gpu_run(tmp_path, monkeypatch, {})
    pytester.makepyfile(test_m=CRASHING_SHARE)
    result = pytester.runpytest_subprocess("-n", "2", "--pipecheck", "--pipecheck-sanitizer=racecheck",
                                           "--pipecheck-json=r.json", "-p", "xdist")
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(["*worker*crashed while running*test_dies*"])
    result.stdout.no_fnmatch_line("*maximum crashed workers*")
    assert result.stdout.str().count("FAILED test_m.py::test_dies") == 1  # sent to one worker only
    doc = json.loads((pytester.path / "r.json").read_text())
    passed = {r["nodeid"] for r in doc["results"] if r["verdict"] == "pass"}
    assert {"test_m.py::test_after", "test_m.py::test_last", "test_m.py::test_a"} <= passed


def test_tests_that_never_ran_after_workers_crashed_are_reported_as_errors(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no worker left to run them (restarts disabled), the tests after the crash are errors that
    say they never ran, not silently missing from the counts. (Each child to its end before the first test:
    ``test_a`` is reported before ``test_dies`` runs; a worker that dies holding a test's reports is
    test_sanitizer_beside.py's.)"""
    _fake_gpu_run(tmp_path, monkeypatch, {})
    monkeypatch.setenv("PIPECHECK_SANITIZER_OVERLAP", "0")
    pytester.makepyfile(test_m=CRASHING_SHARE)
    result = pytester.runpytest_subprocess("-n", "1", "--max-worker-restart=0", "--pipecheck",
                                           "--pipecheck-sanitizer=racecheck", "-p", "xdist")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("passed") == 1 and outcomes.get("errors") == 2, outcomes
    result.stdout.fnmatch_lines(["*test_m.py::test_after*never ran*", "*test_m.py::test_last*never ran*"])
    assert result.ret != 0


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_a_share_that_cannot_be_sanitized_is_its_tests_error_not_the_sessions(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdist: bool) -> None:
    """A share is sanitized outside any test phase (without xdist: before the first test; under xdist: before
    the first test of the share): an unexpected error there is raised again in the setup of each test that
    wants a sanitizer tool, an error of that test, and the run goes on; a test that wants none still passes.
    (Without xdist the error must not end the session with an INTERNALERROR and no test reported.)"""
    _fake_gpu_run(tmp_path, monkeypatch, {})
    pytester.makeconftest("""
        from pytest_pipecheck.sanitizer.parent_plugin import SanitizerPlugin

        def broken(self, items):
            raise RuntimeError("sanitizer set-up broke")

        SanitizerPlugin._run_all = broken
    """)
    # two tests that want racecheck, one that wants no tool, one that does not use pipecheck
    pytester.makepyfile(test_m=noop_tests("test_a", "test_b") + (
        '\n\n@pytest.mark.pipecheck(sanitizer="none")\ndef test_no_sanitizer(pipecheck):\n    pass\n'
        "\n\ndef test_plain():\n    pass\n"))
    args = ["--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "no:cacheprovider"]
    result = pytester.runpytest_subprocess(*(["-n", "2", "-p", "xdist"] if xdist else []), *args)
    text = result.stdout.str()
    assert "INTERNALERROR" not in text, text[-3000:]
    outcomes = result.parseoutcomes()
    assert outcomes.get("errors", outcomes.get("error")) == 2 and outcomes.get("passed") == 2, text[-3000:]
    result.stdout.fnmatch_lines(["*RuntimeError: sanitizer set-up broke*"])
    result.stdout.fnmatch_lines_random(["ERROR test_m.py::test_a - RuntimeError: sanitizer set-up broke",
                                        "ERROR test_m.py::test_b - RuntimeError: sanitizer set-up broke"])
    result.stdout.fnmatch_lines(["no pipecheck checks ran (*or each one that did stopped before its checks*"])
    assert result.ret == 1


# ---------------------------------------------------------------- --dist modes with the sanitizer on

RECORDING = """
import os
import pytest

def record(name):
    # the normal run only: a sanitizer child runs the same test in the worker's environment
    if not os.environ.get("PIPECHECK_CHILD"):
        with open({seen!r}, "a") as fh:
            fh.write(name + " " + os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")
"""


def _recorded(test: str, cases: int, label: str) -> str:
    """The source of a test ``test`` of a RECORDING module, parametrized over ``i`` in ``range(cases)``: each case
    records the name ``label`` followed by its ``i``."""
    return f'''
@pytest.mark.parametrize("i", range({cases}))
def {test}(pipecheck, i):
    record(f"{label}{{i}}")
'''


def _ran_on(seen: Path) -> list[tuple[str, str]]:
    """(test, worker) in the order the tests ran (each worker appends its own lines in its own order)."""
    return [(ln.split()[0], ln.split()[1]) for ln in seen.read_text().splitlines()]


def test_loadgroup_keeps_an_xdist_group_on_one_worker_in_order(pytester: pytest.Pytester, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dist loadgroup``: the tests of one ``xdist_group`` own a resource together, so they run on one
    worker, in collection order, even when the group spans modules that the share cut would otherwise hand
    to different workers; the other tests still spread over both workers, and every test is sanitized once."""
    log = _fake_gpu_run(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    seen = tmp_path / "seen.txt"
    head = RECORDING.format(seen=str(seen))
    pytester.makepyfile(test_a=head + """
@pytest.mark.xdist_group(name="owner")
def test_g0(pipecheck):
    record("a-g0")
""" + _recorded("test_u", 3, "a-u"), test_b=head + _recorded("test_u", 2, "b-u") + """
def test_racy(pipecheck):
    record("b-racy")

@pytest.mark.xdist_group(name="owner")
def test_g1(pipecheck):
    record("b-g1")

@pytest.mark.xdist_group("owner")
def test_g2(pipecheck):
    record("b-g2")
""")
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "--pipecheck",
                                           "--pipecheck-sanitizer=racecheck", "--pipecheck-json=r.json",
                                           "-p", "xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8, failed=1)
    ran = _ran_on(seen)
    assert sorted(name for name, _ in ran) == sorted(["a-g0", "a-u0", "a-u1", "a-u2", "b-u0", "b-u1", "b-racy",
                                                      "b-g1", "b-g2"])
    group = [(name, worker) for name, worker in ran if "-g" in name]
    assert len({worker for _, worker in group}) == 1, group  # one worker owns the group
    assert [name for name, _ in group] == ["a-g0", "b-g1", "b-g2"]  # in collection order
    assert len({worker for _, worker in ran}) == 2, ran  # the rest is still spread
    # every test judged once, under its own node id (no "@owner"), the race still caught
    doc = json.loads((pytester.path / "r.json").read_text())
    verdicts = {r["nodeid"]: r["verdict"] for r in doc["results"] if r["check"] == "sanitizer:racecheck"}
    assert len(verdicts) == 9 and all("@" not in n for n in verdicts)
    assert verdicts["test_b.py::test_racy"] == "fail" and verdicts["test_b.py::test_g2"] == "pass"
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    shares = [{a for a in argv if "::test_" in a} for argv in calls]
    assert len(calls) == 2 and not shares[0] & shares[1] and len(shares[0] | shares[1]) == 9
    assert any({"test_a.py::test_g0", "test_b.py::test_g1", "test_b.py::test_g2"} <= s for s in shares), shares


@pytest.mark.parametrize("dist", ["loadfile", "loadscope"])
def test_loadfile_and_loadscope_keep_a_module_or_class_on_one_worker(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dist: str) -> None:
    """``--dist loadfile`` keeps a module's tests on one worker, ``--dist loadscope`` a class's (and a module's
    functions): the share cut never splits one, though equal shares would cut through the class here."""
    _fake_gpu_run(tmp_path, monkeypatch, {})
    seen = tmp_path / "seen.txt"
    head = RECORDING.format(seen=str(seen))
    pytester.makepyfile(test_a=head + _recorded("test_f", 2, "a-f"), test_b=head + """
class TestC:
    @pytest.mark.parametrize("i", range(6))
    def test_m(self, pipecheck, i):
        record(f"b-m{i}")
""")
    result = pytester.runpytest_subprocess("-n", "2", "--dist", dist, "--pipecheck", "--pipecheck-sanitizer=racecheck",
                                           "-p", "xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=8)
    ran = _ran_on(seen)
    assert len(ran) == 8
    workers = {module: {w for name, w in ran if name.startswith(module)} for module in ("a-", "b-")}
    assert all(len(w) == 1 for w in workers.values()), ran
    assert workers["a-"] != workers["b-"], ran  # two scopes, two workers


def test_dist_each_runs_and_sanitizes_every_test_on_every_worker(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--dist each``: every worker runs every test on its own GPU, so it sanitizes all of them there too,
    in one child per tool (the shares that split the work among workers have no use when none is split)."""
    log = _fake_gpu_run(tmp_path, monkeypatch, {"racecheck": {"inject": {"test_racy": "racecheck_race_analysis.txt"}}})
    seen = tmp_path / "seen.txt"
    pytester.makepyfile(test_m=RECORDING.format(seen=str(seen)) + _recorded("test_k", 3, "k") + """
def test_racy(pipecheck):
    record("racy")
""")
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "each", "--pipecheck", "--pipecheck-sanitizer=racecheck",
                                           "-p", "xdist", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6, failed=2)  # each test on each worker; the race caught on both
    ran = _ran_on(seen)
    assert sorted(ran) == sorted((name, w) for name in ("k0", "k1", "k2", "racy") for w in ("gw0", "gw1"))
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    shares = [{a for a in argv if "::test_" in a} for argv in calls]
    everything = {f"test_m.py::test_k[{i}]" for i in range(3)} | {"test_m.py::test_racy"}
    assert shares == [everything, everything], shares  # one child per worker, each over every test


def test_shares_are_balanced_by_each_tests_normal_run_and_sanitizer_seconds(
        pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two tests that are long in their normal run and quick under the sanitizer, then six the other way round.
    Balanced by the sanitizer seconds in the cache, the two long ones share a worker; the durations file
    says what each test costs in all, and they go to different workers. The run keeps each test's normal-run
    seconds in the cache for the next one. No wall-clock timing: the costs are stored ones."""
    _fake_gpu_run(tmp_path, monkeypatch, {})
    seen = tmp_path / "seen.txt"
    head = RECORDING.format(seen=str(seen))
    pytester.makepyfile(test_a=head + _recorded("test_heavy", 2, "heavy"), test_b=head + _recorded("test_light", 6, "light"))
    heavy = [f"test_a.py::test_heavy[{i}]" for i in range(2)]
    light = [f"test_b.py::test_light[{i}]" for i in range(6)]
    cache_dir = pytester.path / ".pytest_cache" / "v" / "pipecheck"
    cache_dir.mkdir(parents=True)
    (cache_dir / "sanitizer-seconds").write_text(json.dumps({**dict.fromkeys(heavy, 0.5), **dict.fromkeys(light, 2.0)}))
    (pytester.path / ".test_durations").write_text(json.dumps({**dict.fromkeys(heavy, 30.5), **dict.fromkeys(light, 2.5)}))
    pytester.runpytest_subprocess("-n", "2", "--pipecheck", "--pipecheck-sanitizer=racecheck", "-p", "xdist"
                                  ).assert_outcomes(passed=8)
    ran = dict(_ran_on(seen))
    assert ran["heavy0"] != ran["heavy1"], ran
    assert set(json.loads((cache_dir / "run-seconds").read_text())) == set(heavy + light)
