"""A pytest-xdist scheduler that keeps each sanitizer share on one worker.

Each worker sanitizes, in one child per tool, the share of the collection that contains the first
test it is sent; if a share's tests were spread over several workers, each of them would sanitize
the whole share again. So the share is the unit of scheduling: this is xdist's scope scheduling
with the share as the scope. Shares are computed from the position in the collection, which xdist
guarantees is the same on every worker and on the controller, so no node id needs a suffix.
Imported only when xdist asks for a scheduler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling


class ShareScheduling(LoadScopeScheduling):
    """Scope scheduling where a test's scope is its sanitizer share."""

    def __init__(self, config: pytest.Config, log: Any, share_of: Callable[[int, int, int], int]) -> None:
        super().__init__(config, log)
        self._share_of = share_of
        self._shares: dict[str, int] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._shares is None:
            collection = self.collection or []
            n = max(int(self.numnodes), 1)
            self._shares = {nid: self._share_of(i, len(collection), n) for i, nid in enumerate(collection)}
        return f"pipecheck-share-{self._shares.get(nodeid, 0)}"
