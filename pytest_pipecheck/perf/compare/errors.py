"""The error of compare mode."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...results import PipecheckError

if TYPE_CHECKING:  # pragma: no cover
    pass


class CompareError(PipecheckError):
    """Compare mode cannot go on: REV does not resolve, its tree cannot be made, or its process failed."""
