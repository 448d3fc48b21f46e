"""The order pytest-xdist hands out sanitizer shares (sanitizer/xdist_shares.py), driven with fake workers.

xdist's worker holds the last test it was sent until it knows the next one, and the scheduler sends a
worker its next share when two or fewer of its tests are left: a share sent behind a long test waits
for it. Under ``xdist_order = cost`` the costliest waiting share goes out first, so the long tests start
at once; a share a crashed worker left still goes out before any other.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("xdist")

from pytest_pipecheck.sanitizer.costs import assign_shares
from pytest_pipecheck.sanitizer.xdist_shares import ShareScheduling


class _Config:
    def __init__(self, workers: int) -> None:
        self.option = SimpleNamespace(loadscopereorder=False)
        self._values = {"tx": [f"{workers}*popen"], "dist": "loadscope"}

    def getvalue(self, name: str) -> Any:
        return self._values[name]


class _Worker:
    def __init__(self, name: str) -> None:
        self.name = name
        self.sent: list[list[int]] = []
        self.shutting_down = False
        self.gateway = SimpleNamespace(id=name)

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(list(indexes))

    def shutdown(self) -> None:
        self.shutting_down = True

    def __repr__(self) -> str:
        return self.name


class _Log:
    def __call__(self, *args: Any) -> None:
        pass

    def __getattr__(self, name: str) -> _Log:
        return self


#: three modules of short tests, then one long test (a nested GPU run, say) in a module of its own
COLLECTION = ([f"test_{m}.py::test_{i}" for m in "acd" for i in range(8)] + ["test_z.py::test_long"])
LONG = "test_z.py::test_long"
COSTS = {**{n: 2.0 for n in COLLECTION}, LONG: 40.0}
SHARES = 8  # two workers, four shares each: about 6 s of short tests per share


def _scheduler(order_costs: dict[str, float] | None, workers: int = 2) -> tuple[ShareScheduling, list[_Worker]]:
    sched = ShareScheduling(_Config(workers), _Log(), lambda ids, n: assign_shares(ids, SHARES, COSTS),  # type: ignore[arg-type]
                            order_costs)
    nodes = [_Worker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, COLLECTION)
    sched.schedule()
    return sched, nodes


def _simulate(order_costs: dict[str, float] | None) -> tuple[dict[str, float], float]:
    """Run the scheduler against two workers that take COSTS seconds per test, on a simulated clock, with
    xdist's worker rule (a worker starts a test once it knows the next one, or was told to shut down).
    Returns each test's start time and when the last one ended."""
    sched, nodes = _scheduler(order_costs)
    queue: dict[_Worker, list[int]] = {n: [] for n in nodes}
    free_at = {n: 0.0 for n in nodes}
    started: dict[str, float] = {}
    seen = {n: 0 for n in nodes}
    while True:
        for n in nodes:  # pick up what the scheduler sent since
            for batch in n.sent[seen[n]:]:
                queue[n].extend(batch)
            seen[n] = len(n.sent)
        ready = [n for n in nodes if queue[n] and (len(queue[n]) > 1 or n.shutting_down)]
        if not ready:
            assert not any(queue.values()), queue  # a worker waiting forever: the scheduler's bug
            return started, max(free_at.values())
        n = min(ready, key=lambda w: (free_at[w], w.name))
        index = queue[n].pop(0)
        started[COLLECTION[index]] = free_at[n]
        free_at[n] += COSTS[COLLECTION[index]]
        sched.mark_test_complete(n, index)


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


def test_cost_order_without_any_known_cost_is_collection_order() -> None:
    _, with_none = _scheduler({})
    _, collection = _scheduler(None)
    assert [n.sent for n in with_none] == [n.sent for n in collection]


def test_a_share_a_crashed_worker_left_goes_out_before_the_costliest() -> None:
    sched, nodes = _scheduler(COSTS, workers=3)
    # the worker that took a share of short tests dies in its second test
    dead = next(n for n in nodes if len(n.sent[0]) > 2)
    sent = [COLLECTION[i] for i in dead.sent[0]]
    sched.mark_test_complete(dead, dead.sent[0][0])
    assert sched.remove_node(dead) == sent[1]
    fresh = _Worker("gw9")
    sched.add_node(fresh)
    sched.add_node_collection(fresh, COLLECTION)
    sched.schedule()
    assert [COLLECTION[i] for i in fresh.sent[0]] == sent[2:], fresh.sent
