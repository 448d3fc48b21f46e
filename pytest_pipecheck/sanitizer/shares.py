"""Each test's sanitizer share: the collection cut into contiguous runs of about equal cost, each sanitized by
one set of children in one process (:func:`shares_for`), and the stash keys that carry a test's share and why
its xdist group cannot be kept on one worker.
"""

from __future__ import annotations

import pytest

from .. import state
from ..xdist_hooks import dist_mode, read_groups, together_key
from .costs import assign_shares, share_costs

__all__ = ["GROUP_UNKNOWN", "SHARE", "shares_for"]

SHARE = state.SHARE
GROUP_UNKNOWN = pytest.StashKey[str]()  # why the controller cannot keep this test's xdist group on one worker


def shares_for(config: pytest.Config, nodeids: list[str], workers: int,
               groups: dict[str, str] | None = None) -> list[int]:
    """The share of each collected test: ``workers`` x ``xdist_shares`` contiguous runs of about equal cost,
    each test's normal run plus its sanitizer seconds as the last runs left them in pytest's cache, else from
    pytest-split's durations file (equal counts without either: costs.py); a single share without xdist,
    and under ``--dist each``, where every worker runs every test. The tests that the ``--dist`` mode keeps
    on one worker (an xdist group, a module, a class) are never cut apart; ``groups`` (node id -> xdist
    group) are a worker's own, the controller reads what its workers wrote.
    Workers and the controller compute it from the same collection order, groups, cache and settings.

    With several shares a worker, a share ends only where a module does, unless the module costs more than a
    share's mean (:func:`.costs.assign_shares` ``modules``): xdist hands the shares out as workers free up, so
    unequal shares still even out, and a module's tests share one set of sanitizer children. With one share a
    worker the shares must be equal, and are cut wherever the cost says.

    Contiguous shares beat shares dealt round robin (docs/validation/2026-11-22-h200-0754.md,
    docs/validation/2026-11-22-h200-0453.md)."""
    dist = dist_mode(config)
    per_worker = config.stash[state.RUN_CONFIG].xdist_shares
    shares = workers * per_worker if workers > 1 and dist != "each" else 1
    if dist == "loadgroup" and groups is None:
        groups = read_groups(config)
    keys = [together_key(nodeid, dist, groups) for nodeid in nodeids]
    return assign_shares(nodeids, shares, share_costs(config), keys if any(k is not None for k in keys) else None,
                         modules=per_worker > 1)
