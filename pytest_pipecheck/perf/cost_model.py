"""A two-number cost model of a software pipeline: serialized vs overlapped per-tile cost.

Pipelining claims to turn each tile's cost from ``load + compute`` into ``max(load, compute)``. With
``S`` stages a block first fills ``S - 1`` tiles (prologue: loads nobody overlaps) and at the end
drains the last ones (epilogue: compute nothing overlaps). For ``n`` tiles per block:

    serialized = n * (load + compute)
    pipelined  = fill + (n - 1) * max(load, compute) + compute,   fill = load (one exposed load)

With ``S == 1`` there is nothing to overlap, so the pipelined cost equals the serialized one. The
inputs come from measurement: time a load-only and a compute-only variant of the kernel (same grid,
same tiles) and divide by the tile count; :func:`predict_from_variants` does exactly that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["PipelinePrediction", "pipelined_time", "predict_from_variants", "serialized_time"]


def _check(name: str, value: float, *, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def serialized_time(load: float, compute: float, tiles: int) -> float:
    """Time of ``tiles`` tiles when each tile's load and compute do not overlap."""
    load, compute = _check("load", load), _check("compute", compute)
    n = int(_check("tiles", tiles))
    return n * (load + compute)


def pipelined_time(load: float, compute: float, tiles: int, stages: int) -> float:
    """Time of ``tiles`` tiles through a ``stages``-deep pipeline: one exposed load (prologue),
    ``tiles - 1`` overlapped steps of ``max(load, compute)``, one exposed compute (epilogue).

    A deeper ring does not change the steady state of this model; it only decides whether the
    overlap exists at all (``stages >= 2``) -- what depth buys in practice is latency tolerance,
    which shows up as a smaller measured ``load`` per tile.
    """
    load, compute = _check("load", load), _check("compute", compute)
    n = int(_check("tiles", tiles))
    s = int(_check("stages", stages, positive=True))
    if n == 0:
        return 0.0
    if s == 1:
        return serialized_time(load, compute, n)
    return load + (n - 1) * max(load, compute) + compute


@dataclass(frozen=True)
class PipelinePrediction:
    load_per_tile: float
    compute_per_tile: float
    tiles: int
    stages: int
    serialized: float
    pipelined: float

    @property
    def bound(self) -> str:
        """Which side the steady state waits on: "load" or "compute"."""
        return "load" if self.load_per_tile > self.compute_per_tile else "compute"

    @property
    def speedup(self) -> float:
        """Predicted serialized / pipelined time (1.0 when nothing overlaps)."""
        return self.serialized / self.pipelined if self.pipelined else 1.0


def predict_from_variants(load_only: float, compute_only: float, tiles: int, stages: int) -> PipelinePrediction:
    """Predict a kernel's time from its measured load-only and compute-only variants.

    ``load_only`` / ``compute_only`` are total times of the variants over ``tiles`` tiles per block
    (any unit; the prediction has the same unit). Raises ValueError for negative or non-finite times,
    ``tiles < 1`` or ``stages < 1``.
    """
    lo = _check("load_only", load_only)
    co = _check("compute_only", compute_only)
    n = int(_check("tiles", tiles, positive=True))
    s = int(_check("stages", stages, positive=True))
    load, compute = lo / n, co / n
    return PipelinePrediction(load, compute, n, s, serialized_time(load, compute, n),
                              pipelined_time(load, compute, n, s))
