"""A pytest-xdist scheduler that keeps each sanitizer share on one worker.

Each worker sanitizes, in one child per tool, the share of the collection that contains the first
test it is sent; if a share's tests were spread over several workers, each of them would sanitize
the whole share again. So the share is the unit of scheduling: this is xdist's scope scheduling
with the share as the scope. Shares are computed from the collection order, which xdist guarantees
is the same on every worker and on the controller, and from the sanitizer costs in pytest's cache,
which all of them read before any test runs (costs.py), so no node id needs a suffix.
Imported only when xdist asks for a scheduler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling


class ShareScheduling(LoadScopeScheduling):
    """Scope scheduling where a test's scope is its sanitizer share."""

    def __init__(self, config: pytest.Config, log: Any,
                 shares_for: Callable[[list[str], int], list[int]]) -> None:
        super().__init__(config, log)
        self._shares_for = shares_for
        self._shares: dict[str, int] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._shares is None:
            collection = list(self.collection or [])
            n = max(int(self.numnodes), 1)
            self._shares = dict(zip(collection, self._shares_for(collection, n)))
        return f"pipecheck-share-{self._shares.get(nodeid, 0)}"
