"""What each test costs, remembered between runs, and shares balanced by it.

Under pytest-xdist each worker sanitizes one share of the collection (shares.py) in one child per tool
(batches.py) and then runs the share's tests normally. When a worker is done depends on both: a test
costs its worker its normal run (setup, call and teardown: compiling, the reference, the checks) plus the
seconds its sanitizer children spent on it. Shares balanced by the sanitizer seconds alone pile the tests
that are cheap under the sanitizer but long in their normal run onto one worker.

Every sanitizer verdict carries the test's own time in its child (``test_seconds``: its BEGIN to its END
marker), and every test's reports carry its normal run's durations. At the end of a run the controller
keeps both in pytest's cache (``.pytest_cache``): per test, the sanitizer seconds summed over the tools
(key :data:`CACHE_KEY`) and the normal run's seconds (key :data:`RUN_KEY`), each merged with what the
cache held for tests that did not run this time. A test's cost for the share cut and the hand-out
(:func:`share_costs`) is the sum of the two; where the cache does not know its normal run, pytest-split's
durations file stands in (``--durations-path``, by default ``.test_durations`` in the working directory,
else in the rootdir: each test's whole duration, its sanitizer seconds included, as ``--store-durations``
records it under pipecheck), so a repository that commits that file is balanced on a machine that never
ran it. A test nothing knows costs the median of the known tests of its own module (new tests resemble
their neighbours: a file of nested pytest sessions costs seconds a test where the whole suite's median is
milliseconds), else the median of all known ones; with nothing known the shares are equal counts. The
controller and every worker read the same cache file before any test runs and the controller writes it
only at the end, so they all compute the same shares.

The sanitizer children's own parts (``sanitizer_jobs``) are cut by :func:`costs_for_balance` instead: what
a child spends on a test is its sanitizer seconds, not its normal run.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from ..xdist_hooks import base_nodeid

__all__ = ["CACHE_KEY", "MAX_AUTO_CHILDREN", "RUN_KEY", "SANITIZER_PROPERTY", "RunSeconds", "assign_shares",
           "children_at_once", "cost_estimator", "costs_for_balance",
           "load_costs", "load_durations", "load_run_seconds", "record_costs", "sanitizer_seconds", "share_costs",
           "unknown_cost", "worker_children_at_once"]

CACHE_KEY = "pipecheck/sanitizer-seconds"
RUN_KEY = "pipecheck/run-seconds"
#: the user property under which a test's report carries the sanitizer seconds pipecheck added to its call
#: duration under pytest-split's ``--store-durations`` (held_reports.py)
SANITIZER_PROPERTY = "pipecheck.sanitizer_seconds"
_MAX_ENTRIES = 20000  # bound the cache entry: the newest tests win
#: ``sanitizer_jobs = auto`` starts at most this many children at once
MAX_AUTO_CHILDREN = 8


def children_at_once(setting: int | str, cores: int | None = None) -> int:
    """How many sanitizer children run at once for ``sanitizer_jobs``: the number given, or (``auto``) half the
    CPU cores this process may use (its affinity, which a CI container narrows; ``cores`` stands in for it),
    from 1 to :data:`MAX_AUTO_CHILDREN`. A child compiles its kernels and runs its tests under the tool on
    the CPU, with the GPU mostly idle: the cores bound how many pay."""
    if setting != "auto":
        return max(1, int(setting))
    if cores is None:
        from ..device import usable_cores

        cores = usable_cores()
    return max(1, min(MAX_AUTO_CHILDREN, cores // 2))


def worker_children_at_once(workers: int, cores: int | None = None) -> int:
    """``sanitizer_jobs = auto`` in each of ``workers`` pytest-xdist workers that share this machine: the cores
    (``cores`` stands in for this process's) shared among the workers, from 1 to :data:`MAX_AUTO_CHILDREN`.

    Not half of that part, as :func:`children_at_once` gives one process: the workers' own tests already
    run one process a worker, and halving each worker's part again left one child a worker on 16 cores and 8
    workers, so each share's racecheck and synccheck children ran one after the other (H100, 2026-11-27:
    649 s of the workers' time was their children)."""
    if cores is None:
        from ..device import usable_cores

        cores = usable_cores()
    return max(1, min(MAX_AUTO_CHILDREN, cores // max(1, workers)))


def _cached(config: Any, key: str) -> dict[str, float]:
    cache = getattr(config, "cache", None)
    if cache is None:
        return {}
    try:
        data = cache.get(key, None)
    except Exception:  # a corrupt cache file must never break a run: fall back to equal counts
        return {}
    return _valid_seconds(data)


def load_costs(config: Any) -> dict[str, float]:
    """The per-test sanitizer seconds in pytest's cache ({} without a cache or with a bad entry)."""
    return _cached(config, CACHE_KEY)


def load_run_seconds(config: Any) -> dict[str, float]:
    """The per-test seconds of the normal run (setup, call, teardown) in pytest's cache ({} without one)."""
    return _cached(config, RUN_KEY)


def load_durations(config: Any) -> dict[str, float]:
    """Per-test seconds from pytest-split's durations file ({} without one, or with a bad one)."""
    import json
    import os

    path = None
    getoption = getattr(config, "getoption", None)
    if getoption is not None:
        path = getoption("durations_path", default=None)  # registered by pytest-split
    candidates = [path] if path else []
    root = getattr(config, "rootpath", None)
    candidates += [os.path.join(os.getcwd(), ".test_durations")] + ([os.path.join(str(root), ".test_durations")]
                                                                   if root is not None else [])
    for candidate in candidates:
        try:
            with open(candidate, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        return _valid_seconds(data)
    return {}


def costs_for_balance(config: Any) -> dict[str, float]:
    """What each test costs a sanitizer child, by which a tool's batch is cut into parts run side by side:
    the cache's sanitizer seconds, else (a test the cache does not know) pytest-split's durations."""
    return {**load_durations(config), **load_costs(config)}


def share_costs(config: Any) -> dict[str, float]:
    """What each test costs the xdist worker that runs it, by which shares are cut and handed out: its normal
    run plus its sanitizer seconds.

    A test whose normal run the cache knows costs that plus its cached sanitizer seconds (none cached: it
    was not sanitized). Else pytest-split's duration, which includes the sanitizer seconds when pipecheck
    stored it, and at least the cached sanitizer seconds when it was stored without them. Else its cached
    sanitizer seconds alone (its normal run unknown). Tests none of them knows are priced by
    :func:`cost_estimator`."""
    sanitizer = load_costs(config)
    run = load_run_seconds(config)
    durations = load_durations(config)
    out: dict[str, float] = {}
    for nodeid in dict.fromkeys([*run, *durations, *sanitizer]):
        spent = sanitizer.get(nodeid, 0.0)
        if nodeid in run:
            out[nodeid] = run[nodeid] + spent
        elif nodeid in durations:
            out[nodeid] = max(durations[nodeid], spent)
        else:
            out[nodeid] = spent
    return out


def _valid_seconds(data: Any) -> dict[str, float]:
    out: dict[str, float] = {}
    if not isinstance(data, Mapping):
        return out
    for nodeid, seconds in data.items():
        if isinstance(nodeid, str) and isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            if math.isfinite(seconds) and seconds >= 0:
                out[nodeid] = float(seconds)
    return out


def sanitizer_seconds(results: Iterable[Any]) -> dict[str, float]:
    """Per test, the sum over tools of ``test_seconds`` in its sanitizer results."""
    out: dict[str, float] = {}
    for r in results:
        if not str(getattr(r, "check", "")).startswith("sanitizer:"):
            continue
        seconds = (getattr(r, "details", None) or {}).get("test_seconds")
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds):
            out[r.nodeid] = out.get(r.nodeid, 0.0) + max(float(seconds), 0.0)
    return out


class RunSeconds:
    """Each test's normal run in seconds, from its reports: setup, call and teardown added up.

    The seconds its sanitizer children spent run outside these phases, except where pipecheck added them to
    the call's duration for pytest-split (``--store-durations``, :data:`SANITIZER_PROPERTY`): those are
    taken off again, as the cache keeps them apart. Under ``--dist each`` every worker reports every test:
    a phase reported again replaces the earlier one rather than adding to it."""

    PHASES = ("setup", "call", "teardown")

    def __init__(self, strip_group: bool = False) -> None:
        self.strip_group = strip_group  # under loadgroup the reports' node ids end in "@group"
        self._phases: dict[str, dict[str, float]] = {}

    def add(self, report: Any) -> None:
        when = getattr(report, "when", None)
        duration = getattr(report, "duration", None)
        if when not in self.PHASES or not _is_seconds(duration):
            return
        seconds = float(duration)
        if when == "call":
            for name, value in getattr(report, "user_properties", None) or ():
                if name == SANITIZER_PROPERTY and _is_seconds(value):
                    seconds -= float(value)
        nodeid = str(report.nodeid)
        if self.strip_group:
            nodeid = base_nodeid(nodeid)
        self._phases.setdefault(nodeid, {})[when] = max(seconds, 0.0)

    def seconds(self) -> dict[str, float]:
        return {nodeid: sum(phases.values()) for nodeid, phases in self._phases.items()}


def _is_seconds(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _merge(config: Any, key: str, fresh: Mapping[str, float]) -> bool:
    """Merge ``fresh`` into the cache entry ``key`` (this run's tests win, the others stay)."""
    merged = {k: v for k, v in _cached(config, key).items() if k not in fresh}
    merged.update({k: round(v, 3) for k, v in fresh.items()})
    if len(merged) > _MAX_ENTRIES:  # keep this run's tests, then the rest in their order
        keep = list(fresh) + [k for k in merged if k not in fresh]
        merged = {k: merged[k] for k in keep[:_MAX_ENTRIES]}
    try:
        config.cache.set(key, merged)
    except Exception:  # an unwritable cache costs balance next time, never this run's results
        return False
    return True


def record_costs(config: Any, results: Iterable[Any], run_seconds: Mapping[str, float] | None = None) -> int:
    """Merge this run's per-test sanitizer seconds and, when given, its normal-run seconds into the cache;
    returns how many tests it updated."""
    if getattr(config, "cache", None) is None:
        return 0
    updated: set[str] = set()
    for key, fresh in ((CACHE_KEY, sanitizer_seconds(results)), (RUN_KEY, dict(run_seconds or {}))):
        if fresh and _merge(config, key, fresh):
            updated.update(fresh)
    return len(updated)


def unknown_cost(costs: Mapping[str, float] | None) -> float:
    """What a test missing from ``costs`` costs: the median of the known positive costs (1.0 when none)."""
    known = [c for c in (costs or {}).values() if c > 0]
    return statistics.median(known) if known else 1.0


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _function_of(nodeid: str) -> str:
    """``nodeid`` without its parameters (``[...]``): the test function all its cases share."""
    return nodeid.split("[", 1)[0]


def cost_estimator(costs: Mapping[str, float] | None) -> Callable[[str], float]:
    """``nodeid -> cost``: its known cost (under its own node id or, for a node id to which xdist's loadgroup
    appended ``@group``, under the id it was collected with, as the cache keeps it), else the median of the
    known positive costs of the other cases of its test function, else what that function cost before it was
    parametrized (a long test cut into cases that workers share: each case is priced at the whole, so it is
    still handed out early), else the median of the known positive costs of the tests in its module (the file
    before ``::``), else :func:`unknown_cost`.

    A durations file or cache entry lags the collection: a module's new tests are missing from it until
    the next recording. Priced at the whole suite's median they look free (a few milliseconds against seconds
    for a nested pytest session), and the share that holds them runs long after the others
    (docs/validation/2026-11-26-h100.md)."""
    known = dict(costs or {})
    by_module: dict[str, list[float]] = defaultdict(list)
    for nodeid, seconds in known.items():
        if seconds > 0:
            by_module[_module_of(nodeid)].append(seconds)
    by_function: dict[str, list[float]] = defaultdict(list)
    for nodeid, seconds in known.items():
        if seconds > 0 and "[" in nodeid:
            by_function[_function_of(nodeid)].append(seconds)
    medians = {module: statistics.median(values) for module, values in by_module.items()}
    cases = {function: statistics.median(values) for function, values in by_function.items()}
    overall = unknown_cost(known)

    def cost(nodeid: str) -> float:
        nodeid = base_nodeid(nodeid) if nodeid not in known else nodeid
        found = known.get(nodeid)
        if found is not None:
            return found
        function = _function_of(nodeid)
        found = cases.get(function) if function != nodeid else None
        if found is None and function != nodeid and known.get(function, 0) > 0:
            found = known[function]
        return found if found is not None else medians.get(_module_of(nodeid), overall)

    return cost


def assign_shares(nodeids: Sequence[str], shares: int, costs: Mapping[str, float] | None = None,
                  together: Sequence[str | None] | None = None, *, modules: bool = False) -> list[int]:
    """The share (0 .. shares-1) of each test: contiguous runs of about equal total cost, but for the tests
    ``together`` moves to the first of theirs.

    ``together`` gives each test a key (or None): the tests that share a key are kept in one share, as
    pytest-xdist's ``--dist loadgroup``, ``loadfile`` and ``loadscope`` keep them on one worker. Such a set
    is cut as one block, placed where its first test is collected; the other tests keep their order.

    A block belongs to the share in which the middle of its cost falls, on the cumulative cost of the
    collection; so each share gets at least one block when there are at least as many blocks as shares,
    and equal costs give equal counts. Unknown tests cost what :func:`cost_estimator` says (their module's
    median, else all known tests', 1.0 when none is known); a test of cost 0 still counts a little, so
    that a share is never made of free tests only.

    The runs are contiguous, so a module is split only where a share ends: its tests share module fixtures,
    imports and the kernels compiled in the worker's process, which each worker that gets part of the module
    pays again. Packing single tests where they fit best would balance to the test, and scatter a module
    over every worker. Contiguous runs balance to about one block per share boundary, which several shares
    a worker (``xdist_shares``, handed out as workers free up) make up for.

    ``modules``: a share ends only where a module does, but for a module that costs more than a share's mean
    (the total over ``shares``), which is cut into about as many pieces of about that mean each (rounded, at
    least one). Each share with sanitized tests starts its own sanitizer children, each a few seconds of
    start-up and compiles before its first test: a module cut in two pays them twice. The tests ``together``
    keeps apart keep their own blocks.
    """
    n = len(nodeids)
    shares = max(int(shares), 1)
    if n == 0:
        return []
    if shares == 1:
        return [0] * n
    keys: Sequence[str | None] = together if together is not None else [None] * n
    if len(keys) != n:
        raise ValueError(f"assign_shares: {len(keys)} keys for {n} tests")
    estimate = cost_estimator(costs)
    floor = unknown_cost(costs) * 1e-3
    weights = [max(float(estimate(nid)), floor) for nid in nodeids]
    if modules:
        keys = _module_pieces(nodeids, weights, keys, sum(weights) / shares)
    blocks: list[list[int]] = []  # the indices of each block's tests, in order of its first test
    block_of: dict[str, int] = {}
    for i, key in enumerate(keys):
        if key is None:
            blocks.append([i])
        elif key in block_of:
            blocks[block_of[key]].append(i)
        else:
            block_of[key] = len(blocks)
            blocks.append([i])
    out = [0] * n
    for block, share in zip(blocks, _cut([sum(weights[i] for i in b) for b in blocks], shares)):
        for i in block:
            out[i] = share
    return out


def _module_pieces(nodeids: Sequence[str], weights: Sequence[float], keys: Sequence[str | None],
                   mean: float) -> list[str | None]:
    """``keys`` with each test that has none keyed by its module, or by its piece of a module that costs more
    than ``mean``: contiguous pieces of about equal cost, as many as the module holds means (rounded, at
    least one). A module's unkeyed tests stay one run across the keyed tests collected among them (an xdist
    group's, which go where their group goes)."""
    out = list(keys)
    runs: list[list[int]] = []  # runs of one module's unkeyed tests, each in collection order
    for i, nodeid in enumerate(nodeids):
        if keys[i] is not None:
            continue
        module = nodeid.split("::", 1)[0]
        if runs and nodeids[runs[-1][0]].split("::", 1)[0] == module:
            runs[-1].append(i)
        else:
            runs.append([i])
    for number, run in enumerate(runs):
        cost = sum(weights[i] for i in run)
        pieces = min(len(run), max(1, math.floor(cost / mean + 0.5))) if mean > 0 else 1
        piece_of = _cut([weights[i] for i in run], pieces) if pieces > 1 else [0] * len(run)
        for i, piece in zip(run, piece_of):
            # not a name an xdist group could have: a group and a module piece never merge
            out[i] = f"\0module {number} {piece}"
    return out


def _cut(weights: Sequence[float], shares: int) -> list[int]:
    """The share of each of ``weights`` in order: contiguous runs of about equal total weight."""
    n = len(weights)
    if n <= shares:  # one block per share
        return list(range(n))
    total = sum(weights)
    mids: list[float] = []  # where the middle of each block's cost falls, in shares
    before = 0.0
    for w in weights:
        mids.append((before + w / 2) * shares / total)
        before += w
    # start of share s: the first block whose middle is past s, kept at least one block after the start
    # of share s-1 and early enough to leave one block for each later share
    starts = [0]
    for s in range(1, shares):
        first = next((i for i, m in enumerate(mids) if m >= s), n)
        first = min(max(first, starts[-1] + 1), n - (shares - s))
        starts.append(first)
    out = [0] * n
    for s, first in enumerate(starts):
        for i in range(first, n):
            out[i] = s
    return out
