"""The determinism check: repeated launches on the same inputs must be bitwise equal.

:func:`check_determinism` -- ``determinism_runs`` launches (``runs=``) on the same inputs must be bitwise
equal unless the kernel declares ``deterministic=False`` (or the test's config does); a difference is
reported as a suspected race. The runs alternate the two poisons (:mod:`.arrays`), so outputs nobody wrote
differ between runs and are reported as unwritten, not as a race. It takes ``values=`` and ``layout=`` as
coverage does (:mod:`.launch`), records one CheckResult (``determinism``) and raises PipecheckFailure on a
defect, with why first where a changed run names it (:func:`.tile_probe._explained`).
"""

from __future__ import annotations

from typing import Any

from ..model import layouts as _lay
from ..model.spec import KernelSpec
from ..results import CheckResult, PipecheckError, Verdict
from . import arrays as _arr
from .context import CheckContext
from .failures import fail as _fail
from .failures import pct as _pct
from .failures import where as _where
from .launch import _alloc_inputs, _input_values, _launch, _pattern, _poisoned, _stages_override
from .tile_probe import _explained

__all__ = ["check_determinism"]


@_explained
def check_determinism(ctx: CheckContext, spec: KernelSpec, shape: Any, *, runs: int | None = None,
                      values: Any = None, layout: Any = None) -> CheckResult:
    """``runs`` (default ``ctx.config.determinism_runs``) launches on the same inputs must be bitwise equal.

    Skipped (recorded, with the reason) when the kernel or the test declares it non-deterministic.
    Raises PipecheckFailure "suspected race" with where the runs differ.
    """
    __tracebackhide__ = True
    import numpy as np

    shp = spec.check_shape(shape)
    pattern = _pattern(spec, values)
    deterministic = ctx.config.deterministic if "deterministic" in ctx.config.sources else spec.deterministic
    if not deterministic:
        return ctx.skip_check("determinism", f"{spec.name} is declared non-deterministic (deterministic=False)",
                             kernel=spec.name)
    n = runs if runs is not None else ctx.config.determinism_runs
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise PipecheckError(f"spec {spec.name!r}: determinism runs={n!r} must be an integer >= 2")
    lay = _lay.as_layout(spec, layout)
    extra = _stages_override(ctx, spec)
    vals = {t.name: _input_values(ctx, spec, t, shp, 200 + i, pattern) for i, t in enumerate(spec.inputs)}
    inputs = _alloc_inputs(ctx, spec, shp, vals, lay)
    first: dict[str, Any] | None = None
    lines: list[str] = []
    for run in range(n):
        # Runs alternate between two poisons: an element no run writes keeps a different poison in each
        # and so differs between them, instead of reading as "bitwise equal" (a kernel that writes
        # nothing would pass). Such an element is reported as unwritten, not as a race.
        poison = run % _arr.POISON_VARIANTS
        outputs = _launch(ctx, spec, shp, inputs, extra, f"determinism run {run + 1}", "determinism", poison=poison,
                          pattern=pattern, layout=lay)
        got = {t.name: _arr.bits(outputs[t.name].array, t.dtype) for t in spec.compared}
        if first is None:
            first = got
            continue
        for t in spec.compared:
            diff = got[t.name] != first[t.name]
            if not diff.any():
                continue
            unwritten = diff & (first[t.name] == _arr.poison_bits(t.dtype, 0)) & (
                got[t.name] == _arr.poison_bits(t.dtype, poison))
            if not _poisoned(t):
                unwritten &= False
            race = diff & ~unwritten
            if unwritten.any():
                idx = tuple(int(i) for i in np.argwhere(unwritten)[0])
                where = _arr.describe_index(idx, t.dims, spec.dim_tiles, diff.shape)
                lines.append(f"output {t.name!r}: {_pct(int(unwritten.sum()), diff.size)} elements never written "
                             f"(still poison in runs 1 and {run + 1}); first at {where}")
            if race.any():
                idx = tuple(int(i) for i in np.argwhere(race)[0])
                where = _arr.describe_index(idx, t.dims, spec.dim_tiles, diff.shape)
                lines.append(f"suspected race: run {run + 1} differs from run 1 in {_pct(int(race.sum()), diff.size)} "
                             f"elements of {t.name!r}; first at {where}")
        if lines:
            break
    if lines:
        _fail(ctx, "determinism", spec, lines[0].split(";")[0],
              [f"{_where(spec, shp, pattern)}{_lay.describe(lay, spec)}: determinism failed over {n} runs on the "
               "same inputs", *lines,
               "(a kernel that is legitimately non-deterministic declares deterministic=False)"],
              {"shape": str(shp), "runs": n, "values": pattern.name, "layout": str(lay)})
    return ctx.record(CheckResult("determinism", Verdict.PASS, f"{n} runs bitwise equal", kernel=spec.name,
                                 details={"shape": str(shp), "runs": n, "values": pattern.name, "layout": str(lay)}))
