"""Sanitizer shares balanced by the per-test seconds of earlier runs (pytest_pipecheck/sanitizer/costs.py)."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from pytest_pipecheck.sanitizer.costs import (
    CACHE_KEY,
    assign_shares,
    cost_estimator,
    load_costs,
    record_costs,
    sanitizer_seconds,
)


def _contiguous(shares: list[int]) -> bool:
    return all(b - a in (0, 1) for a, b in itertools.pairwise(shares)) and (not shares or shares[0] == 0)


@pytest.mark.parametrize("n, k", [(10, 2), (7, 3), (100, 8), (5, 5), (2, 1)])
def test_equal_costs_give_contiguous_equal_counts(n: int, k: int) -> None:
    ids = [f"t{i}" for i in range(n)]
    for costs in (None, {}, {nid: 2.0 for nid in ids}):
        shares = assign_shares(ids, k, costs)
        assert _contiguous(shares) and max(shares) == k - 1
        counts = [shares.count(s) for s in range(k)]
        assert max(counts) - min(counts) <= 1


def test_costs_move_the_boundary_to_balance_the_work() -> None:
    ids = [f"t{i}" for i in range(10)]
    costs = {nid: (5.0 if i < 4 else 0.5) for i, nid in enumerate(ids)}  # the slow tests come first
    shares = assign_shares(ids, 2, costs)
    assert shares == [0, 0, 1, 1, 1, 1, 1, 1, 1, 1]
    work = [sum(costs[n] for n, s in zip(ids, shares) if s == k) for k in (0, 1)]
    assert abs(work[0] - work[1]) <= max(costs.values())


def test_random_costs_stay_contiguous_nonempty_and_within_one_test_of_balance() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n, k = rng.randint(1, 60), rng.randint(1, 6)
        ids = [f"t{i}" for i in range(n)]
        costs = {nid: rng.choice([0.0, rng.expovariate(1.0) * 10]) for nid in ids if rng.random() < 0.8}
        shares = assign_shares(ids, k, costs)
        assert len(shares) == n and _contiguous(shares)
        if n >= k:
            assert sorted(set(shares)) == list(range(k))  # no share left empty


def test_unknown_tests_cost_the_median_of_the_known_ones() -> None:
    ids = ["a", "b", "c", "d"]
    # b and d unknown: they cost the median (2.0), so a + b = 4 and c + d = 4
    assert assign_shares(ids, 2, {"a": 2.0, "c": 2.0}) == [0, 0, 1, 1]
    assert assign_shares(ids, 2, {"a": 6.0, "c": 1.0}) == [0, 1, 1, 1]


def test_an_unknown_test_costs_what_its_modules_known_tests_do() -> None:
    """New tests of a module of slow tests (nested pytest sessions) are priced like their neighbours, not
    at the suite's median: priced at 4 ms instead of about 5 s, they pile up in one worker's share, which
    then runs minutes longer than the others."""
    costs = {f"fast.py::t{i}": 0.01 for i in range(20)} | {"slow.py::t0": 5.0, "slow.py::t1": 7.0}
    estimate = cost_estimator(costs)
    assert estimate("slow.py::new") == 6.0 and estimate("slow.py::t0") == 5.0
    assert estimate("fast.py::new") == 0.01 and estimate("elsewhere.py::new") == 0.01  # the suite's median
    assert cost_estimator({})("any.py::t") == 1.0
    # 10 fast tests, then 10 slow ones of which 2 are known: the unknown 8 weigh as the slow ones do,
    # so the two shares split inside the fast tests' module no more
    ids = [f"fast.py::t{i}" for i in range(10)] + [f"slow.py::t{i}" for i in range(10)]
    shares = assign_shares(ids, 2, costs)
    assert shares[:15] == [0] * 15 and shares[15:] == [1] * 5, shares


def test_a_test_cut_into_cases_is_priced_by_its_function_not_its_module() -> None:
    """A nested-session test of 95 s cut into parametrized parts, in a module of 3 s tests: the durations file
    still knows only the whole. Priced at the module's median, the parts were handed out last and ran after
    every other share; each part costs what its function cost (or its known siblings' median) instead."""
    costs = {"m.py::whole": 95.0, "m.py::cut[x]": 40.0, "m.py::cut[y]": 60.0, "m.py::cut[z]": 0.0} | {
        f"m.py::t{i}": 3.0 for i in range(6)}
    estimate = cost_estimator(costs)
    assert estimate("m.py::whole[part1]") == 95.0 and estimate("m.py::whole[part2]@g") == 95.0
    assert estimate("m.py::cut[new]") == 50.0  # the median of its known cases; a 0 s case is not known
    assert estimate("m.py::cut[z]") == 0.0 and estimate("m.py::cut[x]@g") == 40.0  # known ids keep their own
    assert estimate("m.py::other[p]") == 3.0  # a new function: its module's median
    assert estimate("m.py::new") == 3.0


@dataclass
class FakeCache:
    data: dict[str, Any] = field(default_factory=dict)
    fail_set: bool = False

    def get(self, key: str, default: Any) -> Any:
        return self.data.get(key, default)

    def set(self, key: str, value: Any) -> None:
        if self.fail_set:
            raise OSError("read-only")
        self.data[key] = value


@dataclass
class FakeConfig:
    cache: FakeCache | None


@dataclass
class R:
    nodeid: str
    check: str
    details: dict[str, Any]


def test_seconds_are_summed_over_tools_and_merged_into_the_cache() -> None:
    results = [R("t1", "sanitizer:racecheck", {"test_seconds": 1.5}), R("t1", "sanitizer:synccheck", {"test_seconds": 0.5}),
               R("t2", "sanitizer:racecheck", {"test_seconds": None}), R("t2", "coverage", {"test_seconds": 9.0}),
               R("t3", "sanitizer:racecheck", {"test_seconds": 0.25})]
    assert sanitizer_seconds(results) == {"t1": 2.0, "t3": 0.25}
    config = FakeConfig(FakeCache({CACHE_KEY: {"t1": 9.0, "old": 4.0}}))
    assert record_costs(config, results) == 2
    assert load_costs(config) == {"t1": 2.0, "t3": 0.25, "old": 4.0}  # this run wins, old tests stay


@pytest.mark.parametrize("entry", [["not", "a", "dict"], {"t": "x", "u": -1, "v": float("nan"), "w": True}, None])
def test_a_bad_cache_entry_reads_as_no_costs(entry: Any) -> None:
    assert load_costs(FakeConfig(FakeCache({CACHE_KEY: entry}))) == {}
    assert load_costs(FakeConfig(None)) == {}


def test_an_unwritable_cache_is_not_an_error() -> None:
    config = FakeConfig(FakeCache(fail_set=True))
    assert record_costs(config, [R("t", "sanitizer:racecheck", {"test_seconds": 1.0})]) == 0


@dataclass
class SplitConfig:
    """A config with pytest-split's ``--durations-path`` and, optionally, a cache."""

    durations_path: str | None
    cache: Any = None
    rootpath: Any = None

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.durations_path if name == "durations_path" else default


def test_without_cached_costs_the_shares_follow_pytest_splits_durations_file(tmp_path, monkeypatch) -> None:
    import json

    from pytest_pipecheck.sanitizer.costs import costs_for_balance, load_durations

    monkeypatch.chdir(tmp_path)
    ids = [f"t{i}" for i in range(10)]
    path = tmp_path / "durations.json"
    path.write_text(json.dumps({nid: (50.0 if i >= 8 else 1.0) for i, nid in enumerate(ids)} | {"bad": "x"}))
    costs = costs_for_balance(SplitConfig(str(path)))
    assert costs["t9"] == 50.0 and "bad" not in costs
    # the two slow tests at the end get a share of their own instead of a quarter of the collection each
    assert assign_shares(ids, 2, costs) == [0] * 9 + [1]
    # the cache's own sanitizer seconds win over the file, test by test: a test the cache does not know (a
    # suite added since its last run, or one whose earlier runs left no cache) keeps the file's seconds
    cached = SplitConfig(str(path), FakeCache({CACHE_KEY: {"t0": 3.0, "t8": 0.5}}))
    mixed = costs_for_balance(cached)
    assert mixed["t0"] == 3.0 and mixed["t8"] == 0.5 and mixed["t9"] == 50.0 and mixed["t1"] == 1.0
    # no option (pytest-split absent): .test_durations in the working directory, else the rootdir
    (tmp_path / ".test_durations").write_text(json.dumps({"t1": 2.0}))
    assert load_durations(SplitConfig(None)) == {"t1": 2.0}
    (tmp_path / ".test_durations").unlink()
    root = tmp_path / "root"
    root.mkdir()
    (root / ".test_durations").write_text(json.dumps({"t2": 4.0}))
    assert load_durations(SplitConfig(None, rootpath=root)) == {"t2": 4.0}
    # a missing or unreadable file: no costs, equal counts
    (root / ".test_durations").write_text("{not json")
    assert load_durations(SplitConfig(str(tmp_path / "missing.json"), rootpath=root)) == {}


@pytest.mark.parametrize(("workers", "per_worker", "expected"), [(0, 3, 1), (1, 3, 1), (4, 1, 4), (4, 3, 12)])
def test_xdist_shares_cuts_each_workers_part_into_that_many_contiguous_shares(workers, per_worker, expected) -> None:
    from pytest_pipecheck import state
    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.sanitizer.shares import shares_for

    config = SplitConfig(None, FakeCache())
    config.stash = pytest.Stash()  # type: ignore[attr-defined]
    config.stash[state.RUN_CONFIG] = PipecheckConfig(xdist_shares=per_worker)  # type: ignore[attr-defined]
    ids = [f"t{i:02d}" for i in range(30)]
    shares = shares_for(config, ids, workers)  # type: ignore[arg-type]
    assert sorted(set(shares)) == list(range(expected))
    assert shares == sorted(shares)  # contiguous: modules stay together


# ---------------------------------------------------------------- each test's whole cost, for the share cut


def test_share_costs_are_each_tests_normal_run_plus_its_sanitizer_seconds(tmp_path, monkeypatch) -> None:
    import json

    from pytest_pipecheck.sanitizer.costs import RUN_KEY, share_costs

    monkeypatch.chdir(tmp_path)
    durations = tmp_path / "durations.json"
    # pytest-split's file holds each test's whole duration when pipecheck stored it (sanitizer included),
    # only the normal run when it was stored without the sanitizer
    durations.write_text(json.dumps({"m.py::ran": 99.0, "m.py::stored": 12.0, "m.py::stored_bare": 1.0}))
    cache = FakeCache({CACHE_KEY: {"m.py::ran": 2.0, "m.py::stored": 3.0, "m.py::stored_bare": 4.0, "m.py::old": 5.0},
                       RUN_KEY: {"m.py::ran": 10.0, "m.py::unsanitized": 7.0}})
    costs = share_costs(SplitConfig(str(durations), cache))
    assert costs == {
        "m.py::ran": 12.0,  # the cache knows both halves: they add up (and win over the file)
        "m.py::unsanitized": 7.0,  # its normal run, and no sanitizer seconds: it was not sanitized
        "m.py::stored": 12.0,  # the file's whole duration, which holds the sanitizer seconds already
        "m.py::stored_bare": 4.0,  # a file stored without the sanitizer: at least the sanitizer seconds
        "m.py::old": 5.0,  # the sanitizer seconds alone: nothing knows its normal run
    }
    # nothing stored at all: no costs, equal counts
    assert share_costs(SplitConfig(str(tmp_path / "missing.json"), FakeCache())) == {}


def test_an_unknown_test_costs_its_modules_median_whole_cost(tmp_path, monkeypatch) -> None:
    from pytest_pipecheck.sanitizer.costs import RUN_KEY, share_costs

    monkeypatch.chdir(tmp_path)
    cache = FakeCache({CACHE_KEY: {"slow.py::t0": 1.0, "slow.py::t1": 1.0, "fast.py::t0": 1.0},
                       RUN_KEY: {"slow.py::t0": 20.0, "slow.py::t1": 30.0, "fast.py::t0": 0.1}})
    estimate = cost_estimator(share_costs(SplitConfig(None, cache)))
    assert estimate("slow.py::new") == 26.0 and estimate("fast.py::new") == 1.1
    assert estimate("slow.py::t0@owner") == 21.0  # an xdist group suffix: the test's own cost


@dataclass
class Report:
    nodeid: str
    when: str
    duration: Any
    user_properties: list[tuple[str, Any]] = field(default_factory=list)


def test_run_seconds_add_up_a_tests_phases_without_the_sanitizer_seconds_added_for_pytest_split() -> None:
    from pytest_pipecheck.sanitizer.costs import RunSeconds

    seconds = RunSeconds(strip_group=True)
    for report in [Report("a.py::t", "setup", 0.5), Report("a.py::t", "call", 7.5, [("pipecheck.sanitizer_seconds", 5.0)]),
                   Report("a.py::t", "teardown", 0.25),
                   Report("a.py::g@owner", "call", 1.0), Report("a.py::bad", "call", float("nan")),
                   Report("a.py::crashed", "???", 4.0), Report("a.py::neg", "call", 1.0, [("pipecheck.sanitizer_seconds", 3.0)])]:
        seconds.add(report)
    assert seconds.seconds() == {"a.py::t": 3.25, "a.py::g": 1.0, "a.py::neg": 0.0}
    # under --dist each every worker reports the test: the phase is counted once
    seconds.add(Report("a.py::g@owner", "call", 2.0))
    assert seconds.seconds()["a.py::g"] == 2.0
    # without loadgroup an "@" is part of the test's id
    plain = RunSeconds()
    plain.add(Report("a.py::t@x", "call", 1.0))
    assert plain.seconds() == {"a.py::t@x": 1.0}


def test_run_seconds_are_merged_into_the_cache_beside_the_sanitizer_seconds() -> None:
    from pytest_pipecheck.sanitizer.costs import RUN_KEY, load_run_seconds

    config = FakeConfig(FakeCache({RUN_KEY: {"t1": 9.0, "old": 4.0}}))
    results = [R("t1", "sanitizer:racecheck", {"test_seconds": 1.5})]
    assert record_costs(config, results, {"t1": 2.0004, "t2": 0.5}) == 2
    assert load_run_seconds(config) == {"t1": 2.0, "t2": 0.5, "old": 4.0}
    assert load_costs(config) == {"t1": 1.5}
    assert record_costs(FakeConfig(FakeCache(fail_set=True)), results, {"t1": 1.0}) == 0


@pytest.mark.parametrize(("setting", "cores", "children"),
                         [("auto", 16, 8), ("auto", 64, 8), ("auto", 6, 3), ("auto", 2, 1), ("auto", 1, 1),
                          (3, 64, 3), (12, 2, 12)])
def test_children_at_once_auto_is_half_the_cores_from_one_to_eight_and_a_number_is_kept(
        setting: int | str, cores: int, children: int) -> None:
    from pytest_pipecheck.sanitizer.costs import children_at_once

    assert children_at_once(setting, cores=cores) == children


@pytest.mark.parametrize(("workers", "cores", "children"),
                         [(8, 16, 2), (4, 16, 4), (2, 32, 8), (12, 16, 1), (3, 2, 1), (1, 6, 6)])
def test_an_xdist_workers_children_share_the_cores_among_the_workers(workers: int, cores: int, children: int) -> None:
    """A worker waits while its children run: its part of the cores is theirs (not half of it, which left
    one child a worker on 16 cores and 8 workers, running each share's two tools one after the other)."""
    from pytest_pipecheck.sanitizer.costs import worker_children_at_once

    assert worker_children_at_once(workers, cores=cores) == children


def test_children_at_once_auto_reads_this_process_affinity() -> None:
    import os

    from pytest_pipecheck.sanitizer.costs import children_at_once

    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity on this platform")
    assert children_at_once("auto") == max(1, min(8, len(os.sched_getaffinity(0)) // 2))
