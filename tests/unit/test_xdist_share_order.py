"""The order pytest-xdist hands out sanitizer shares (sanitizer/xdist_shares.py), driven with fake workers.

xdist's worker holds the last test it was sent until it knows the next one, and the scheduler sends a
worker its next share when two or fewer of its tests are left: a share sent behind a long test waits
for it. Under ``xdist_order = cost`` the costliest waiting share goes out first, so the long tests start
at once, and a worker busy with more than a waiting share's mean cost gets the cheapest; a share a crashed
worker left still goes out before any other. The workers and the clock are those of
scripts/xdist_order_model.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _load import load_file

pytest.importorskip("xdist")

from pytest_pipecheck.sanitizer.costs import assign_shares

model = load_file("xdist_order_model", Path(__file__).resolve().parents[2] / "scripts" / "xdist_order_model.py")

#: three modules of short tests, then one long test (a nested GPU run, say) in a module of its own
COLLECTION = ([f"test_{m}.py::test_{i}" for m in "acd" for i in range(8)] + ["test_z.py::test_long"])
LONG = "test_z.py::test_long"
COSTS = {**{n: 2.0 for n in COLLECTION}, LONG: 40.0}
SHARES = 8  # two workers, four shares each: about 6 s of short tests per share


def _scheduler(order_costs: dict[str, float] | None, workers: int = 2,
               log: list[list[int]] | None = None) -> tuple[Any, list[Any]]:
    return model.scheduler(COLLECTION, SHARES, COSTS, order_costs, workers, log)


def _simulate(order_costs: dict[str, float] | None) -> tuple[dict[str, float], float]:
    """Two workers that take COSTS seconds per test, on a simulated clock, with xdist's worker rule (a
    worker starts a test once it knows the next one, or was told to shut down): each test's start time and
    when the last one ended."""
    return model.simulate(COLLECTION, COSTS, COSTS, order_costs, 2, SHARES)


def test_the_long_test_is_a_share_of_its_own_at_the_end_of_the_collection() -> None:
    shares = assign_shares(COLLECTION, SHARES, COSTS)
    assert shares[-1] == SHARES - 1 and shares.count(SHARES - 1) == 1


def test_collection_order_starts_the_long_test_last() -> None:
    started, end = _simulate(None)
    assert len(started) == len(COLLECTION)
    assert started[LONG] >= 18.0 and end == started[LONG] + 40.0, (started[LONG], end)


def test_cost_order_starts_the_costliest_share_at_once_and_ends_sooner() -> None:
    started, end = _simulate(COSTS)
    shares = assign_shares(COLLECTION, SHARES, COSTS)
    assert len(started) == len(COLLECTION)  # every test ran, once
    assert started[LONG] == 0.0
    _, end_collection = _simulate(None)
    assert end < end_collection, (end, end_collection)
    # the worker holding the long test is sent one more share at once (it must know its next test to
    # start one): the long test plus one share of short tests, at most
    assert end <= 40.0 + max(sum(COSTS[n] for n, s in zip(COLLECTION, shares) if s == k) for k in range(SHARES - 1))


def test_the_worker_holding_the_long_test_gets_the_cheapest_share_behind_it() -> None:
    """It must be sent a next test before it can start the long one; the cheapest share delays the least."""
    _, nodes = _scheduler(COSTS)
    holder = next(n for n in nodes if n.sent[0] == [COLLECTION.index(LONG)])
    behind = [COLLECTION[i] for i in holder.sent[1]]
    shares = assign_shares(COLLECTION, SHARES, COSTS)
    cheapest = min(sum(COSTS[n] for n, s in zip(COLLECTION, shares) if s == k) for k in set(shares))
    assert sum(COSTS[n] for n in behind) == cheapest, behind


def test_cost_order_without_any_known_cost_is_collection_order() -> None:
    _, with_none = _scheduler({})
    _, collection = _scheduler(None)
    assert [n.sent for n in with_none] == [n.sent for n in collection]


def test_a_share_a_crashed_worker_left_goes_out_before_the_costliest() -> None:
    sent_to_any: list[list[int]] = []  # every batch sent to any worker, in order
    sched, nodes = _scheduler(COSTS, workers=3, log=sent_to_any)
    # the worker that took a share of short tests dies in its second test
    dead = next(n for n in nodes if len(n.sent[0]) > 2)
    sent = [COLLECTION[i] for i in dead.sent[0]]
    sched.mark_test_complete(dead, dead.sent[0][0])
    sent_to_any.clear()
    assert sched.remove_node(dead) == sent[1]
    fresh = model.FakeWorker("gw9", sent_to_any)
    sched.add_node(fresh)
    sched.add_node_collection(fresh, COLLECTION)
    sched.schedule()
    # the next share sent, to whichever worker asked first, is the rest of the one the dead worker held
    assert sent_to_any and [COLLECTION[i] for i in sent_to_any[0]] == sent[2:], sent_to_any


def test_the_model_script_prints_both_orders_for_a_durations_file(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps(COSTS))
    assert model.main(["--durations", str(durations), "--workers", "2", "--shares", "4", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert f"{len(COLLECTION)} tests, 88 s of test time, the longest 40 s; 2 workers x 4 shares" in out
    assert "exact costs: collection order 64 s, cost order 52 s" in out, out
    assert "seed 0: collection order" in out
