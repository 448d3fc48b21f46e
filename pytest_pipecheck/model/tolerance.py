"""Tolerances from precision, shown in every report.

An element passes when ``|out - ref| <= atol + rtol * |ref|`` and ``out`` is not NaN (NaN never
passes, whatever the tolerance). Defaults depend on the output dtype: about two units in the last
place of the output format, which a kernel that accumulates in fp32 and rounds once meets:

    float16  rtol 2e-3   atol 2e-3      bfloat16 rtol 1.6e-2 atol 1.6e-2
    float32  rtol 1e-4   atol 1e-5      float64  rtol 1e-10  atol 1e-12    integers exact

Overrides, strongest first: the check's keyword arguments, the marker / config (``rtol=``,
``atol=``), the spec's ``rtol``/``atol`` (a float or a per-output mapping), the dtype default.

Calibrated mode (FlashAttention's habit): run the spec's ``same_precision`` implementation, measure
its worst error against the high-precision reference, and accept a kernel error of at most
``k`` times that (plus a floor of one unit in the last place of the output's largest value,
so an exact same-precision implementation does not demand bit-exactness).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULTS", "Tolerance", "calibrated", "compare", "default_tolerance", "problem", "resolve"]

DEFAULTS: dict[str, tuple[float, float]] = {
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-10, 1e-12),
}
_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


@dataclass(frozen=True)
class Tolerance:
    """The tolerance used for one output, and where it came from (shown in reports)."""

    rtol: float
    atol: float
    source: str

    def __str__(self) -> str:
        return f"rtol {self.rtol:.1e}, atol {self.atol:.1e} ({self.source})"

    @property
    def short(self) -> str:
        if self.rtol == 0 and self.atol == 0:
            return "exact"
        return f"rtol {self.rtol:.0e}, atol {self.atol:.0e}"


def problem(value: Any) -> str | None:
    """Why ``value`` cannot be a tolerance (rtol, atol), or None when it can.

    A tolerance is a finite number >= 0. NaN would make every comparison false (so nothing could
    fail), inf accepts anything, a negative one fails a correct kernel, and a string would fail
    late with a raw ValueError from deep inside the comparison.
    """
    import math
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"must be a number, got {type(value).__name__}"
    number = float(value)
    if math.isnan(number):
        return "must be a number, not NaN (no element could fail against it)"
    if math.isinf(number):
        return "must be finite (an infinite tolerance accepts anything)"
    if number < 0:
        return "must be >= 0 (a negative tolerance fails even an exact result)"
    return None


def default_tolerance(dtype: str) -> Tolerance:
    """The dtype default (exact for integer dtypes)."""
    rtol, atol = DEFAULTS.get(dtype, (0.0, 0.0))
    return Tolerance(rtol, atol, f"{dtype} default")


def _pick(value: Any, output: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, dict) or hasattr(value, "keys"):
        got = value.get(output)
        return None if got is None else float(got)
    return float(value)


def resolve(dtype: str, output: str, *, spec_rtol: Any = None, spec_atol: Any = None,
            config_rtol: float | None = None, config_atol: float | None = None,
            rtol: float | None = None, atol: float | None = None) -> Tolerance:
    """The tolerance for ``output``: keyword > config/marker > spec > dtype default, per component."""
    base = default_tolerance(dtype)
    r, a, sources = base.rtol, base.atol, []
    for label, rv, av in (("spec", _pick(spec_rtol, output), _pick(spec_atol, output)),
                          ("config", config_rtol, config_atol),
                          ("argument", rtol, atol)):
        if rv is not None:
            r = rv
            sources.append(f"rtol from {label}")
        if av is not None:
            a = av
            sources.append(f"atol from {label}")
    return Tolerance(r, a, ", ".join(sources) if sources else base.source)


def calibrated(dtype: str, same_precision_err: float, ref_absmax: float, k: float) -> Tolerance:
    """At most ``k`` times the same-precision implementation's worst error, floored at one output ulp."""
    floor = _EPS.get(dtype, 0.0) * max(ref_absmax, 1e-30)
    atol = k * same_precision_err + floor
    return Tolerance(0.0, atol, f"calibrated: {k:g} x same-precision error {same_precision_err:.2e}")


@dataclass(frozen=True)
class Comparison:
    """Outcome of comparing one output with its reference (host NumPy arrays)."""

    n: int
    bad: int
    nan: int
    max_abs: float
    max_rel: float
    worst_index: tuple[int, ...] | None
    worst_got: float
    worst_want: float

    @property
    def fraction(self) -> float:
        return self.bad / self.n if self.n else 0.0


def compare(out: Any, ref: Any, tol: Tolerance, exclude: Any = None) -> Comparison:
    """Compare host arrays elementwise under ``tol``; NaN in ``out`` always counts as bad.

    So does an element whose reference is NaN or inf (NaN compares false with everything, and
    ``|x - inf| <= atol + rtol * inf`` holds for any x: either would read as agreement), and every
    element under a tolerance that is not a finite number >= 0. The checks reject such references
    and tolerances before they get here; this is the last line. ``exclude`` is an optional boolean
    mask of elements already reported (e.g. never written) that should not count again. The worst
    element is the one with the largest excess over its tolerance.
    """
    import numpy as np

    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        diff = np.abs(o - r)
        allowed = tol.atol + tol.rtol * np.abs(r)
        nan = np.isnan(o) & ~np.isnan(r)
        bad = (diff > allowed) | nan | ~np.isfinite(r)
        if problem(tol.rtol) or problem(tol.atol):
            bad |= True
        if exclude is not None:
            bad &= ~exclude
        finite = ~np.isnan(diff)
        max_abs = float(diff[finite].max()) if finite.any() else 0.0
        rel = diff / np.maximum(np.abs(r), max(tol.atol, 1e-30))
        max_rel = float(rel[finite].max()) if finite.any() else 0.0
        n_bad = int(bad.sum())
        worst: tuple[int, ...] | None = None
        got = want = 0.0
        if n_bad:
            excess = np.where(bad, np.nan_to_num(diff - allowed, nan=np.inf), -np.inf)
            flat = int(np.argmax(excess))
            worst = tuple(int(i) for i in np.unravel_index(flat, o.shape))
            got, want = float(o[worst]), float(r[worst])
    return Comparison(int(o.size), n_bad, int(nan.sum()), max_abs, max_rel, worst, got, want)
