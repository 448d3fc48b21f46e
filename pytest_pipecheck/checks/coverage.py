"""Coverage checks driven by a KernelSpec: poison and guards, comparison, tile probe, determinism.

* :func:`check_coverage` -- outputs start poisoned inside guarded, row-padded allocations (inputs sit
  in NaN guard bands); after one launch every output element must be written, no guard or padding
  element may change, inputs must be untouched, and every element must match the higher-precision
  reference within tolerance (NaN never passes). A failure gives counts, fractions, the worst
  element by index and by tile, and the tolerance used.
* :func:`check_tile_probe` -- one launch per tile of the loop dimension with the loop-dim slices of
  the inputs zero outside that tile; each tile's output must match the reference of those inputs, so
  a dropped or doubled tile is named: ``K tile 7 of 8, the last (epilogue), never reached the output``.
* :func:`check_determinism` -- ``determinism_runs`` launches on the same inputs must be bitwise equal
  unless the kernel declares ``deterministic=False``; a difference is reported as a suspected race.
* :func:`check_all` -- the checks above that ``ctx.config.checks`` selects.

The reference (and ``same_precision``) run on their own copies of the inputs. A reference that
writes its inputs, or returns NaN or inf where the output is compared, makes the check inconclusive:
an ERROR naming the spec and the output, never agreement. Integer outputs run twice under two
different poisons (any integer poison is a value a kernel may write); determinism runs alternate
the two poisons, so outputs nobody wrote differ between runs and are reported as unwritten.

Every check takes ``values=``, a value pattern (:mod:`pytest_pipecheck.model.values`: ``negative``,
``offset``, ...) that transforms the normal inputs. An ``inout`` tensor starts with its input values
in a fresh copy for each launch and is compared after it (the reference gets the values before); an
output with ``init="zeros"`` starts zeroed. Neither can be poisoned, so for them coverage compares
values only: an element never written is found only where the expected value differs from the
starting one. The spec's ``rtol``/``atol`` may be callables of the shape. Every check also takes
``layout=`` (:mod:`pytest_pipecheck.model.layouts`: where each tensor sits in its guarded allocation), and
a wrapper-form spec (``call=``) is launched through its call (:mod:`.wrapper`) under both.

Each check records one CheckResult (``coverage``, ``tile_probe``, ``determinism``) on the fixture
and raises PipecheckFailure on a defect; a bad spec or input raises PipecheckError naming the spec
(recorded as an ERROR where the check could not reach a verdict).
Inputs come from the test's seed (``ctx.torch_generator()`` / ``ctx.numpy_rng()``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

from ..model import layouts as _lay
from ..model import tolerance as _tol
from ..model import values as _values
from ..model.spec import KernelSpec, Shape, Tensor
from ..results import CheckResult, PipecheckError, PipecheckFailure, Verdict
from . import arrays as _arr
from . import bounds as _bounds
from . import failures as _failures
from .context import CheckContext, run_check
from .failures import fail as _fail
from .failures import inconclusive as _inconclusive
from .failures import pct as _pct
from .failures import raised as _raised
from .failures import where as _where

__all__ = ["check_all", "check_coverage", "check_determinism", "check_tile_probe"]

MAX_PROBE_TILES = 16


# ----------------------------------------------------------------------------- plumbing


def _pattern(spec: KernelSpec, values: Any) -> _values.Pattern:
    return _values.resolve(values, spec.name)


def _spec_tolerances(spec: KernelSpec, shape: Shape) -> tuple[Any, Any]:
    """The spec's rtol/atol at ``shape`` (callables of the shape called and checked)."""
    return spec.tolerances(shape)


def _stages_override(ctx: CheckContext, spec: KernelSpec) -> dict[str, Any]:
    stages = getattr(ctx.config, "stages", None)
    if stages is None or stages == spec.stages:
        return {}
    if not spec.launch_accepts_stages():
        what = "launch()" if spec.call is None else "call"
        raise PipecheckError(f"spec {spec.name!r}: stages={stages} is configured but its {what} takes no "
                             "`stages` keyword, so the override cannot reach the kernel")
    return {"stages": stages}


def _check_tolerance_args(spec: KernelSpec, call: str, **values: Any) -> None:
    """``rtol=``/``atol=`` given to a check must be finite numbers >= 0 (NaN would pass anything)."""
    for name, value in values.items():
        why = None if value is None else _tol.problem(value)
        if why:
            raise PipecheckError(f"spec {spec.name!r}: {call}({name}={value!r}) {why}")


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


def _reference(ctx: CheckContext, spec: KernelSpec, shape: Shape, inputs: Mapping[str, _arr.GuardedArray],
               fn: Any = None, label: str = "reference", *, check: str = "coverage",
               require_finite: bool = True) -> dict[str, Any]:
    """Call the reference and validate names, shapes and dtypes; returns host float64 arrays.

    The reference gets its own copies of the inputs: what it does to them cannot reach the kernel's
    inputs, and a reference that writes them is an ERROR naming the reference (before, the change was
    found in the kernel's inputs and blamed on the kernel). With ``require_finite``, a NaN or inf in
    a returned output is an ERROR: the comparison there would agree with anything.
    """
    __tracebackhide__ = True
    import numpy as np

    fn = fn or spec.reference
    copies = {name: _arr.clone(g.array) for name, g in inputs.items()}
    before = {name: _arr.bits(copies[name], g.dtype) for name, g in inputs.items()}
    try:
        got = fn(copies, shape.dims)
    except Exception as exc:
        raise PipecheckError(f"spec {spec.name!r}: the {label} raised at {shape}: "
                             f"{type(exc).__name__}: {exc}") from exc
    _arr.synchronize(spec.backend, _device(ctx, spec))
    for name, g in inputs.items():
        if spec.tensor(name).is_inout:
            continue  # updated in place by design: a reference may update its copy instead of returning it
        changed = _arr.bits(copies[name], g.dtype) != before[name]
        if changed.any():
            n = int(changed.sum())
            first = tuple(int(i) for i in np.argwhere(changed)[0])
            where = _arr.describe_index(first, spec.tensor(name).dims, spec.dim_tiles, changed.shape)
            _inconclusive(
                ctx, check, spec, f"inconclusive: the {label} wrote its input {name!r}",
                f"spec {spec.name!r}: the {label} wrote its input {name!r} at {shape}: {_pct(n, changed.size)} "
                f"elements changed, first at {where}. A {label} must not modify its inputs (an in-place op "
                "such as mul_(), +=, or out= on an input?); its outputs may come from the modified values, "
                "so nothing can be compared. (It ran on copies: the kernel's inputs were not touched.)",
                {"shape": str(shape), "input": name, "changed": n, "culprit": label})
    if not isinstance(got, Mapping):
        raise PipecheckError(f"spec {spec.name!r}: the {label} must return a dict of outputs "
                             f"({', '.join(t.name for t in spec.compared)}), got {type(got).__name__}")
    out: dict[str, Any] = {}
    for t in spec.compared:
        if t.is_inout and t.name not in got:
            # the reference updated its copy of the inout in place: that copy is the expected value
            host = np.asarray(_arr.to_numpy(copies[t.name]), dtype=np.float64)
            if require_finite:
                _require_finite(ctx, check, spec, shape, t, host, label)
            out[t.name] = host
            continue
        if t.name not in got:
            raise PipecheckError(f"spec {spec.name!r}: the {label} returned no {t.name!r} "
                                 f"(returned: {', '.join(map(str, got)) or 'nothing'})")
        value = got[t.name]
        want = spec.shape_of(t, shape)
        have = tuple(int(n) for n in getattr(value, "shape", ()))
        if have != want:
            raise PipecheckError(f"spec {spec.name!r}: the {label}'s {t.name!r} has shape {have}, expected "
                                 f"{want} = ({', '.join(t.dims)}) at {shape}")
        try:
            from ..model.spec import normalize_dtype

            dt = normalize_dtype(getattr(value, "dtype", ""))
        except ValueError:
            dt = str(getattr(value, "dtype", "?"))
        if label == "reference":
            _check_reference_dtype(spec, t, dt)
        host = np.asarray(_arr.to_numpy(value), dtype=np.float64)
        if require_finite:
            _require_finite(ctx, check, spec, shape, t, host, label)
        out[t.name] = host
    return out


def _require_finite(ctx: CheckContext, check: str, spec: KernelSpec, shape: Shape, t: Tensor, host: Any,
                    label: str) -> None:
    """A NaN or inf in a reference output is an ERROR naming the spec and the output.

    NaN compares false with everything and |inf - x| <= atol + rtol * inf holds for any x, so each
    such element would read as agreement whatever the kernel wrote (an all-NaN reference let a
    kernel that writes nothing pass coverage). A calibrated tolerance from such a same-precision
    result would be inf or NaN and accept anything.
    """
    __tracebackhide__ = True
    import numpy as np

    bad = ~np.isfinite(host)
    if not bad.any():
        return
    n = int(bad.sum())
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    where = _arr.describe_index(first, t.dims, spec.dim_tiles, host.shape)
    kinds = "NaN" if np.isnan(host[bad]).all() else ("inf" if np.isinf(host[bad]).all() else "NaN or inf")
    if label == "reference":
        why = ("those elements cannot be checked (any output would agree with them); a reference must be "
               "finite wherever the output is compared")
    else:
        why = (f"the calibrated tolerance would be {kinds} and accept any output (did it overflow "
               f"{t.dtype}?); fix it, or use tolerance='fixed' or explicit rtol=/atol=")
    _inconclusive(
        ctx, check, spec, f"inconclusive: the {label}'s {t.name!r} is {kinds} at {n} of {host.size} elements",
        f"spec {spec.name!r}: the {label}'s {t.name!r} is {kinds} at {_pct(n, host.size)} elements at {shape}, "
        f"first at {where}: {why}",
        {"shape": str(shape), "output": t.name, "non_finite": n, "culprit": label})


def _check_reference_dtype(spec: KernelSpec, t: Tensor, dt: str) -> None:
    floats = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}
    if t.dtype in floats:
        need = 32 if floats[t.dtype] <= 16 else floats[t.dtype]
        if dt not in floats or floats[dt] < need:
            raise PipecheckError(f"spec {spec.name!r}: the reference's {t.name!r} has dtype {dt}; it must be "
                                 f"computed in higher precision than the {t.dtype} output "
                                 f"(float32 or float64)")
    elif dt in floats:
        raise PipecheckError(f"spec {spec.name!r}: the reference's {t.name!r} has dtype {dt}, but the "
                             f"output is {t.dtype}: an integer reference is required")


# ----------------------------------------------------------------------------- coverage


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


_RANGE = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}


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


def _out_of_range(ctx: CheckContext, check: str, spec: KernelSpec, shp: Shape, pattern: _values.Pattern,
                  ref: Mapping[str, Any]) -> CheckResult | None:
    """A skip when a (finite) pattern drives the reference past an output dtype's range; else None.

    A correct kernel writes inf there and nothing can be compared: not the kernel's fault, never a pass.
    """
    import numpy as np

    if pattern.name == "normal" or pattern.nonfinite:
        return None
    for t in spec.compared:
        top = _RANGE.get(t.dtype)
        want = ref[t.name]
        if top is None or not want.size:
            continue
        peak = float(np.max(np.abs(want)))
        if peak > top:
            return ctx.skip_check(check, f"{spec.name} at {shp} {pattern.id}: the reference's {t.name!r} reaches "
                                 f"{peak:.3g}, beyond the {t.dtype} range ({top:.5g}); this pattern does not "
                                 "apply at this shape", kernel=spec.name)
        step = _tol.smallest_step(t.dtype)
        if step is not None and 0 < peak < step / 2:
            # every element rounds to zero in the output: nothing the kernel computed can show
            return ctx.skip_check(check, f"{spec.name} at {shp} {pattern.id}: the reference's {t.name!r} is at most "
                                 f"{peak:.3g}, below half the smallest {t.dtype} value ({step:.3g}): the output "
                                 f"rounds every element to zero, so this pattern cannot be carried by {t.dtype} "
                                 "and does not apply at this shape", kernel=spec.name)
    return None


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



# ----------------------------------------------------------------------------- tile probe


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


# ----------------------------------------------------------------------------- determinism


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


# ----------------------------------------------------------------------------- all


def check_all(ctx: CheckContext, spec: KernelSpec, shape: Any, **kwargs: Any) -> list[CheckResult]:
    """Run coverage, tile_probe and determinism (each through :func:`.context.run_check`: a deselected one
    is recorded as skipped and not returned); raise once with every failure.

    Keyword arguments go to the checks that accept them (``tolerance``, ``rtol``, ``atol`` to coverage
    and the tile probe; ``max_tiles`` to the tile probe; ``runs`` to determinism; ``values``, the value
    pattern, and ``layout`` to all three).
    """
    __tracebackhide__ = True
    spec.check_shape(shape)
    plan = (("coverage", check_coverage, ("tolerance", "rtol", "atol", "values", "layout")),
            ("tile_probe", check_tile_probe, ("max_tiles", "rtol", "atol", "tolerance", "values", "layout")),
            ("determinism", check_determinism, ("runs", "values", "layout")))
    known = {k for _, _, keys in plan for k in keys}
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        raise PipecheckError(f"spec {spec.name!r}: check_kernel got unknown keyword {unknown[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
    from ..contract import deselection

    results: list[CheckResult] = []
    failures: list[PipecheckFailure] = []
    for name, fn, keys in plan:
        try:
            got = run_check(ctx, name, fn, spec, shape, in_child=launch_for_sanitizer,
                            **{k: v for k, v in kwargs.items() if k in keys})
            if deselection(name, ctx.config) is None:  # a deselected check is recorded, not returned
                results.append(got)
        except PipecheckFailure as exc:
            failures.append(exc)
            if exc.result is not None:
                results.append(exc.result)
    if failures:
        if len(failures) == 1:
            raise failures[0]
        # from the first: what caused it (an entry point's own exception) stays the chain's root
        raise PipecheckFailure("\n".join(str(f) for f in failures), failures[0].result) from failures[0]
    return results
