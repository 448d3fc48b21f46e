"""What comparing one check at REV can give: paired samples, or a check new at REV."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..stats import Samples

if TYPE_CHECKING:  # pragma: no cover
    pass


@dataclass(frozen=True)
class Paired:
    """Both series of one compared check: sample i of each timed together."""

    head: Samples
    base: Samples


@dataclass(frozen=True)
class NewAtRev:
    """The check has nothing to pair with at REV, and why."""

    reason: str
