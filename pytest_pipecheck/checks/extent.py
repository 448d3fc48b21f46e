"""How far one program of a kernel reaches, measured, and the shapes that end inside its last chunk.

Shapes are generated from the tiles a spec declares (:mod:`pytest_pipecheck.model.shapes`). A program
that covers more than one tile (a static loop over 8 chunks of BLOCK, a program per 4 rows) ends at a
multiple of its own extent, which no generated shape may reach: a kernel that skips its last chunk then
passes every shape. :func:`check_extent` launches the kernel's Triton kernels with a grid of one program
at a shape many tiles long (poisoned outputs), reads how far program 0 wrote along each output dimension,
and checks coverage at shapes with several chunks per program and a partial last program: the program's
extent, one past it, and one chunk short of twice it. Where the measured extent disagrees with the
declared tiles it says so, naming the keyword that declares it (``blocks_per_program`` or ``tiles``).

A loop dimension that one program walks whole is what a loop does (the generated trip counts cover it);
so is a dimension a persistent program covers whole at the probe shape. Kernels launched other than
through Triton cannot be given one program: the check is skipped for them, with that reason.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..model.shape import Shape
from ..model.spec import KernelSpec
from ..results import CheckResult, PipecheckError, PipecheckFailure, Verdict
from . import arrays as _arr
from .context import CheckContext

__all__ = ["CHECK", "check_extent", "one_program"]

CHECK = "extent"
#: the probe shape is this many declared tiles long along each dimension
PROBE_TILES = 16


@contextlib.contextmanager
def one_program(launched: list[str]) -> Iterator[None]:
    """Every Triton kernel launched inside runs a grid of one program (program 0); each launch's kernel name
    is appended to ``launched``. Restored on the way out, however it is left."""
    classes: list[Any] = []
    try:
        from triton.runtime.jit import JITFunction

        classes.append(JITFunction)
    except Exception:  # no Triton: nothing can be given one program
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction

        classes.append(InterpretedFunction)
    except Exception:
        pass
    saved = [(cls, cls.__dict__["run"]) for cls in classes if "run" in cls.__dict__]

    def patched(original: Any) -> Any:
        def run(self: Any, *args: Any, grid: Any = None, warmup: bool = False, **kwargs: Any) -> Any:
            if not warmup:
                launched.append(str(getattr(self, "__name__", None) or getattr(getattr(self, "fn", None),
                                                                               "__name__", "?")))
            return original(self, *args, grid=(1, 1, 1), warmup=warmup, **kwargs)

        return run

    try:
        for cls, original in saved:
            cls.run = patched(original)
        yield
    finally:
        for cls, original in saved:
            cls.run = original


def _probe_shape(ctx: CheckContext, spec: KernelSpec) -> Shape:
    """Many tiles along every dimension (the loop's too: a program may walk a fixed number of its tiles),
    within the shape budget."""
    from ..model.preconditions import Divisible, Range
    from ..model.shapes import shape_bytes

    guards = spec.guard_tiles
    budget = ctx.config.shape_budget_mib << 20
    for tiles in (PROBE_TILES, 8, 4, 2):
        dims = {d: tiles * guards.get(d, 1) for d in spec.dim_names}
        # a declared precondition bounds the probe too (a head dimension fixed at 64, a batch of at most 4)
        for pre in spec.preconditions:
            if isinstance(pre, Divisible) and pre.dim in dims:
                dims[pre.dim] = -(-dims[pre.dim] // pre.n) * pre.n
            elif isinstance(pre, Range) and pre.dim in dims:
                dims[pre.dim] = min(max(dims[pre.dim], pre.lo), pre.hi)
        shape = Shape(dims)
        if shape_bytes(spec, shape) <= budget:
            return spec.check_shape(shape)
    raise PipecheckError(f"spec {spec.name!r}: no probe shape of 2 or more tiles fits the shape budget "
                         f"({ctx.config.shape_budget_mib} MiB)")


def _reach(written: Any, dims: tuple[str, ...]) -> dict[str, tuple[int, bool]]:
    """For each dimension of an output, one past the last index program 0 wrote (0: nothing written), and
    whether what it wrote along that dimension is one piece from index 0 (a program that owns a chunk)
    rather than blocks with gaps between them (a persistent program that strides over the tiles)."""
    import numpy as np

    out = {}
    for axis, d in enumerate(dims):
        other = tuple(i for i in range(written.ndim) if i != axis)
        along = written.any(axis=other) if other else written
        hits = np.flatnonzero(along)
        end = int(hits[-1]) + 1 if hits.size else 0
        out[d] = (end, bool(along[:end].all()))
    return out


def _measure(ctx: CheckContext, spec: KernelSpec, probe: Shape) -> tuple[dict[str, int], list[str], set[str]]:
    """Per output dimension, how far program 0 wrote at ``probe``; the Triton kernels launched; and the
    dimensions along which it wrote blocks with gaps between them."""
    from . import launch

    vals = {t.name: launch._input_values(ctx, spec, t, probe, i) for i, t in enumerate(spec.inputs)}
    inputs = launch._alloc_inputs(ctx, spec, probe, vals)
    launched: list[str] = []
    with one_program(launched):
        outputs = launch._launch(ctx, spec, probe, inputs, launch._stages_override(ctx, spec),
                                 "the launch of one program", CHECK)
    reach: dict[str, int] = {}
    strided: set[str] = set()
    for t in spec.outputs:
        if not launch._poisoned(t):
            continue  # an element never written cannot be told from a written one
        written = _arr.bits(outputs[t.name].array, t.dtype) != _arr.poison_bits(t.dtype)
        for d, (n, whole) in _reach(written, t.dims).items():
            if d not in probe:
                continue  # a dimension expression (2*N): its reach is not one dimension's
            reach[d] = max(reach.get(d, 0), n)
            if n and not whole:
                strided.add(d)
    return reach, launched, strided


def _chunked_shapes(spec: KernelSpec, probe: Shape, extents: dict[str, int]) -> list[Shape]:
    """Shapes that end inside a program's last chunk: along each dimension whose program extent E was
    measured below the probe, E, E + 1 and 2E minus half a tile; the other dimensions one tile and one."""
    out: list[Shape] = []
    small = {d: spec.tiles.get(d, 1) + 1 for d in spec.dim_names}
    for d, e in extents.items():
        half = max(1, spec.tiles.get(d, 1) // 2)
        for size in (e, e + 1, 2 * e - half):
            try:
                shape = spec.check_shape(Shape({**small, d: size}))
            except PipecheckError:
                continue
            if shape not in out:
                out.append(shape)
    return out


def check_extent(ctx: CheckContext, spec: KernelSpec, shape: Any = None, **kwargs: Any) -> CheckResult:
    """Measure how far one program reaches and check coverage where a program's last chunk ends.

    Records one ``extent`` result: a pass naming the measured extent (and the keyword to declare it where
    the spec's tiles disagree), a skip where no Triton kernel was launched or nothing can be measured, or a
    failure naming the shape, the extent and what coverage found. Coverage at the extra shapes is recorded
    as the test's own ``coverage`` results.

    An autotuned kernel launches each config once at these shapes instead of timing them all at each
    (:func:`pytest_pipecheck.model.autotune.each_config_launched_once`): the first config's result is judged."""
    __tracebackhide__ = True
    from ..model.autotune import each_config_launched_once

    with each_config_launched_once():
        return _check(ctx, spec)


def _check(ctx: CheckContext, spec: KernelSpec) -> CheckResult:
    __tracebackhide__ = True
    from . import coverage as _cov

    try:
        probe = _probe_shape(ctx, spec)
    except PipecheckError as exc:
        return ctx.skip_check(CHECK, str(exc), kernel=spec.name)
    reach, launched, strided = _measure(ctx, spec, probe)
    if not launched:
        return ctx.skip_check(CHECK, f"{spec.name} launched no Triton kernel, and only a Triton launch can be given "
                              "one program: a kernel whose program covers several tiles declares "
                              "blocks_per_program", kernel=spec.name)
    if not reach or not any(reach.values()):
        return ctx.skip_check(CHECK, f"one program of {spec.name} wrote no poisoned output at {probe} (an output "
                              "zeroed or updated in place, or a grid that does not start at program 0)",
                              kernel=spec.name)
    guards = spec.guard_tiles
    declared = {d: guards.get(d, 1) for d in reach}
    notes: list[str] = []
    chunked: dict[str, int] = {}
    for d, e in reach.items():
        if d in strided:
            # a persistent program strides over the tiles: its reach says nothing a declaration could hold
            notes.append(f"one program writes blocks of {d} with gaps between them, up to {e} (a persistent or "
                         "strided program)")
            if e < probe[d]:
                chunked[d] = e
            continue
        if e >= probe[d]:
            continue  # the program walks the whole dimension at the probe size: its loop
        if e != declared[d]:
            tile = spec.tiles.get(d, 1)
            if e > declared[d] and e % tile == 0:
                notes.append(f"one program covers {e} of {d} ({e // tile} tiles of {tile}): declare "
                             f"blocks_per_program={{{d!r}: {e // tile}}}")
            else:
                notes.append(f"one program covers {e} of {d}, the spec declares {declared[d]}: declare tiles="
                             f"{{{d!r}: {e}}}")
            chunked[d] = e
    details: dict[str, Any] = {"probe": str(probe), "extent": reach, "declared": declared, "launched": launched,
                               "strided": sorted(strided), "notes": notes}
    if not chunked:
        summary = "; ".join(notes) if notes else ("one program covers " + ", ".join(f"{d} {e}" for d, e in reach.items())
                                                  + " as the tiles declare")
        return ctx.record(CheckResult(CHECK, Verdict.PASS, summary, kernel=spec.name, details=details))
    shapes = _chunked_shapes(spec, probe, chunked)
    details["shapes"] = [str(s) for s in shapes]
    for s in shapes:
        try:
            _cov.check_coverage(ctx, spec, s)
        except PipecheckFailure as exc:
            message = (f"{spec.name}: one program reaches "
                       + ", ".join(f"{e} of {d}" for d, e in chunked.items())
                       + f" (measured with one program at {probe}); at {s}, where a program's last chunk ends, "
                       f"coverage failed:\n  " + str(exc).replace("\n", "\n  "))
            result = ctx.record(CheckResult(CHECK, Verdict.FAIL, f"coverage fails at {s}, inside a program's "
                                            f"last chunk", kernel=spec.name, details={**details, "failed_at": str(s)}))
            raise PipecheckFailure(message, result) from None
    summary = ("one program covers " + ", ".join(f"{e} of {d}" for d, e in chunked.items())
               + f"; coverage passes at {len(shapes)} shapes ending in a program's last chunk")
    if notes:
        summary += "; " + "; ".join(notes)
    return ctx.record(CheckResult(CHECK, Verdict.PASS, summary, kernel=spec.name, details=details))
