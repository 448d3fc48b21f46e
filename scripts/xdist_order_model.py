"""A model of the GPU tier's wall time under pytest-xdist for each share hand-out order; no GPU needed.

pipecheck's scheduler (pytest_pipecheck/sanitizer/xdist_shares.py) is driven with fake workers on a
simulated clock. Each test takes its cost from a durations file (pytest-split's format, as
``scripts/gpu-check.sh OUT durations`` stores it on a GPU machine), and the workers keep xdist's rule:
a worker starts a test only once it knows its next one (or was told to shut down). The shares are cut
by a plan of the costs, which may differ from the true costs (``--noise``: each planned cost is the true
one times a log-normal factor), as stored durations differ from the next run's.

    python3 scripts/xdist_order_model.py [--durations .test_durations] [--workers 12] [--shares 3]
                                          [--noise 0.4] [--seeds 3] [--collection FILE]

``--collection`` is a file of node ids in collection order (``pytest --co -q | grep ::``); by default the
order of the durations file. A test the durations file does not know costs what the scheduler would price it at (the median of its
module's known tests, else of all: ``costs.cost_estimator``).
The model leaves out what a real run adds (start-up, the sanitizer children's share of each worker, the
GPU shared by the workers): it compares orders, it does not predict seconds.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


class FakeConfig:
    """What xdist's scope scheduling reads from pytest's config."""

    def __init__(self, workers: int) -> None:
        self.option = SimpleNamespace(loadscopereorder=False)
        self._values = {"tx": [f"{workers}*popen"], "dist": "loadscope"}

    def getvalue(self, name: str) -> Any:
        return self._values[name]


class FakeWorker:
    """A worker as the scheduler sees it: what it was sent, and whether it was told to shut down."""

    def __init__(self, name: str, log: list[list[int]] | None = None) -> None:
        self.name = name
        self.sent: list[list[int]] = []
        self.shutting_down = False
        self.gateway = SimpleNamespace(id=name)
        self._log = log

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(list(indexes))
        if self._log is not None:
            self._log.append(list(indexes))

    def shutdown(self) -> None:
        self.shutting_down = True

    def __repr__(self) -> str:
        return self.name


class QuietLog:
    """xdist's log producer, silenced."""

    def __call__(self, *args: Any) -> None:
        pass

    def __getattr__(self, name: str) -> QuietLog:
        return self


def scheduler(collection: Sequence[str], shares: int, plan: Mapping[str, float], order_costs: Mapping[str, float] | None,
              workers: int, log: list[list[int]] | None = None) -> tuple[Any, list[FakeWorker]]:
    """pipecheck's ShareScheduling over ``workers`` fake workers, shares cut by ``plan``, scheduled."""
    from pytest_pipecheck.sanitizer.costs import assign_shares
    from pytest_pipecheck.sanitizer.xdist_shares import ShareScheduling

    sched = ShareScheduling(FakeConfig(workers), QuietLog(),  # type: ignore[arg-type]
                            lambda ids, n: assign_shares(ids, shares, plan), order_costs)
    nodes = [FakeWorker(f"gw{i}", log) for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, list(collection))
    sched.schedule()
    return sched, nodes


def simulate(collection: Sequence[str], true: Mapping[str, float], plan: Mapping[str, float],
             order_costs: Mapping[str, float] | None, workers: int, shares: int) -> tuple[dict[str, float], float]:
    """Each test's start time and when the last test ended, on a simulated clock."""
    sched, nodes = scheduler(collection, shares, plan, order_costs, workers)
    queue: dict[FakeWorker, list[int]] = {n: [] for n in nodes}
    free_at = {n: 0.0 for n in nodes}
    seen = {n: 0 for n in nodes}
    started: dict[str, float] = {}
    while True:
        for n in nodes:  # what the scheduler sent since the last look
            for batch in n.sent[seen[n]:]:
                queue[n].extend(batch)
            seen[n] = len(n.sent)
        ready = [n for n in nodes if queue[n] and (len(queue[n]) > 1 or n.shutting_down)]
        if not ready:
            if any(queue.values()):
                raise RuntimeError(f"a worker waits forever for its next test: {queue}")
            return started, max(free_at.values())
        n = min(ready, key=lambda w: (free_at[w], w.name))
        index = queue[n].pop(0)
        started[collection[index]] = free_at[n]
        free_at[n] += true[collection[index]]
        sched.mark_test_complete(n, index)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--durations", type=Path, default=ROOT / ".test_durations")
    ap.add_argument("--collection", type=Path, default=None)
    ap.add_argument("--workers", type=int, default=12)
    ap.add_argument("--shares", type=int, default=3, help="shares per worker (--pipecheck-xdist-shares)")
    ap.add_argument("--noise", type=float, default=0.4, help="sigma of the log-normal error of the planned costs")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)
    known = json.loads(args.durations.read_text())
    collection = ([line.strip() for line in args.collection.read_text().splitlines() if "::" in line]
                  if args.collection else list(known))
    from pytest_pipecheck.sanitizer.costs import cost_estimator

    estimate = cost_estimator(known)
    true = {n: float(estimate(n)) for n in collection}
    shares = args.workers * args.shares
    print(f"{len(collection)} tests, {sum(true.values()):.0f} s of test time, the longest {max(true.values()):.0f} s; "
          f"{args.workers} workers x {args.shares} shares")

    def noisy(seed: int) -> dict[str, float]:
        rnd = random.Random(seed)
        return {n: c * rnd.lognormvariate(0, args.noise) for n, c in true.items()}

    runs = [("exact costs", true)] + [(f"planned costs x lognormal(0, {args.noise}), seed {s}", noisy(s))
                                      for s in range(args.seeds)]
    for label, plan in runs:
        _, by_collection = simulate(collection, true, plan, None, args.workers, shares)
        _, by_cost = simulate(collection, true, plan, plan, args.workers, shares)
        print(f"{label}: collection order {by_collection:.0f} s, cost order {by_cost:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
