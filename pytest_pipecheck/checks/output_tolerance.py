"""The tolerance each compared output gets, and the checks of the tolerance arguments of a check.

* :func:`_output_tolerance` -- calibrated on the same-precision implementation's error where the check
  has one (``tolerance="auto"`` or ``"calibrated"``; never below the loop's accumulation bound, and an
  ERROR where it is not finite), else resolved from the call's ``rtol``/``atol``, the spec's (callables of
  the shape: :func:`_spec_tolerances`) and the config's; then scaled with the reference's magnitude under
  the ``tiny``, ``denormal`` and ``large`` patterns, and its default atol grown with the length of the
  loop (:mod:`pytest_pipecheck.model.tolerance`).
* :func:`_check_tolerance_args`, :func:`_check_tolerance_mode` -- ``rtol=``/``atol=`` must be finite
  numbers >= 0 and ``tolerance=`` one of auto, fixed and calibrated: a PipecheckError naming the spec.

Coverage (:mod:`.coverage`) and the tile probe (:mod:`.tile_probe`) compare with these tolerances.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..model import tolerance as _tol
from ..model import values as _values
from ..model.shape import Shape
from ..model.spec import KernelSpec
from ..model.tensor import Tensor
from ..results import PipecheckError
from .context import CheckContext
from .failures import inconclusive as _inconclusive


def _spec_tolerances(spec: KernelSpec, shape: Shape) -> tuple[Any, Any]:
    """The spec's rtol/atol at ``shape`` (callables of the shape called and checked)."""
    return spec.tolerances(shape)


def _check_tolerance_args(spec: KernelSpec, call: str, **values: Any) -> None:
    """``rtol=``/``atol=`` given to a check must be finite numbers >= 0 (NaN would pass anything)."""
    for name, value in values.items():
        why = None if value is None else _tol.problem(value)
        if why:
            raise PipecheckError(f"spec {spec.name!r}: {call}({name}={value!r}) {why}")


def _check_tolerance_mode(spec: KernelSpec, tolerance: str) -> None:
    if tolerance not in ("auto", "fixed", "calibrated"):
        raise PipecheckError(f"spec {spec.name!r}: tolerance={tolerance!r} must be auto, fixed or calibrated")
    if tolerance == "calibrated" and spec.same_precision is None:
        raise PipecheckError(f"spec {spec.name!r}: tolerance='calibrated' needs the spec's same_precision "
                             "implementation")


def _calibrated(ctx: CheckContext, check: str, spec: KernelSpec, shp: Shape, t: Tensor, want: Any,
                lowp: Any) -> _tol.Tolerance:
    """k times the same-precision implementation's worst error on these inputs (an ERROR if not finite)."""
    import numpy as np

    with np.errstate(invalid="ignore"):
        diff = np.abs(lowp - want)
    finite = np.isfinite(want)
    err = float(np.max(diff[finite])) if finite.any() else 0.0
    absmax = float(np.max(np.abs(want[finite]))) if finite.any() else 0.0
    tol = _tol.calibrated(t.dtype, err, absmax, spec.calibration_k)
    if not (math.isfinite(tol.atol) and math.isfinite(tol.rtol)):
        _inconclusive(ctx, check, spec, f"inconclusive: calibrated tolerance of {t.name!r} is not finite",
                      f"spec {spec.name!r}: the calibrated tolerance of {t.name!r} at {shp} is {tol}: not "
                      "a finite number, so it would accept any output; use tolerance='fixed' or explicit "
                      "rtol=/atol=", {"shape": str(shp), "output": t.name, "tolerance": str(tol)})
    return tol


def _pattern_tolerance(tol: _tol.Tolerance, pattern: _values.Pattern, want: Any, *,
                       calibrated: bool = False) -> _tol.Tolerance:
    """Under ``tiny``/``denormal`` the absolute tolerance shrinks with the reference's magnitude (below 1):
    otherwise any output smaller than the dtype's atol would agree with it. Under ``large`` it grows with
    that magnitude (above 1): where a sum of large terms cancels, a correct kernel's rounding error is
    relative to the terms, not to the small result (an fp32 GEMM accumulating in a different order than
    the reference was off by 1.5e-4 of such an element, over the relative tolerance). A calibrated
    tolerance is left alone: it was measured on these inputs, so it already has their magnitude (scaling
    it again would make a correct kernel's rounding error fail)."""
    import numpy as np

    if calibrated or not pattern.scale_atol or not want.size:
        return tol
    finite = want[np.isfinite(want)]
    peak = float(np.max(np.abs(finite))) if finite.size else 1.0
    scale = max(1.0, peak) if pattern.scale_atol == "up" else min(1.0, peak)
    if scale == 1.0:
        return tol
    return _tol.Tolerance(tol.rtol, tol.atol * scale,
                          f"{tol.source}; atol x {scale:.1e}, the reference's magnitude under {pattern.id}",
                          default_atol=tol.default_atol)


def _output_tolerance(ctx: CheckContext, check: str, spec: KernelSpec, shp: Shape, t: Tensor, want: Any,
                      lowp: Mapping[str, Any] | None, pattern: _values.Pattern, *, spec_rtol: Any, spec_atol: Any,
                      rtol: Any, atol: Any) -> _tol.Tolerance:
    """The tolerance output ``t`` is compared with: calibrated on the same-precision implementation's
    error when there is one (``lowp``; never below the accumulation bound of the loop), else resolved from
    the call, the spec and the config; then
    adjusted for the value ``pattern``, and a default atol for the length of the loop (the reduction
    along ``loop_dim``: :func:`pytest_pipecheck.model.tolerance.accumulated`)."""
    if lowp is not None:
        # both are finite here (_reference made a NaN or inf an error)
        tol = _calibrated(ctx, check, spec, shp, t, want, lowp[t.name])
        tol = _tol.at_least_accumulation(tol, t.dtype, spec.loop_dim, shp[spec.loop_dim], want)
    else:
        tol = _tol.resolve(t.dtype, t.name, spec_rtol=spec_rtol, spec_atol=spec_atol,
                           config_rtol=ctx.config.rtol, config_atol=ctx.config.atol, rtol=rtol, atol=atol)
    tol = _pattern_tolerance(tol, pattern, want, calibrated=lowp is not None)
    return _tol.accumulated(tol, t.dtype, spec.loop_dim, shp[spec.loop_dim], want)
