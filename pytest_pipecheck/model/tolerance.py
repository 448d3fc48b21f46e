"""Tolerances from precision, shown in every report.

An element passes when ``|out - ref| <= atol + rtol * |ref|`` and ``out`` is not NaN (NaN never
passes, whatever the tolerance). Defaults depend on the output dtype: about two units in the last
place of the output format, which a kernel that accumulates in fp32 and rounds once meets:

    float16  rtol 2e-3   atol 2e-3      bfloat16 rtol 1.6e-2 atol 1.6e-2
    float32  rtol 1e-4   atol 1e-5      float64  rtol 1e-10  atol 1e-12    integers exact

Overrides, strongest first: the check's keyword arguments, the marker / config (``rtol=``,
``atol=``), the spec's ``rtol``/``atol`` (a float or a per-output mapping), the dtype default.

The default ``atol`` knows the accumulation (:func:`accumulated`). A kernel reduces along the spec's
``loop_dim``: a GEMM over K, a scan or a softmax over the row. Summing ``L`` terms in an accumulator
of unit roundoff ``u`` rounds once per addition; the k-th rounding error is ``delta_k * s_k`` with
``|delta_k| <= u`` and ``s_k`` the running sum, so the total error is ``sum_k delta_k * s_k``. The
``delta_k`` of a correct kernel are independent of each other and centred on zero (the model of
Higham and Mary's probabilistic rounding error analysis), so the errors add like a random walk, not
in one direction: by Hoeffding's inequality the total exceeds ``lam * u * sqrt(sum_k s_k**2)`` with
probability at most ``2 exp(-lam**2 / 2)``, and ``sqrt(sum_k s_k**2) <= sqrt(L) * max_k |s_k|``. The
running sums are measured by the reference: the largest finite ``|ref|`` (for a scan the running sums
are its elements; a dot product's running sums grow to about its result). Hence the absolute
tolerance at loop length ``L``::

    atol = max(dtype default, lam * u * sqrt(L) * max|ref|),   lam = 6 (2 exp(-18) = 3e-8 per element)

with ``u = 2**-24`` (an fp32 accumulator) for 16- and 32-bit outputs and ``2**-53`` for float64. It
grows like ``sqrt(L)``, as the rounding error of an accumulator does, not like ``L``: where the
elements cancel (a scan crossing zero, a dot product near zero) the relative tolerance alone fails
a correct kernel, while a dropped loop tile still moves a value by about the tile's own sum (of
order ``sqrt(tile)`` for unit-normal terms), thousands of times this bound at the sizes kernels run.
The default is raised only where the bound is larger, and only the absolute part: an ``atol`` given
by the spec, the marker, the configuration or the check is used as given. A kernel that accumulates
in a narrower type than the bound assumes (fp16) is still outside it; say so with ``atol=``.

The output's resolution is the floor of every tolerance (:func:`resolution`): an element passes when
it is within one unit in the last place of the output dtype at the reference's magnitude, subnormals
included, whatever ``atol`` and ``rtol`` say. A correctly rounded output is within half of one, so a
tolerance below that (a value pattern that scales ``atol`` to tiny references, an fp16 output of values
below fp16's normal range) would fail a correct kernel for the reference's digits the output cannot hold.

Calibrated mode (FlashAttention's habit): run the spec's ``same_precision`` implementation, measure
its worst error against the high-precision reference, and accept a kernel error of at most
``k`` times that (plus a floor of one unit in the last place of the output's largest value,
so an exact same-precision implementation does not demand bit-exactness), and never less than the
accumulation bound above (:func:`at_least_accumulation`): the same-precision implementation's error
is that of its own summation order, which may be luckier than the kernel's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ACCUMULATION_LAMBDA", "DEFAULTS", "Tolerance", "accumulated", "accumulation_atol", "at_least_accumulation",
           "calibrated", "compare", "default_tolerance", "problem", "resolve"]

DEFAULTS: dict[str, tuple[float, float]] = {
    "float16": (2e-3, 2e-3),
    "bfloat16": (1.6e-2, 1.6e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-10, 1e-12),
}
_EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}
#: unit roundoff of the accumulator assumed for each output dtype: fp32 for 16- and 32-bit outputs
_ACCUMULATOR_U = {"float16": 2.0**-24, "bfloat16": 2.0**-24, "float32": 2.0**-24, "float64": 2.0**-53}
_ACCUMULATOR_NAME = {2.0**-24: "2^-24, an fp32 accumulator", 2.0**-53: "2^-53, an fp64 accumulator"}
#: standard deviations of the accumulated rounding error the default atol allows (see the module docstring)
ACCUMULATION_LAMBDA = 6.0


@dataclass(frozen=True)
class Tolerance:
    """The tolerance used for one output, and where it came from (shown in reports)."""

    rtol: float
    atol: float
    source: str
    #: the atol is the dtype default (perhaps scaled by a value pattern), not one the spec, marker,
    #: configuration or check gave: :func:`accumulated` may raise it for a long accumulation
    default_atol: bool = False

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
    return Tolerance(rtol, atol, f"{dtype} default", default_atol=True)


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
    r, a, sources, given_atol = base.rtol, base.atol, [], False
    for label, rv, av in (("spec", _pick(spec_rtol, output), _pick(spec_atol, output)),
                          ("config", config_rtol, config_atol),
                          ("argument", rtol, atol)):
        if rv is not None:
            r = rv
            sources.append(f"rtol from {label}")
        if av is not None:
            a = av
            given_atol = True
            sources.append(f"atol from {label}")
    return Tolerance(r, a, ", ".join(sources) if sources else base.source, default_atol=not given_atol)


def accumulation_atol(dtype: str, length: int, peak: float) -> float:
    """``lam * u * sqrt(length) * peak``: the bound on the rounding error of ``length`` additions in the
    accumulator of ``dtype`` whose running sums stay within ``peak`` (see the module docstring); 0 for
    integer dtypes (exact) and dtypes pipecheck does not know."""
    import math

    u = _ACCUMULATOR_U.get(dtype)
    if u is None or length < 1 or not math.isfinite(peak):
        return 0.0
    return ACCUMULATION_LAMBDA * u * math.sqrt(length) * abs(peak)


def accumulated(tol: Tolerance, dtype: str, loop_dim: str, length: int, ref: Any) -> Tolerance:
    """``tol`` with its default atol raised to the accumulation bound of ``length`` terms along
    ``loop_dim`` (:func:`accumulation_atol`, with the running sums measured by the largest finite
    element of the reference ``ref``) where that is larger. An atol that was given (not the default),
    and a calibrated tolerance, are returned unchanged; the source says what was raised and why."""
    if not tol.default_atol:
        return tol
    return _raised_to_accumulation(tol, dtype, loop_dim, length, ref, default_atol=True)


def _raised_to_accumulation(tol: Tolerance, dtype: str, loop_dim: str, length: int, ref: Any, *,
                            default_atol: bool) -> Tolerance:
    """``tol`` with its atol raised to :func:`accumulation_atol` (the running sums measured by the largest finite
    element of ``ref``) where that is larger, the source saying why; else ``tol`` itself."""
    import numpy as np

    r = np.asarray(ref, dtype=np.float64)
    finite = r[np.isfinite(r)]
    peak = float(np.max(np.abs(finite))) if finite.size else 0.0
    grown = accumulation_atol(dtype, length, peak)
    if not grown > tol.atol:
        return tol
    u = _ACCUMULATOR_NAME.get(_ACCUMULATOR_U[dtype], "")
    why = (f"atol raised to {ACCUMULATION_LAMBDA:g} u sqrt(L) max|ref| for L = {length} additions along {loop_dim} "
           f"(u = {u}; max|ref| {peak:.3g})")
    return Tolerance(tol.rtol, grown, f"{tol.source}; {why}", default_atol=default_atol)


def at_least_accumulation(tol: Tolerance, dtype: str, loop_dim: str, length: int, ref: Any) -> Tolerance:
    """A calibrated ``tol`` raised to the accumulation bound of ``length`` terms (:func:`accumulated`) where
    that is larger. The same-precision implementation sums in one order, and where that order happens to be
    nearly exact, ``k`` times its error is less than a correct kernel summing in another order is off by
    (fla-core's chunked cumsum, 3 units in the last place at T = 159, against a sequential fp32 sum off by
    half of one); the bound holds for every order."""
    return _raised_to_accumulation(tol, dtype, loop_dim, length, ref, default_atol=tol.default_atol)


def calibrated(dtype: str, same_precision_err: float, ref_absmax: float, k: float) -> Tolerance:
    """At most ``k`` times the same-precision implementation's worst error, floored at one output ulp."""
    floor = _EPS.get(dtype, 0.0) * max(ref_absmax, 1e-30)
    atol = k * same_precision_err + floor
    return Tolerance(0.0, atol, f"calibrated: {k:g} x same-precision error {same_precision_err:.2e}")


#: per float dtype: its significand's bits (the implicit one included) and its smallest normal exponent
_FORMAT = {"float16": (11, -14), "bfloat16": (8, -126), "float32": (24, -126), "float64": (53, -1022)}


def smallest_step(dtype: str) -> float | None:
    """The smallest positive value ``dtype`` holds (its smallest subnormal); None for a dtype that is not a float
    format pipecheck knows."""
    fmt = _FORMAT.get(dtype)
    return None if fmt is None else 2.0 ** (fmt[1] - (fmt[0] - 1))


def resolution(dtype: str | None, ref: Any) -> Any:
    """One unit in the last place of ``dtype`` at each ``|ref|`` (subnormals included: the spacing never goes
    below the smallest subnormal); 0 for an integer or unknown dtype (exact). The floor of :func:`compare`'s
    tolerance: no output of that dtype can be nearer a reference it cannot represent than half of it."""
    import numpy as np

    r = np.abs(np.asarray(ref, dtype=np.float64))
    fmt = _FORMAT.get(dtype or "")
    if fmt is None:
        return np.zeros(r.shape)
    bits, emin = fmt
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where((r > 0) & np.isfinite(r), r, 2.0 ** emin)))
    return np.exp2(np.maximum(exponent, emin) - (bits - 1))


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
    #: the tolerance at the worst element, ``atol + rtol * |worst_want|`` (0 when nothing is bad)
    worst_allowed: float = 0.0
    #: the largest ``|out - ref| / (atol + rtol * |ref|)`` over the compared elements: at most 1 when
    #: every element passes (how close the kernel came to the tolerance), inf for an error under an
    #: exact tolerance; NaN outputs and excluded elements do not count
    of_tol: float = 0.0

    @property
    def fraction(self) -> float:
        return self.bad / self.n if self.n else 0.0


def compare(out: Any, ref: Any, tol: Tolerance, exclude: Any = None, dtype: str | None = None) -> Comparison:
    """Compare host arrays elementwise under ``tol``, never tighter than the resolution of the output dtype
    ``dtype`` at the reference's magnitude (:func:`resolution`; None: no floor); NaN in ``out`` always counts
    as bad.

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
    # inf and NaN are part of the comparison (a kernel writes them, extreme value patterns put them in the
    # reference), and a huge error over a tiny tolerance overflows the ratios to inf: none of it is news
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(o - r)
        allowed = tol.atol + tol.rtol * np.abs(r)
        if dtype is not None:
            allowed = np.maximum(allowed, resolution(dtype, r))
        nan = np.isnan(o) & ~np.isnan(r)
        bad = (diff > allowed) | nan | ~np.isfinite(r)
        if problem(tol.rtol) or problem(tol.atol):
            bad |= True
        if exclude is not None:
            bad &= ~exclude
            nan &= ~exclude
        finite = ~np.isnan(diff)
        max_abs = float(diff[finite].max()) if finite.any() else 0.0
        rel = diff / np.maximum(np.abs(r), max(tol.atol, 1e-30))
        max_rel = float(rel[finite].max()) if finite.any() else 0.0
        n_bad = int(bad.sum())
        worst: tuple[int, ...] | None = None
        got = want = worst_allowed = 0.0
        if n_bad:
            excess = np.where(bad, np.nan_to_num(diff - allowed, nan=np.inf), -np.inf)
            flat = int(np.argmax(excess))
            worst = tuple(int(i) for i in np.unravel_index(flat, o.shape))
            got, want, worst_allowed = float(o[worst]), float(r[worst]), float(allowed[worst])
        counted = finite & np.isfinite(r)
        if exclude is not None:
            counted &= ~exclude
        of_tol = 0.0
        if counted.any():
            d, a = diff[counted], allowed[counted]
            ratio = np.where(a > 0, d / np.where(a > 0, a, 1.0), np.where(d > 0, np.inf, 0.0))
            of_tol = float(ratio.max())
    return Comparison(int(o.size), n_bad, int(nan.sum()), max_abs, max_rel, worst, got, want, worst_allowed, of_tol)
