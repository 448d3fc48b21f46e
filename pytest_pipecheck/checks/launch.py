"""The kernel's inputs, its guarded tensors and one launch of it: what the correctness checks share.

* :func:`_input_values` -- one input's values from the test's seed (``ctx.torch_generator()`` /
  ``ctx.numpy_rng()``): small or normal values, never all zero, or what a callable ``init`` makes; a value
  pattern (:mod:`pytest_pipecheck.model.values`: ``negative``, ``offset``, ...) transforms the normal ones.
* :func:`_alloc_inputs`, :func:`_alloc_outputs`, :func:`_fresh_inouts` -- each tensor in its guarded,
  row-padded allocation (:mod:`.arrays`), where the layout puts it (:mod:`pytest_pipecheck.model.layouts`):
  inputs inside NaN guard bands, outputs poisoned (or zeroed, ``init="zeros"``), and a fresh copy of each
  ``inout`` holding its input values for each launch.
* :func:`_launch` -- the outputs allocated, the kernel launched once through its launcher or, for a
  wrapper-form spec (``call=``), its call (:mod:`.wrapper`), and synchronized; a crash becomes a
  PipecheckFailure. A configured ``stages`` reaches a launcher that takes the keyword (an error otherwise).
* :func:`launch_for_sanitizer` -- what coverage, the tile probe and determinism do in a sanitizer child of
  scope ``launch``: the kernel launched once at the shape the way the coverage check launches it, judging
  nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model import layouts as _lay
from ..model import values as _values
from ..model.shape import Shape
from ..model.spec import KernelSpec
from ..model.tensor import Tensor
from ..results import CheckResult, PipecheckError, Verdict
from . import arrays as _arr
from .context import CheckContext
from .failures import raised as _raised

__all__ = ["launch_for_sanitizer"]


def _pattern(spec: KernelSpec, values: Any) -> _values.Pattern:
    return _values.resolve(values, spec.name)


def _stages_override(ctx: CheckContext, spec: KernelSpec) -> dict[str, Any]:
    stages = getattr(ctx.config, "stages", None)
    if stages is None or stages == spec.stages:
        return {}
    if not spec.launch_accepts_stages():
        what = "launch()" if spec.call is None else "call"
        raise PipecheckError(f"spec {spec.name!r}: stages={stages} is configured but its {what} takes no "
                             "`stages` keyword, so the override cannot reach the kernel")
    return {"stages": stages}


def _tiles_of(spec: KernelSpec, t: Tensor) -> list[int]:
    # guards cover the largest extent one program reaches (every tile size, blocks per program), along a
    # dimension expression too (K/8: a program's K tile over 8)
    return spec.axis_guard_tiles(t)


def _call_init(t: Tensor, dims: tuple[int, ...], gen: Any, shape: Shape) -> Any:
    assert callable(t.init)
    if t.init_takes_dims():
        return t.init(dims, gen, shape.dims)
    return t.init(dims, gen)


def _input_values(ctx: CheckContext, spec: KernelSpec, t: Tensor, shape: Shape, offset: int,
                  pattern: _values.Pattern | None = None) -> Any:
    """Values for one input from the test's seed; small or normal values, never all zero.

    ``pattern`` (a value pattern, see :mod:`pytest_pipecheck.model.values`) transforms the normal values of
    floating-point inputs with ``init="randn"``; ``normal`` (or None) leaves them as they are.
    """
    values = _base_input_values(ctx, spec, t, shape, offset)
    if pattern is not None and pattern.name != "normal" and _values.applies(t):
        loop = shape[spec.loop_dim]
        values = _values.apply(pattern, values, t.dtype, loop)
    return values


def _base_input_values(ctx: CheckContext, spec: KernelSpec, t: Tensor, shape: Shape, offset: int) -> Any:
    dims = spec.shape_of(t, shape)
    values: Any
    if spec.backend == "cupy":
        import numpy as np

        rng = ctx.numpy_rng(offset)
        if callable(t.init):
            values = np.asarray(_arr.to_numpy(_call_init(t, dims, rng, shape)))
        elif t.init == "randint" or not t.dtype.startswith(("float", "bfloat")):
            values = rng.integers(-3, 4, size=dims)
        elif t.init == "uniform":
            values = rng.random(dims)
        else:
            values = rng.standard_normal(dims)
        if values.size and not values.any():
            values.flat[0] = 1
        return values
    import torch

    gen = ctx.torch_generator(offset=offset)
    if callable(t.init):
        out = _call_init(t, dims, gen, shape)
        values = out if isinstance(out, torch.Tensor) else torch.as_tensor(out)
    elif t.init == "randint" or not t.dtype.startswith(("float", "bfloat")):
        values = torch.randint(-3, 4, dims, generator=gen)
    elif t.init == "uniform":
        values = torch.rand(dims, generator=gen)
    else:
        values = torch.randn(dims, generator=gen)
    if values.numel() and not bool(values.any()):
        values.view(-1)[0] = 1
    return values


def _device(ctx: CheckContext, spec: KernelSpec) -> str:
    return ctx.device if spec.backend == "torch" else "cuda"


def _alloc_inputs(ctx: CheckContext, spec: KernelSpec, shape: Shape, values: Mapping[str, Any],
                  layout: _lay.Layout | None = None) -> dict[str, _arr.GuardedArray]:
    lay = layout or _lay.base(spec)
    return {t.name: _arr.alloc_guarded(t.name, spec.shape_of(t, shape), t.dtype, role="input",
                                       backend=spec.backend, device=_device(ctx, spec), values=values[t.name],
                                       tiles=_tiles_of(spec, t), layout=lay.of(t.name),
                                       slot=lay.slot_of(spec, t.name))
            for t in spec.inputs}


def _alloc_outputs(ctx: CheckContext, spec: KernelSpec, shape: Shape, poison: int = 0,
                   layout: _lay.Layout | None = None) -> dict[str, _arr.GuardedArray]:
    lay = layout or _lay.base(spec)
    out = {}
    for t in spec.outputs:
        g = _arr.alloc_guarded(t.name, spec.shape_of(t, shape), t.dtype, role="output", backend=spec.backend,
                               device=_device(ctx, spec), tiles=_tiles_of(spec, t), poison_variant=poison,
                               layout=lay.of(t.name), slot=lay.slot_of(spec, t.name))
        if t.zeroed:
            # what the caller does before a kernel that accumulates into its output (split-K atomics)
            g.array[...] = 0
            g.snapshot()
        out[t.name] = g
    return out


def _fresh_inouts(ctx: CheckContext, spec: KernelSpec, shape: Shape, inputs: Mapping[str, _arr.GuardedArray],
                  layout: _lay.Layout | None = None) -> dict[str, _arr.GuardedArray]:
    """New allocations of the inout tensors holding the pre-call values of ``inputs``, in the same layout:
    each launch updates its own, and ``inputs`` keeps the pre-call values the reference gets."""
    lay = layout or _lay.base(spec)
    return {t.name: _arr.alloc_guarded(t.name, spec.shape_of(t, shape), t.dtype, role="input",
                                       backend=spec.backend, device=_device(ctx, spec),
                                       values=_arr.clone(inputs[t.name].array),
                                       tiles=_tiles_of(spec, t), layout=lay.of(t.name),
                                       slot=lay.slot_of(spec, t.name))
            for t in spec.inputs if t.is_inout}


def _poisoned(t: Tensor) -> bool:
    """Whether an unwritten element of ``t`` can be told by its poison (not for inouts and zeroed outputs)."""
    return t.is_output and not t.zeroed


def _launch(ctx: CheckContext, spec: KernelSpec, shape: Shape, inputs: Mapping[str, _arr.GuardedArray],
            extra: Mapping[str, Any], what: str, check: str, poison: int = 0,
            pattern: _values.Pattern | None = None,
            layout: _lay.Layout | None = None) -> dict[str, _arr.GuardedArray]:
    """Allocate outputs poisoned with variant ``poison`` (and fresh copies of the inouts), launch once,
    synchronize; a crash becomes a PipecheckFailure. Returns the outputs and the updated inouts. The
    wrapper form calls the wrapper instead (:mod:`.wrapper`), on the same fresh inouts."""
    __tracebackhide__ = True
    inouts = _fresh_inouts(ctx, spec, shape, inputs, layout)
    if spec.call is not None:
        from . import wrapper

        returned = wrapper.launch(ctx, spec, shape, {**inputs, **inouts}, extra, what, check, poison, pattern)
        return {**returned, **inouts}
    outputs = {**_alloc_outputs(ctx, spec, shape, poison, layout), **inouts}
    arrays = {name: g.array for name, g in {**inputs, **outputs}.items()}
    try:
        spec.launch(arrays, shape.dims, **extra)  # type: ignore[misc]  # validate(): launch or call is set
        _arr.synchronize(spec.backend, _device(ctx, spec))
    except Exception as exc:
        _raised(ctx, spec, shape, exc, what, check, pattern=pattern)
    return outputs


def _launch_for_sanitizer(ctx: CheckContext, spec: KernelSpec, shape: Shape, check: str,
                          pattern: _values.Pattern | None = None,
                          layout: _lay.Layout | None = None) -> CheckResult:
    """In a sanitizer child of scope ``launch``: launch the kernel once at ``shape`` (the first of the
    three checks to ask does it) the way the normal run's coverage check does: its inputs under the
    test's value pattern, in the test's layout, through the launcher or (wrapper form) the call, and
    judge nothing.

    compute-sanitizer judges the launch; the reference, the comparison, the tile probe's launches and
    the determinism repeats add nothing it could see (the same kernel, grid and access pattern) and
    cost most of a child's time, since every launch under racecheck is instrumented. The normal run
    judges the check.
    """
    lay = layout or _lay.base(spec)
    key = (id(spec), f"{shape} {pattern.id if pattern is not None else ''} {lay}")
    if key not in ctx.launched:
        ctx.launched.add(key)
        case = " ".join(p for p in (f"{spec.name} at {shape}", pattern.id if pattern is not None
                                    and pattern.id not in ("normal", "values=normal") else "", f"layout={lay}" if lay != _lay.base(spec)
                                    else "") if p)
        with _arr.exact_case(case, {t.name: t.dims for t in spec.tensors}):
            values = {t.name: _input_values(ctx, spec, t, shape, i, pattern) for i, t in enumerate(spec.inputs)}
            inputs = _alloc_inputs(ctx, spec, shape, values, lay)
            _launch(ctx, spec, shape, inputs, _stages_override(ctx, spec), "the launch for the sanitizer", check,
                    pattern=pattern, layout=lay)
    why = ("not judged in a sanitizer child (sanitizer_scope=launch): the kernel launched once at this shape for "
           f"the tool; the normal run judges {check}")
    return ctx.record(CheckResult(check, Verdict.SKIP, why, kernel=spec.name,
                                 details={"shape": str(shape), "layout": str(lay), "reason": why}))


def launch_for_sanitizer(ctx: CheckContext, check: str, spec: KernelSpec, shape: Any, *, values: Any = None,
                         layout: Any = None, **_ignored: Any) -> CheckResult:
    """Launch the kernel once at ``shape`` for the sanitizer of this child process, judging nothing.

    What coverage, the tile probe and determinism do in a sanitizer child of scope ``launch``, and what a
    deselected one of them does in any sanitizer child (``--pipecheck-checks=sanitizer``): the normal run
    does not run the check, but the tool must still see the kernel launch, or a test whose only launches go
    through the checks would read "0 hazards" having launched nothing.
    """
    shp = spec.check_shape(shape)
    return _launch_for_sanitizer(ctx, spec, shp, check, _pattern(spec, values), _lay.as_layout(spec, layout))
