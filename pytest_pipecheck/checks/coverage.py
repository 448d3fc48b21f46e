"""The coverage check driven by a KernelSpec: poisoned outputs and guard bands, then the comparison.

:func:`check_coverage` -- outputs start poisoned inside guarded, row-padded allocations (inputs sit in NaN
guard bands: :mod:`.launch`); after one launch every output element must be written, no guard or padding
element may change, inputs must be untouched, and every element must match the higher-precision reference
(:mod:`.reference`) within tolerance (:mod:`.output_tolerance`; NaN never passes). A failure gives counts,
fractions, the worst element by index and by tile, and the tolerance used; the bounds watch of the launch
(:mod:`.bounds`) adds a line per access past a view's edge.

Integer outputs run twice under two different poisons (any integer poison is a value a kernel may write).
An ``inout`` tensor starts with its input values in a fresh copy for the launch and is compared after it
(the reference gets the values before); an output with ``init="zeros"`` starts zeroed. Neither can be
poisoned, so for them coverage compares values only: an element never written is found only where the
expected value differs from the starting one. Under ``nan``, ``inf`` and ``max`` the kernel must write NaN
and inf where the reference, rounded to the output dtype, holds them.

It takes ``values=`` (:mod:`pytest_pipecheck.model.values`) and ``layout=``
(:mod:`pytest_pipecheck.model.layouts`), records one CheckResult (``coverage``) and raises PipecheckFailure
on a defect, with why first where a changed run names it (:func:`.tile_probe._explained`); a bad spec or
input raises PipecheckError naming the spec.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..model import layouts as _lay
from ..model import tolerance as _tol
from ..model import values as _values
from ..model.shape import Shape
from ..model.spec import KernelSpec
from ..model.tensor import Tensor
from ..results import CheckResult, Verdict
from . import arrays as _arr
from . import bounds as _bounds
from . import failures as _failures
from .context import CheckContext
from .failures import fail as _fail
from .failures import pct as _pct
from .failures import where as _where
from .launch import _alloc_inputs, _input_values, _launch, _pattern, _poisoned, _stages_override
from .output_tolerance import (
    _check_tolerance_args,
    _check_tolerance_mode,
    _output_tolerance,
    _spec_tolerances,
)
from .reference import _out_of_range, _reference
from .tile_probe import _explained

__all__ = ["check_coverage"]


@_explained
def check_coverage(ctx: CheckContext, spec: KernelSpec, shape: Any, *, tolerance: str = "auto",
                   rtol: float | None = None, atol: float | None = None, values: Any = None,
                   layout: Any = None) -> CheckResult:
    """Poisoned, guarded outputs; every element written; guards intact; match the reference.

    ``tolerance``: "auto" (calibrated when the spec has ``same_precision``, else by dtype), "fixed"
    or "calibrated". ``rtol``/``atol`` override everything else. ``values``: a value pattern name
    (``"negative"``; see :mod:`pytest_pipecheck.model.values`), default ``normal``. ``layout``: each
    tensor's memory layout (a :class:`~pytest_pipecheck.model.layouts.Layout`, its id or ``{tensor: layout}``;
    default: the spec's base layout). Raises PipecheckFailure with counts, the worst element by index
    and tile and the tolerance used; PipecheckError for a bad spec/shape/pattern/layout.
    """
    __tracebackhide__ = True
    shp = spec.check_shape(shape)
    pattern = _pattern(spec, values)
    _check_tolerance_args(spec, "check_coverage", rtol=rtol, atol=atol)
    _check_tolerance_mode(spec, tolerance)
    tolerances = _Tolerances(*_spec_tolerances(spec, shp), rtol=rtol, atol=atol)
    lay = _lay.as_layout(spec, layout)
    run = _coverage_run(ctx, spec, shp, pattern, lay)
    expected = _expected(ctx, spec, shp, run, pattern, tolerance, rtol, atol)
    if isinstance(expected, CheckResult):
        return expected  # a pattern that drives the reference past the output's range: skipped, with why
    ref, lowp = expected
    lines = [f"{_where(spec, shp, pattern)}{_lay.describe(lay, spec)}: coverage failed"]
    details: dict[str, Any] = {"shape": str(shp), "values": pattern.name, "layout": str(lay), "outputs": {}}
    for name, n in run.input_writes.items():
        if n:
            lines.append(f"input {name!r}: {n} element(s) of its allocation changed; a kernel must not write "
                         "its inputs (an output pointer or stride mixed up?)")
    lines.extend(run.oob.lines())
    details["bounds"] = run.oob.details()
    checked: list[_failures.OutputCheck] = []
    for t in spec.compared:
        out_lines, info, check = _output_verdict(ctx, spec, shp, t, run, ref[t.name], lowp, pattern, tolerances)
        lines.extend(out_lines)
        details["outputs"][t.name] = info
        checked.append(check)
    details["of_tol"] = max((c.cmp.of_tol for c in checked), default=0.0)
    summary = _coverage_summary(spec, pattern, checked, run, details)
    if len(lines) > 1:
        _fail(ctx, "coverage", spec, f"{summary} at {shp}", lines, details)
    return ctx.record(CheckResult("coverage", Verdict.PASS, summary, kernel=spec.name, details=details))


@dataclasses.dataclass
class _CoverageRun:
    """One coverage launch: the guarded inputs and outputs, the second run's outputs (integer outputs run
    under a second poison), what the kernel wrote into its inputs, and the bounds watch of the launch."""

    inputs: dict[str, _arr.GuardedArray]
    outputs: dict[str, _arr.GuardedArray]
    second: dict[str, _arr.GuardedArray] | None
    input_writes: dict[str, int]
    oob: Any


def _coverage_run(ctx: CheckContext, spec: KernelSpec, shp: Shape, pattern: _values.Pattern,
                  lay: _lay.Layout) -> _CoverageRun:
    """Allocate poisoned, guarded tensors at ``shp`` and launch the kernel (twice for integer outputs)."""
    __tracebackhide__ = True
    extra = _stages_override(ctx, spec)
    vals = {t.name: _input_values(ctx, spec, t, shp, i, pattern) for i, t in enumerate(spec.inputs)}
    # on the CPU tier every load and store of the run is checked against the views (reads past an edge
    # whose values are discarded leave no trace in the outputs)
    with _bounds.watch(ctx, spec) as oob:
        inputs = _alloc_inputs(ctx, spec, shp, vals, lay)
        outputs = _launch(ctx, spec, shp, inputs, extra, "the coverage run", "coverage", pattern=pattern,
                          layout=lay)
    # An integer poison is a value a kernel may legitimately write (7 in a uint8 output): integer
    # outputs run a second time under the other poison, and only an element holding the poison of
    # each run is unwritten. Float poisons are NaN payloads no arithmetic produces: one run is enough.
    second: dict[str, _arr.GuardedArray] | None = None
    if any(not _arr.is_float(t.dtype) and _poisoned(t) for t in spec.outputs):
        second = _launch(ctx, spec, shp, inputs, extra, "the coverage run (second poison)", "coverage", poison=1,
                         pattern=pattern, layout=lay)
    # the kernel's writes to its inputs, read before the reference runs (it gets copies anyway)
    input_writes = {name: int(g.changed().sum()) for name, g in inputs.items()}
    return _CoverageRun(inputs, outputs, second, input_writes, oob)


def _expected(ctx: CheckContext, spec: KernelSpec, shp: Shape, run: _CoverageRun, pattern: _values.Pattern,
              tolerance: str, rtol: Any, atol: Any) -> tuple[dict[str, Any], dict[str, Any] | None] | CheckResult:
    """The reference's outputs and, where the tolerance is calibrated, the same-precision implementation's;
    or the skip of a pattern that drives the reference past an output's range."""
    __tracebackhide__ = True
    ref = _reference(ctx, spec, shp, run.inputs, require_finite=not pattern.nonfinite)
    skipped = _out_of_range(ctx, "coverage", spec, shp, pattern, ref)
    if skipped is not None:
        return skipped
    lowp = None
    if spec.same_precision is not None and tolerance in ("auto", "calibrated") and rtol is None and atol is None:
        lowp = _reference(ctx, spec, shp, run.inputs, spec.same_precision, "same_precision implementation",
                          require_finite=not pattern.nonfinite)
    return ref, lowp


@dataclasses.dataclass(frozen=True)
class _Tolerances:
    """The tolerances an output is compared with come from: the spec's (at this shape) and the call's."""

    spec_rtol: Any
    spec_atol: Any
    rtol: Any = None
    atol: Any = None


def _output_verdict(ctx: CheckContext, spec: KernelSpec, shp: Shape, t: Tensor, run: _CoverageRun, want: Any,
                    lowp: dict[str, Any] | None, pattern: _values.Pattern, tolerances: _Tolerances
                    ) -> tuple[list[str], dict[str, Any], _failures.OutputCheck]:
    """One output against the reference: writes outside it, elements never written, elements beyond the
    tolerance, NaN and inf where the pattern expects them. Returns the failure lines (none for a pass), the
    output's details and what the summary reads of it."""
    import numpy as np

    lines: list[str] = []
    g = run.outputs[t.name]
    got = _arr.to_numpy(g.array)
    changed = g.changed()
    interior = g.interior_mask()
    info: dict[str, Any] = {"allocated": g.note} if g.note else {}
    if not _poisoned(t):
        info["unwritten_not_checked"] = ("inout: updated in place" if t.is_inout else
                                         "init='zeros': zeroed by the caller")
    elif g.unpoisoned:
        info["unwritten_not_checked"] = g.unpoisoned
    guard = _arr.guard_report(g, changed, interior)
    if guard:
        lines.append(f"{_kind(t)} {t.name!r}: {guard} (an unmasked store past an edge, or strides ignored?)")
        info["outside_writes"] = int((changed & ~interior).sum())
    # unwritten: the bits still equal the poison (of both runs, for an integer output)
    unwritten = np.zeros(want.shape, dtype=bool)
    if _poisoned(t):
        unwritten = _arr.bits(g.array, t.dtype) == _arr.poison_bits(t.dtype)
        if run.second is not None and not _arr.is_float(t.dtype):
            unwritten &= _arr.bits(run.second[t.name].array, t.dtype) == _arr.poison_bits(t.dtype, 1)
    n_unwritten = int(unwritten.sum())
    if n_unwritten:
        first = tuple(int(i) for i in np.argwhere(unwritten)[0])
        lines.append(f"output {t.name!r}: {_pct(n_unwritten, want.size)} elements never written (still "
                     f"poison); first at {_arr.describe_index(first, t.dims, spec.dim_tiles, want.shape)}")
        info["unwritten"] = n_unwritten
    tol = _output_tolerance(ctx, "coverage", spec, shp, t, want, lowp, pattern, spec_rtol=tolerances.spec_rtol,
                            spec_atol=tolerances.spec_atol, rtol=tolerances.rtol, atol=tolerances.atol)
    nonfinite_lines, exclude = _nonfinite_expectations(pattern, t, got, want, unwritten, spec)
    cmp = _tol.compare(got, np.where(exclude, 0.0, want) if pattern.nonfinite else want, tol, exclude=exclude,
                       dtype=t.dtype)
    info.update(tolerance=str(tol), max_abs_err=cmp.max_abs, max_rel_err=cmp.max_rel, bad=cmp.bad,
                nan=cmp.nan, of_tol=cmp.of_tol)
    lines.extend(nonfinite_lines)
    if cmp.bad:
        nan_note = (f", {cmp.nan} of them NaN where the reference is finite (read a NaN guard band: an "
                    "unmasked load past an edge?)") if cmp.nan else ""
        where = _arr.describe_index(cmp.worst_index or (), t.dims, spec.dim_tiles, want.shape)
        lines.append(
            f"{_kind(t)} {t.name!r}: {_pct(cmp.bad, want.size)} elements exceed the tolerance{nan_note}; "
            f"worst at {where}: got {cmp.worst_got:.6g}, expected {cmp.worst_want:.6g} "
            f"(abs err {abs(cmp.worst_got - cmp.worst_want):.3g}, allowed there {cmp.worst_allowed:.3g}); "
            f"tolerance {tol}")
    check = _failures.OutputCheck(t.name, int(want.size), n_unwritten, cmp, tol,
                                  outside=info.get("outside_writes", 0), nonfinite=len(nonfinite_lines))
    return lines, info, check


def _coverage_summary(spec: KernelSpec, pattern: _values.Pattern, checked: list[_failures.OutputCheck],
                      run: _CoverageRun, details: dict[str, Any]) -> str:
    """The key number of the check (:func:`.failures.coverage_key`), the pattern, and the outputs whose
    unwritten elements cannot be told from written ones (the check is weaker there, and says so)."""
    summary = _failures.coverage_key(checked, [name for name, n in run.input_writes.items() if n])
    if pattern.name != "normal":
        summary += f", {pattern.id}"
    unchecked = [t.name for t in spec.compared if "unwritten_not_checked" in details["outputs"][t.name]]
    if unchecked:
        summary += f"; not poisoned: {', '.join(unchecked)}"
    return summary


def _kind(t: Tensor) -> str:
    return "inout" if t.is_inout else "output"


def _nonfinite_expectations(pattern: _values.Pattern, t: Tensor, got: Any, want: Any, unwritten: Any,
                            spec: KernelSpec) -> tuple[list[str], Any]:
    """Under ``nan``/``inf``/``max``: where the reference, rounded to the output dtype, is NaN the kernel
    must write NaN, where it is +/-inf the same inf. Returns the failure lines and the mask of elements
    handled here (plus the unwritten ones), which the tolerance comparison leaves out."""
    import numpy as np

    if not pattern.nonfinite:
        return [], unwritten
    np_dtype = {"float16": np.float16, "bfloat16": np.float32, "float32": np.float32}.get(t.dtype, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = want.astype(np_dtype).astype(np.float64) if _arr.is_float(t.dtype) else want
    special = ~np.isfinite(rounded)
    g = np.asarray(got, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        ok = (np.isnan(rounded) & np.isnan(g)) | (np.isinf(rounded) & (g == rounded))
    bad = special & ~ok & ~unwritten
    lines = []
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        where = _arr.describe_index(first, t.dims, spec.dim_tiles, want.shape)
        lines.append(f"{_kind(t)} {t.name!r}: {_pct(int(bad.sum()), want.size)} elements should be NaN or inf "
                     f"(the reference under {pattern.id}, rounded to {t.dtype}) but are not; first at {where}: "
                     f"got {float(g[first]):.6g}, expected {float(rounded[first]):.6g}")
    return lines, unwritten | special
