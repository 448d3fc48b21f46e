"""Why a correctness check failed: the same check again with one thing changed at a time.

When coverage, the tile probe or determinism fails on a case, :func:`diagnose` re-runs that check on the
same inputs (the test's seed) with one change at a time and reports the changes that flip the verdict to a
pass, first in the failure's message as one ``cause:`` line:

* **the layout**: every tensor contiguous; where that passes, each tensor alone in the failing layout with
  the others contiguous, which names the tensors whose strides the kernel ignores or takes from another
  tensor (a stride mix-up); where those are padded, every tensor padded alike tells which of the two it is;
* **the values**: the ``normal`` pattern instead of the failing one (a masked load's ``other=`` that is not the
  reduction's identity, a sign or range assumption);
* **the stages**: one stage instead of the declared count, where the launcher takes ``stages`` (a
  pipelining bug against a math bug);
* **the tiles**: the loop dimension within one tile, where the case spans several (the prologue, the
  epilogue or the stage ring against the arithmetic of one tile). That one tile is the first and the last
  at once, so where it fails there too the tile probe decides: a tile it finds never reaching the output
  (or counted twice) is the cause, as the probe beside the failure says; tiles counted once but wrong, or
  none, are the arithmetic.

The re-runs record nothing in the test's results and never change its verdict; they cost time only when a
case has failed, and none runs in a sanitizer child.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from ..model import layouts as _lay
from ..model import values as _values
from ..model.shape import Shape
from ..model.spec import KernelSpec
from ..results import PipecheckError, PipecheckFailure
from .context import CheckContext

__all__ = ["diagnose"]

#: at most this many re-runs to name the tensors of a stride mix-up (one per tensor)
MAX_TENSOR_PROBES = 8


class _Sandbox(CheckContext):
    """The test's context, recording into a list of its own: a re-run must not touch the test's results."""

    diagnosing = True

    def __init__(self, ctx: CheckContext) -> None:
        super().__init__(ctx.nodeid, ctx.config, ctx.tier, ctx.run_seed, role=ctx.role, results=[],
                         rootdir=ctx.rootdir)
        self.expecting = False


def _verdict(ctx: CheckContext, fn: Callable[..., Any], spec: KernelSpec, shape: Shape,
             kwargs: dict[str, Any]) -> bool | None:
    """True when ``fn`` passes with ``kwargs``, False when it fails, None when it cannot tell (an error)."""
    try:
        fn(_Sandbox(ctx), spec, shape, **kwargs)
    except PipecheckFailure:
        return False
    except Exception:  # a bad variant (PipecheckError) or a kernel that raises there: no verdict either way
        return None
    return True


def _layout_cause(ctx: CheckContext, fn: Callable[..., Any], spec: KernelSpec, shape: Shape,
                  kwargs: dict[str, Any]) -> str | None:
    failing = _lay.as_layout(spec, kwargs.get("layout"))
    names = [n for n, _ in failing.kinds]
    contiguous = {n: "contiguous" for n in names}
    if all(k == "contiguous" for _, k in failing.kinds):
        return None
    if _verdict(ctx, fn, spec, shape, {**kwargs, "layout": contiguous}) is not True:
        return None
    culprits: list[tuple[str, str]] = []  # (tensor, its layout) that fail alone
    for name, kind in failing.kinds[:MAX_TENSOR_PROBES]:
        if kind == "contiguous":
            continue
        if _verdict(ctx, fn, spec, shape, {**kwargs, "layout": {**contiguous, name: kind}}) is False:
            culprits.append((name, kind))
    if culprits:
        named = ", ".join(f"{name!r} ({kind})" for name, kind in culprits)
        where = f"; it fails when any one of {named} alone is laid out so, the others contiguous"
    else:
        where = "; no single tensor's layout makes it fail alone (the strides of several tensors are mixed up)"
    return (f"a stride mix-up: it passes when every tensor is contiguous{where}. The kernel (or its launcher) "
            f"{_whose_strides(ctx, fn, spec, shape, kwargs, failing, culprits)}; a kernel that needs a layout "
            "declares it (Tensor(..., layout='contiguous'))")


def _whose_strides(ctx: CheckContext, fn: Callable[..., Any], spec: KernelSpec, shape: Shape, kwargs: dict[str, Any],
                   failing: _lay.Layout, culprits: list[tuple[str, str]]) -> str:
    """Whether the kernel ignores the culprits' strides or takes another tensor's. Where every culprit is
    ``padded`` (a layout that differs between tensors only by its row padding), the culprits have one shape and
    every tensor may be padded, one more run with every tensor padded alike (one padding for all, so equal
    strides for equal shapes) tells them apart: a kernel that takes one tensor's strides for another's passes
    it; one that ignores the strides fails it, as it fails any padding."""
    unknown = "ignores those tensors' strides or takes another tensor's"
    if not culprits or any(kind != "padded" for _, kind in culprits):
        return unknown
    if not all("padded" in _lay.kinds_of(spec, spec.tensor(name)) for name, _ in failing.kinds):
        return unknown  # a tensor the spec never pads: padding it would test outside the contract
    if len({tuple(spec.shape_of(spec.tensor(name), shape)) for name, _ in culprits}) != 1:
        return unknown  # padded alike, tensors of different shapes still differ in their strides
    alike = _lay.Layout(tuple((name, "padded") for name, _ in failing.kinds), "padded-alike", alike=True)
    verdict = _verdict(ctx, fn, spec, shape, {**kwargs, "layout": alike})
    if verdict is True:
        return ("takes one tensor's strides for another's: it passes when every tensor is padded alike (the same "
                "row padding for all, so equal strides where the shapes are equal)")
    if verdict is False:  # one tensor's ignored strides fail it, whatever the others do
        return ("ignores those tensors' strides" if len(culprits) == 1 else
                "ignores the strides of one or more of those tensors (some may also take another's)") + \
            ": it fails when every tensor is padded alike too"
    return unknown


def _values_cause(ctx: CheckContext, fn: Callable[..., Any], spec: KernelSpec, shape: Shape,
                  kwargs: dict[str, Any]) -> str | None:
    pattern = _values.resolve(kwargs.get("values"), spec.name)
    if pattern.name == "normal":
        return None
    if _verdict(ctx, fn, spec, shape, {**kwargs, "values": "normal"}) is not True:
        return None
    return (f"the values: it fails under values={pattern.name} and passes under normal values (a masked load "
            "whose other= is not the reduction's identity, or an assumption about the values' sign or range?)")


def _stages_cause(ctx: CheckContext, fn: Callable[..., Any], spec: KernelSpec, shape: Shape,
                  kwargs: dict[str, Any]) -> str | None:
    stages = ctx.config.stages if ctx.config.stages is not None else spec.stages
    if stages <= 1 or not spec.launch_accepts_stages():
        return None
    one = _Sandbox(ctx)
    one.config = _with_stages(ctx, 1)
    try:
        fn(one, spec, shape, **kwargs)
    except Exception:  # it fails with one stage too (or cannot run so): not the pipeline's
        return None
    return (f"the pipeline: it passes with one stage and fails with {stages} (a wait, a barrier or a stage "
            "index of the pipeline, not the arithmetic)")


def _with_stages(ctx: CheckContext, stages: int) -> Any:
    import dataclasses

    return dataclasses.replace(ctx.config, stages=stages, sources={**ctx.config.sources, "stages": "diagnosis"})


def _tiles_cause(ctx: CheckContext, fn: Callable[..., Any], spec: KernelSpec, shape: Shape,
                 kwargs: dict[str, Any], tile_probe: Callable[..., Any] | None = None) -> str | None:
    loop = spec.loop_dim
    tile = spec.tiles[loop]
    if shape[loop] <= tile:
        return None
    small = _one_tile(spec, shape)
    if small is None:
        return None
    verdict = _verdict(ctx, fn, spec, small, kwargs)
    if verdict is True:
        return (f"the loop: it passes at {small}, where {loop} fits one tile of {tile}, and fails at {shape} "
                f"({-(-shape[loop] // tile)} tiles): the prologue, the epilogue, the stage ring or the tail")
    if verdict is False:
        # the one tile is the first and the last too: a dropped last tile fails there as well, so failing there
        # clears the pipeline only where the tile probe counts every tile once, or finds tiles counted once
        # but wrong (the arithmetic); where it finds a tile that never reached the output, or counted twice,
        # the cause is that tile, as the probe says
        bad = _probe_problem(ctx, tile_probe, spec, shape, kwargs) if tile_probe is not None else None
        if bad is not None:
            return (f"one tile: it fails at {small} too, where {loop} fits one tile of {tile} (the first and the "
                    f"last tile at once), and the tile probe finds {bad}: the handling of that tile (the prologue "
                    "or the epilogue), not the arithmetic of every tile")
        return (f"one tile: it fails at {small} too, where {loop} fits one tile of {tile}: the arithmetic or the "
                "masks of a tile, not the pipeline over tiles")
    return None


def _probe_problem(ctx: CheckContext, tile_probe: Callable[..., Any], spec: KernelSpec, shape: Shape,
                   kwargs: dict[str, Any]) -> str | None:
    """The tile probe's first bad tile at ``shape`` when it names a tile the pipeline mishandled (never reached
    the output, or counted twice); None where the probe passes, cannot run, or finds only tiles that contribute
    about what they should but wrong, or some other multiple (an offset or a scale: the arithmetic)."""
    keep = {k: v for k, v in kwargs.items() if k in ("values", "layout", "tolerance", "rtol", "atol")}
    try:
        tile_probe(_Sandbox(ctx), spec, shape, **keep)
    except PipecheckFailure as exc:
        details = exc.result.details if exc.result is not None else {}
        if details.get("not_additive"):
            return None
        bad = [str(v) for v in (details.get("bad") or {}).values()]
        named = [b for b in bad if "never reached the output" in b or "counted twice" in b]
        return named[0] if named else None
    except Exception:  # the probe cannot run here (a spec it refuses): it says nothing
        return None
    return None


def _one_tile(spec: KernelSpec, shape: Shape) -> Shape | None:
    """``shape`` with its loop dimension cut to one tile (as ragged as it was), if the spec accepts it."""
    loop = spec.loop_dim
    tile = spec.tiles[loop]
    rest = shape[loop] % tile
    size = rest if rest else tile
    try:
        return spec.check_shape(shape.replace(**{loop: size}))
    except PipecheckError:
        try:
            return spec.check_shape(shape.replace(**{loop: tile}))
        except PipecheckError:
            return None


def diagnose(ctx: CheckContext, fn: Callable[..., Any], spec: KernelSpec, shape: Any,
             kwargs: dict[str, Any], tile_probe: Callable[..., Any] | None = None) -> list[str]:
    """What flips a failing check to a pass when changed alone (see the module's docstring): one sentence
    per cause, most telling first; empty when nothing flips it or the context cannot re-run it. ``tile_probe``:
    the tile probe, which decides what a failure at one tile means (passed in: this module imports no check)."""
    if getattr(ctx, "diagnosing", False) or ctx.role.sanitizer:
        return []
    try:
        shp = spec.check_shape(shape)
    except PipecheckError:
        return []
    causes = []
    for probe in (_layout_cause, _values_cause, _stages_cause,
                  functools.partial(_tiles_cause, tile_probe=tile_probe)):
        try:
            cause = probe(ctx, fn, spec, shp, dict(kwargs))
        except Exception:  # a diagnosis that breaks must not hide the failure it explains
            cause = None
        if cause:
            causes.append(cause)
    return causes
