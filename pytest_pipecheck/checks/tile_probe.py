"""The tile probe: one launch per tile of the loop dimension, and what each tile contributed.

:func:`check_tile_probe` -- one launch per tile of the loop dimension with the loop-dim slices of the
inputs zero outside that tile; each tile's output must match the reference of those inputs
(:mod:`.reference`, within :mod:`.output_tolerance`), so a dropped or doubled tile is named: ``K tile 7 of
8, the last (epilogue), never reached the output``. At most ``max_tiles`` tiles are probed (first stages+1,
middle, last two); a reference that is not a sum of per-tile contributions makes the probe name no part of
the pipeline. It records one CheckResult (``tile_probe``).

:func:`_explained` -- how the three correctness checks (:mod:`.coverage`, this probe, :mod:`.determinism`)
fail: with the changes that flip them to a pass (:mod:`.diagnose`) first in the message. It is here, beside
the probe, because the diagnosis asks the tile probe what a failure at one tile means: the other checks
import it from this module, and this module imports none of them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any

from ..model import layouts as _lay
from ..model import tolerance as _tol
from ..model.spec import KernelSpec
from ..model.tensor import Tensor
from ..results import CheckResult, PipecheckFailure, Verdict
from . import arrays as _arr
from .context import CheckContext
from .failures import fail as _fail
from .failures import where as _where
from .launch import _alloc_inputs, _input_values, _launch, _pattern, _stages_override
from .output_tolerance import (
    _check_tolerance_args,
    _check_tolerance_mode,
    _output_tolerance,
    _spec_tolerances,
)
from .reference import _out_of_range, _reference

__all__ = ["check_tile_probe"]

MAX_PROBE_TILES = 16


def _explained(check: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
    """``check``, whose failures say why: the changes that flip it to a pass (:mod:`.diagnose`) go first in
    the message, as a ``cause:`` line, and into the recorded result's details. The verdict stays."""

    @functools.wraps(check)
    def explained(ctx: CheckContext, spec: KernelSpec, shape: Any, **kwargs: Any) -> CheckResult:
        __tracebackhide__ = True
        try:
            return check(ctx, spec, shape, **kwargs)
        except PipecheckFailure as exc:
            if exc.result is None or exc.result.expected or exc.result.details.get("not_additive"):
                raise  # a probe whose reference is not additive names no cause in the pipeline
            from .diagnose import diagnose

            causes = diagnose(ctx, check, spec, shape, kwargs, tile_probe=check_tile_probe)
            if not causes:
                raise
            result = dataclasses.replace(exc.result, details={**exc.result.details, "cause": causes})
            for i in range(len(ctx.results) - 1, -1, -1):
                if ctx.results[i] is exc.result:
                    ctx.results[i] = result
                    break
            head = "\n".join(f"  cause: {c}" for c in causes)
            first, _, rest = str(exc).partition("\n")
            raise PipecheckFailure(f"{first}\n{head}\n{rest}" if rest else f"{first}\n{head}", result) from exc

    return explained


def _tile_role(j: int, count: int, size: int, tile: int) -> str:
    rem = size - j * tile if j == count - 1 else tile
    partial = f", partial {rem}/{tile}" if rem < tile else ""
    if count == 1:
        return f"the only one{partial}"
    if j == 0:
        return "the first (prologue)"
    if j == count - 1:
        return f"the last (epilogue{partial})"
    return "a steady-state tile"


def _probe_tiles(count: int, stages: int, limit: int) -> list[int]:
    if count <= limit:
        return list(range(count))
    keep = set(range(min(stages + 1, count))) | {count // 2, count - 2, count - 1}
    return sorted(keep)


def _keep_windows(values: Any, axis: int, windows: list[tuple[int, int]]) -> Any:
    """``values`` with zeros along ``axis`` outside the ``[start, stop)`` windows."""
    out = values.clone() if hasattr(values, "clone") else values.copy()
    index: list[Any] = [slice(None)] * out.ndim
    edge = 0
    for start, stop in sorted(windows):
        index[axis] = slice(edge, max(edge, start))
        out[tuple(index)] = 0
        edge = max(edge, stop)
    index[axis] = slice(edge, None)
    out[tuple(index)] = 0
    return out


@_explained
def check_tile_probe(ctx: CheckContext, spec: KernelSpec, shape: Any, *, max_tiles: int = MAX_PROBE_TILES,
                     rtol: float | None = None, atol: float | None = None, tolerance: str = "auto",
                     values: Any = None, layout: Any = None) -> CheckResult:
    """Run once per loop tile with the inputs' loop-dim slices zero outside it; each must count once.

    A tile whose output matches the all-zero baseline is reported as never reaching the output; one
    that contributes about twice as "counted twice". Raises PipecheckFailure naming each bad tile
    (``K tile 7 of 8, the last (epilogue), never reached the output``) and PipecheckError for a bad
    spec or shape. At most ``max_tiles`` tiles are probed (first stages+1, middle, last two).
    ``tolerance``: as for coverage ("auto": calibrated per probe when the spec has ``same_precision``
    and no ``rtol``/``atol`` is given). ``values``: a value pattern; under ``nan``, ``inf`` and ``max``
    the probe is skipped (recorded with the reason). With several tile sizes on the loop dimension the
    probe steps by the smallest.
    """
    __tracebackhide__ = True
    import numpy as np

    shp = spec.check_shape(shape)
    pattern = _pattern(spec, values)
    _check_tolerance_args(spec, "check_tile_probe", rtol=rtol, atol=atol)
    _check_tolerance_mode(spec, tolerance)
    lay = _lay.as_layout(spec, layout)
    if pattern.nonfinite:
        return ctx.skip_check("tile_probe", f"{spec.name} at {shp} {pattern.id}: the tile probe zeros the inputs "
                             "outside one tile and compares contributions; NaN and inf do not cancel, so it does "
                             "not run under this pattern", kernel=spec.name)
    spec_rtol, spec_atol = _spec_tolerances(spec, shp)
    calibrate = (spec.same_precision is not None and tolerance in ("auto", "calibrated") and rtol is None
                 and atol is None)
    extra = _stages_override(ctx, spec)
    loop = spec.loop_dim
    tile = spec.tiles[loop]
    size = shp[loop]
    count = math.ceil(size / tile)
    stages = extra.get("stages", spec.stages)
    base_values = {t.name: _input_values(ctx, spec, t, shp, 100 + i, pattern) for i, t in enumerate(spec.inputs)}
    # each input is masked along its first axis that is a multiple c * loop (K; K/8, tile_K/8 elements per tile;
    # 2*K, two copies side by side); one that uses the loop dimension only otherwise (M*K, K+8) is left whole,
    # and the result says so
    unmasked = {t.name: why for t in spec.inputs if (why := spec.loop_unmasked(t))}
    if not any(spec.loop_windows(t, 0, tile, size) is not None for t in spec.inputs):
        # every tile would see the same inputs: each would "contribute" the whole output, and nothing it
        # compares could name a dropped or doubled tile; a pass here would say what was never checked
        left = (", ".join(f"{n!r} ({why})" for n, why in unmasked.items()) if unmasked
                else f"no input has an axis along {loop}")
        return ctx.skip_check("tile_probe", f"{spec.name} at {shp}: no input is masked along {loop} ({left}): the "
                              "tile probe cannot isolate a tile, so it does not run", kernel=spec.name)

    def span(n: int) -> tuple[int, int]:
        """The loop indices of tile ``n``."""
        return n * tile, min((n + 1) * tile, size)

    def probe_values(*spans: tuple[int, int]) -> dict[str, Any]:
        """The inputs with their loop axis zero outside ``spans`` (one tile; two for the additivity check)."""
        vals = dict(base_values)
        for t in spec.inputs:
            where = [w for lo, hi in spans if (w := spec.loop_windows(t, lo, hi, size)) is not None]
            if where:
                vals[t.name] = _keep_windows(base_values[t.name], where[0][0], [x for w in where for x in w[1]])
        return vals

    refs: dict[int, dict[str, Any]] = {}  # the reference of each probed tile

    def reference_of(*tiles: int) -> dict[str, Any]:
        return _reference(ctx, spec, shp, _alloc_inputs(ctx, spec, shp, probe_values(*map(span, tiles)), lay),
                          check="tile_probe", require_finite=False)

    def not_additive(j: int) -> str | None:
        """Whether the reference itself is a sum of per-tile contributions: with tiles j and k kept, it must be
        ref_j + ref_k - baseline (a GEMM's, a scan's, a reduction's are). Where it is not, zeroing tiles of an
        input changed what the others contribute (an input with an invariant: a cumulative sum along the loop,
        a normalizer), and no tile bug explains a mismatch: the words for the failure, else None. Tile j is
        paired with the first and the last tile: an invariant along the loop (a cumulative sum's last value, a
        normalizer over the whole row) shows where one end of the loop is kept."""
        if baseline is None:
            return None
        for k in dict.fromkeys(k for k in (0, count - 1) if k != j):
            if k not in refs:
                refs[k] = reference_of(k)
            both = reference_of(j, k)
            for t in spec.compared:
                summed = refs[j][t.name] + refs[k][t.name] - baseline[t.name]
                finite = np.abs(both[t.name][np.isfinite(both[t.name])])
                peak = float(finite.max()) if finite.size else 0.0
                # a reference computed in fp32 adds rounding, not a different sum: only a gross change counts
                tol = _tol.Tolerance(1e-3, 1e-3 * peak, "additivity of the reference")
                if _tol.compare(summed, both[t.name], tol).bad:
                    return (f"the reference is not a sum of per-tile contributions: with {loop} tiles {j} and {k} "
                            f"kept its {t.name!r} is not their two contributions added, so zeroing tiles of an input "
                            f"changed what the other tiles contribute (an input with an invariant along {loop}, "
                            "such as a cumulative sum, a normalizer or indices?) and no tile bug explains the "
                            "mismatch; the probe cannot say what the pipeline did. Declare such an input "
                            "Tensor(..., probe='whole') (left whole by the probe)")
        return None

    baseline: dict[str, Any] | None = None
    problems: list[str] = []
    details: dict[str, Any] = {"shape": str(shp), "values": pattern.name, "layout": str(lay), "tiles": count,
                               "probed": [], "bad": {}}
    if unmasked:
        details["unmasked"] = unmasked
    worst_of_tol = 0.0
    for j in _probe_tiles(count, stages, max_tiles):
        inputs = _alloc_inputs(ctx, spec, shp, probe_values(span(j)), lay)
        outputs = _launch(ctx, spec, shp, inputs, extra, f"the probe of {loop} tile {j}", "tile_probe",
                          pattern=pattern, layout=lay)
        ref = _reference(ctx, spec, shp, inputs, check="tile_probe")
        refs[j] = ref
        if not details["probed"]:
            skipped = _out_of_range(ctx, "tile_probe", spec, shp, pattern, ref)
            if skipped is not None:
                return skipped
        lowp = (_reference(ctx, spec, shp, inputs, spec.same_precision, "same_precision implementation",
                           check="tile_probe") if calibrate else None)
        details["probed"].append(j)
        verdicts = []
        for t in spec.compared:
            got = _arr.to_numpy(outputs[t.name].array).astype(np.float64)
            want = ref[t.name]
            tol = _output_tolerance(ctx, "tile_probe", spec, shp, t, want, lowp, pattern, spec_rtol=spec_rtol,
                                    spec_atol=spec_atol, rtol=rtol, atol=atol)
            cmp = _tol.compare(got, want, tol, dtype=t.dtype)
            worst_of_tol = max(worst_of_tol, cmp.of_tol)
            if not cmp.bad:
                continue
            if baseline is None:
                zero_inputs = _alloc_inputs(ctx, spec, shp, probe_values((0, 0)))
                # only explains a failure already found: a NaN in it is no reason to hide that failure
                baseline = _reference(ctx, spec, shp, zero_inputs, check="tile_probe", require_finite=False)
            verdicts.append(_classify(got, want, baseline[t.name], t, cmp, spec, tol))
        if verdicts:
            if not problems and "not_additive" not in details:
                why = not_additive(j)
                if why is not None:
                    details["not_additive"] = why
            role = _tile_role(j, count, size, tile)
            # one verdict per tile (the first output's) keeps the message short; with a reference that is not
            # additive, the tile's role in the pipeline and the contribution's ratio mean nothing
            text = (f"{loop} tile {j} of {count}: kernel and reference disagree with only this tile nonzero"
                    if "not_additive" in details else f"{loop} tile {j} of {count}, {role}, {verdicts[0]}")
            problems.append(text)
            details["bad"][str(j)] = text
    details["of_tol"] = worst_of_tol
    summary = (f"{len(details['probed'])} of {count} {loop} tiles each counted once, worst err {worst_of_tol:.2g} "
               "of tol")
    note = (f"not masked along {loop}: " + ", ".join(f"{name!r} ({why})" for name, why in unmasked.items())
            if unmasked else "")
    if note:
        summary += f"; {note}"
    if problems:
        lines = [f"{_where(spec, shp, pattern)}{_lay.describe(lay, spec)}: tile probe along {loop} "
                 f"({count} tile{'s' if count != 1 else ''} of {tile}, stages {stages}) "
                 f"found {len(problems)} bad tile(s)", *problems, *([f"({note})"] if note else []),
                 *([details["not_additive"]] if "not_additive" in details else [])]
        _fail(ctx, "tile_probe", spec, problems[0], lines, details)
    return ctx.record(CheckResult("tile_probe", Verdict.PASS, summary, kernel=spec.name, details=details))


def _classify(got: Any, want: Any, base: Any, t: Tensor, cmp: _tol.Comparison, spec: KernelSpec,
              tol: _tol.Tolerance) -> str:
    """Name what happened to a probed tile from how its output relates to the expected contribution."""
    import numpy as np

    expected = want - base
    nan = np.isnan(got)
    if nan.all():
        return f"never reached the output ({t.name!r} never written)"
    ok = ~nan & ~np.isnan(expected)
    denom = float((expected[ok] ** 2).sum())
    where = _arr.describe_index(cmp.worst_index or (), t.dims, spec.dim_tiles, want.shape)
    if denom <= 0:
        return f"mismatch in {t.name!r} at {where} (tolerance {tol.short})"
    with np.errstate(invalid="ignore", over="ignore"):
        ratio = float(((got[ok] - base[ok]) * expected[ok]).sum()) / denom
    nan_note = f"; {int(nan.sum())} elements of {t.name!r} NaN or never written" if nan.any() else ""
    if not math.isfinite(ratio):
        # an inf in the output (an overflow, or a guard band read as a huge value) makes the projection
        # meaningless: say what the output holds instead of printing the ratio
        inf = int(np.isinf(got).sum())
        held = f"{inf} infinite value(s)" if inf else "values too large to compare"
        return (f"wrote {held} into {t.name!r}, worst at {where}: got {cmp.worst_got:.6g}, "
                f"expected {cmp.worst_want:.6g}{nan_note}")
    if abs(ratio) < 0.25:
        return f"never reached the output{nan_note}"
    if abs(ratio - 2.0) < 0.25:
        return f"counted twice{nan_note}"
    if abs(ratio - 1.0) < 0.05:
        return (f"counted once but {cmp.bad} elements of {t.name!r} are wrong, worst at {where}: got "
                f"{cmp.worst_got:.6g}, expected {cmp.worst_want:.6g}{nan_note}; tolerance {tol}")
    return f"contributes {ratio:.2f}x what it should{nan_note}"
