"""Preconditions on a kernel's dimensions (``KernelSpec(preconditions=...)``): :class:`Divisible` (a
multiple of ``n``: alignment for vector loads, TMA, ...), :class:`Range` (within ``[lo, hi]``), or a
callable of the shape's sizes returning an error string; :func:`_check_precondition` checks any of them at
one shape.

A spec adds the ``Divisible`` that a dimension expression such as ``K/8`` implies (:class:`_Implied`, naming
the tensor and the expression). This module lies below :mod:`.spec` and imports no other module of the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Divisible", "Precondition", "Range"]

@dataclass(frozen=True, eq=False)
class Divisible:
    """The dimension must be a multiple of ``n`` (alignment for vector loads, TMA, ...)."""

    dim: str
    n: int
    #: why, for messages: a spec adds one implied by a tensor's dimension expression (``K/8``) and says so
    reason: str = ""

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Divisible):
            return (self.dim, self.n) == (other.dim, other.n)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.dim, self.n))

    def check(self, dims: Mapping[str, int]) -> str | None:
        value = dims.get(self.dim)
        if value is not None and value % self.n:
            return f"{self.dim}={value} is not a multiple of {self.n}" + (f" ({self.reason})" if self.reason else "")
        return None

    def __str__(self) -> str:
        return f"Divisible({self.dim!r}, {self.n})"


@dataclass(frozen=True, eq=False, repr=False)
class _Implied(Divisible):
    """A Divisible the spec derived from a dimension expression (``K/8``): derived again whenever the spec is
    built, so that ``dataclasses.replace(spec, constants=...)`` does not keep one of the old constants."""

    def __repr__(self) -> str:
        return f"Divisible(dim={self.dim!r}, n={self.n!r}, reason={self.reason!r})"


@dataclass(frozen=True)
class Range:
    """The dimension must lie in ``[lo, hi]`` (inclusive)."""

    dim: str
    lo: int = 1
    hi: int = 2**31 - 1

    def check(self, dims: Mapping[str, int]) -> str | None:
        value = dims.get(self.dim)
        if value is not None and not self.lo <= value <= self.hi:
            return f"{self.dim}={value} is outside [{self.lo}, {self.hi}]"
        return None

    def __str__(self) -> str:
        return f"Range({self.dim!r}, {self.lo}, {self.hi})"


# a Divisible, a Range, or a callable(dims) returning an error string (None or "" when it holds)
Precondition = Divisible | Range | Callable[[Mapping[str, int]], Any]


def _check_precondition(pre: Precondition, dims: Mapping[str, int]) -> str | None:
    if isinstance(pre, (Divisible, Range)):
        return pre.check(dims)
    result = pre(dims)
    if result is None or result is True or result == "":
        return None
    if result is False:
        return f"precondition {getattr(pre, '__name__', repr(pre))} does not hold"
    return str(result)
