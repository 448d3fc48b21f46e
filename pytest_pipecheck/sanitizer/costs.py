"""What each test costs under the sanitizer, remembered between runs, and shares balanced by it.

Under pytest-xdist each worker sanitizes one contiguous share of the collection in one child per
tool (pytest_hooks.py). Shares of equal test counts are not shares of equal work: on the bundled
suite a Triton test costs about twice a CUDA one under racecheck (it compiles in the child), so one
GPU finished 35 s before the other (2 x H200, 2026-11-22: 56 s against 92 s of sanitizer children).

Every sanitizer verdict carries the test's own time in its child (``test_seconds``: its BEGIN to
its END marker). At the end of a run the controller adds them up per test over the tools and keeps
them in pytest's cache (``.pytest_cache``, key :data:`CACHE_KEY`), merged with what the cache held
for tests that did not run this time. The next run cuts the collection into contiguous shares of
equal total cost; a test the cache does not know costs the median of the known tests of its own module
(new tests resemble their neighbours: a file of nested pytest sessions costs seconds a test where the
whole suite's median is milliseconds), else the median of all known ones. Without a
cache entry (``-p no:cacheprovider``, a fresh clone, or an unreadable entry) the costs come from
pytest-split's durations file when there is one (``--durations-path``, by default ``.test_durations``
in the working directory, else in the rootdir: each test's whole duration, its sanitizer seconds
included, as ``--store-durations`` records it), so a repository that commits that file is balanced
on a machine that never ran it; with neither, the shares are equal counts. The controller and every worker read the same cache file before any test runs and the
controller writes it only at the end, so they all compute the same shares.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..xdist_hooks import base_nodeid

__all__ = ["CACHE_KEY", "assign_shares", "cost_estimator", "costs_for_balance", "load_costs", "load_durations",
           "record_costs", "sanitizer_seconds", "unknown_cost"]

CACHE_KEY = "pipecheck/sanitizer-seconds"
_MAX_ENTRIES = 20000  # bound the cache entry: the newest tests win


def load_costs(config: Any) -> dict[str, float]:
    """The per-test sanitizer seconds in pytest's cache ({} without a cache or with a bad entry)."""
    cache = getattr(config, "cache", None)
    if cache is None:
        return {}
    try:
        data = cache.get(CACHE_KEY, None)
    except Exception:  # a corrupt cache file must never break a run: fall back to equal counts
        return {}
    return _valid_seconds(data)


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
    """The costs shares are balanced by: the cache's sanitizer seconds, else pytest-split's durations."""
    return load_costs(config) or load_durations(config)


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


def record_costs(config: Any, results: Iterable[Any]) -> int:
    """Merge this run's per-test sanitizer seconds into the cache; returns how many tests it updated."""
    cache = getattr(config, "cache", None)
    fresh = sanitizer_seconds(results)
    if cache is None or not fresh:
        return 0
    merged = {k: v for k, v in load_costs(config).items() if k not in fresh}
    merged.update({k: round(v, 3) for k, v in fresh.items()})
    if len(merged) > _MAX_ENTRIES:  # keep this run's tests, then the rest in their order
        keep = list(fresh) + [k for k in merged if k not in fresh]
        merged = {k: merged[k] for k in keep[:_MAX_ENTRIES]}
    try:
        cache.set(CACHE_KEY, merged)
    except Exception:  # an unwritable cache costs balance next time, never this run's results
        return 0
    return len(fresh)


def unknown_cost(costs: Mapping[str, float] | None) -> float:
    """What a test missing from ``costs`` costs: the median of the known positive costs (1.0 when none)."""
    known = [c for c in (costs or {}).values() if c > 0]
    return statistics.median(known) if known else 1.0


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def cost_estimator(costs: Mapping[str, float] | None) -> Callable[[str], float]:
    """``nodeid -> cost``: its known cost (under its own node id or, for a node id to which xdist's loadgroup
    appended ``@group``, under the id it was collected with, as the cache keeps it), else the median of the
    known positive costs of the tests in its module (the file before ``::``), else :func:`unknown_cost`.

    A durations file or cache entry lags the collection: a module's new tests are missing from it until
    the next recording. Priced at the whole suite's median they looked free: 87 of tests/plugin's nested
    sessions cost 4 ms that way, against about 5 s each under 12 workers on one H100 (2026-11-26), and one
    worker's share of 116 such tests ran 366 s while the other 11 workers finished by 255 s."""
    known = dict(costs or {})
    by_module: dict[str, list[float]] = defaultdict(list)
    for nodeid, seconds in known.items():
        if seconds > 0:
            by_module[_module_of(nodeid)].append(seconds)
    medians = {module: statistics.median(values) for module, values in by_module.items()}
    overall = unknown_cost(known)

    def cost(nodeid: str) -> float:
        found = known.get(nodeid)
        if found is None:
            found = known.get(base_nodeid(nodeid))
        return found if found is not None else medians.get(_module_of(nodeid), overall)

    return cost


def assign_shares(nodeids: Sequence[str], shares: int, costs: Mapping[str, float] | None = None,
                  together: Sequence[str | None] | None = None) -> list[int]:
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
    estimate = cost_estimator(costs)
    floor = unknown_cost(costs) * 1e-3
    weights = [max(float(estimate(nid)), floor) for nid in nodeids]
    out = [0] * n
    for block, share in zip(blocks, _cut([sum(weights[i] for i in b) for b in blocks], shares)):
        for i in block:
            out[i] = share
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
