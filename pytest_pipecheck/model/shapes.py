"""Ragged and boundary shapes generated from a kernel spec: the sizes pipelines get wrong.

From the tile sizes, the loop dimension and the stage count of a :class:`~pytest_pipecheck.model.spec.KernelSpec`,
:func:`generate` builds a short, deterministic list of :class:`~pytest_pipecheck.model.shape.Shape` values:

* every tiled dimension below one tile, exactly one tile, one over a tile, one under a multiple,
  a multiple (and at larger levels one over a multiple and bigger multiples);
* loop trip counts of 1, stages-1, stages, stages+1 and a large odd count (so a stage ring of any
  depth wraps around with a partial last tile), each either exact or with a partial last tile;
* with ``sm_count``, a grid of one full wave plus one block (a partial last wave), which also
  exercises persistent kernels whose programs loop over tiles;
* dimensions without a tile (batch, heads) cycle through 1, 2 (and 3 at larger levels);
* with several tile sizes on one dimension (``tiles={"N": (64, 128)}``) the cases above follow the
  smallest, and shapes are added until *each* size has loop trip counts of both parities above the
  stage count with a partial last tile (the ring wraps), or, off the loop, a partial tile past the
  first; with ``blocks_per_program={"K": 4}`` (one program covers 4 tiles), shapes are added where the
  last program covers every one of its tiles with the last partial, and where a second program gets
  a single partial tile (on the loop dimension: the last program's trip counts of both parities).
  These additions come after the level's cap: at most two per extra tile size and two per dimension
  with several blocks per program.

"One over"/"one under" step by the dimension's alignment (the lcm of its ``Divisible``
preconditions, the ones a spec adds for its dimension expressions included: ``K/8`` aligns K to 8), so
every shape respects the declared preconditions; a shape a callable precondition rejects is dropped, and
so is one at which a dimension expression is not a positive whole size
(:mod:`pytest_pipecheck.model.dimexpr`). Levels bound the count: small (<= 8 shapes, the sanitizer tier
and the CPU interpreter), medium (<= 14), large (<= 24, nightly).

Levels bound the memory too: a shape whose guarded inputs and outputs (one launch's allocations,
:func:`shape_bytes`) need more than ``max_bytes`` is dropped *with its reason*, never allocated (huge
tiles would otherwise generate shapes of hundreds of GB and end in a raw allocator traceback). The
default budget is :data:`DEFAULT_MAX_BYTES` (1 GiB); the ``shape_budget_mib`` setting
(``--pipecheck-shape-budget-mib``, ini, marker) changes it. :func:`generate_cases` returns every
case with the reason it was dropped (the plugin turns those into skips naming the reason);
:func:`generate` returns the shapes within budget, with the dropped ones in ``.dropped``, and
raises when none is left.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from ..results import PipecheckError
from .preconditions import Divisible, Range
from .shape import Shape
from .spec import KernelSpec

__all__ = ["DEFAULT_MAX_BYTES", "LEVELS", "Case", "Shape", "ShapeList", "generate", "generate_cases",
           "shape_bytes"]

DEFAULT_MAX_BYTES = 1 << 30  # 1 GiB of guarded inputs and outputs per generated shape


@dataclass(frozen=True)
class _Level:
    max_count: int
    odd_trip_factor: int  # the large odd trip count is odd_trip_factor * stages + 1 (made odd, >= 5)
    free_values: tuple[int, ...]
    extra_cases: bool


LEVELS: dict[str, _Level] = {
    "small": _Level(8, 2, (1, 2), False),
    "medium": _Level(14, 4, (1, 2, 3), True),
    "large": _Level(24, 8, (1, 3, 2), True),
}


def _align(spec: KernelSpec, dim: str) -> int:
    a = 1
    for pre in spec.preconditions:
        if isinstance(pre, Divisible) and pre.dim == dim:
            a = a * pre.n // math.gcd(a, pre.n)
    return a


def _bounds(spec: KernelSpec, dim: str) -> tuple[int, int]:
    lo, hi = 1, 2**62
    for pre in spec.preconditions:
        if isinstance(pre, Range) and pre.dim == dim:
            lo, hi = max(lo, pre.lo), min(hi, pre.hi)
    return lo, hi


def _fit(spec: KernelSpec, dim: str, value: int) -> int:
    """Snap ``value`` up to the dim's alignment and into its declared range."""
    a = _align(spec, dim)
    lo, hi = _bounds(spec, dim)
    value = max(value, lo, 1)
    value = -(-value // a) * a
    if value > hi:
        value = (hi // a) * a
    return max(value, a)


def _tiled_value(tile: int, align: int, category: str) -> int:
    """A size for a tiled, non-loop dimension in the given boundary category."""
    step = align if align < tile else 1
    if category == "below":
        return max(1, tile // 2 + 1) if tile > 1 else 1
    if category == "one":
        return tile
    if category == "over":
        return tile + step
    if category == "under":
        return 2 * tile - step
    if category == "multiple":
        return 2 * tile
    if category == "over_multiple":
        return 2 * tile + step
    if category == "big":
        return 4 * tile + step
    raise ValueError(category)  # pragma: no cover - internal table


def _loop_value(tile: int, align: int, trips: int, ragged: bool) -> int:
    """A loop-dim size with exactly ``trips`` tiles; ``ragged`` makes the last one partial."""
    if not ragged or tile <= 1:
        return trips * tile
    step = align if align < tile else 1
    if trips == 1:
        return max(1, tile // 2 + 1) if align < tile else tile
    return trips * tile - step


@dataclass(frozen=True)
class Case:
    """One generated shape, and why it is not run (None: it is)."""

    shape: Shape
    dropped: str | None = None


class ShapeList(list[Shape]):
    """The shapes :func:`generate` kept; ``dropped`` holds the cases left out, each with its reason."""

    dropped: list[Case]

    def __init__(self, shapes: list[Shape], dropped: list[Case]) -> None:
        super().__init__(shapes)
        self.dropped = dropped


def _itemsize(dtype: str) -> int:
    from .tensor import DTYPES

    return DTYPES[dtype][1] // 8


def shape_bytes(spec: KernelSpec, shape: Mapping[str, int]) -> int:
    """Bytes of the guarded allocations of every input and output of ``spec`` at ``shape`` (one launch).

    Counts what the coverage checks allocate on the device (row padding and guard bands included);
    their host-side analysis needs a few times the outputs on top.
    """
    from .layouts import allocation_elements, kinds_of, slot

    total = 0
    for t in spec.tensors:
        tiles = spec.axis_guard_tiles(t)
        # the largest of the tensor's layouts (a sliced one spans twice the elements)
        total += max(allocation_elements(spec.shape_of(t, shape), tiles, kind, slot(spec, t.name))
                     for kind in kinds_of(spec, t)) * _itemsize(t.dtype)
    return total


def _format_bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _check_budget(spec: KernelSpec, max_bytes: int) -> int:
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise PipecheckError(f"spec {spec.name!r}: shape memory budget max_bytes={max_bytes!r} must be an "
                             "integer >= 1")
    return max_bytes


def generate(spec: KernelSpec, level: str = "small", sm_count: int | None = None, *,
             stages: int | None = None, max_count: int | None = None,
             max_bytes: int = DEFAULT_MAX_BYTES) -> ShapeList:
    """Boundary shapes for ``spec`` at ``level`` ("small", "medium" or "large").

    Deterministic for a given spec, level, ``sm_count`` and ``stages`` (defaults to
    ``spec.stages``). ``sm_count`` adds a partial-last-wave case; ``max_count`` lowers the cap.
    A shape over the memory budget ``max_bytes`` (see :func:`shape_bytes`) is left out; the
    returned list's ``dropped`` says which and why. Raises PipecheckError naming the spec for a bad
    level, when no shape meets the preconditions, or when every shape is over the budget.
    """
    cases = generate_cases(spec, level, sm_count, stages=stages, max_count=max_count, max_bytes=max_bytes)
    kept = [c.shape for c in cases if c.dropped is None]
    dropped = [c for c in cases if c.dropped is not None]
    if not kept:
        smallest = min(dropped, key=lambda c: shape_bytes(spec, c.shape))
        raise PipecheckError(f"spec {spec.name!r}: every generated shape is over the memory budget; the smallest, "
                             f"{smallest.dropped}")
    return ShapeList(kept, dropped)


def generate_cases(spec: KernelSpec, level: str = "small", sm_count: int | None = None, *,
                   stages: int | None = None, max_count: int | None = None,
                   max_bytes: int = DEFAULT_MAX_BYTES) -> list[Case]:
    """Every shape :func:`generate` considers, each with the reason it is dropped (None when it runs).

    The cap counts dropped cases too, so a shape's place (and its test id) does not depend on the
    budget. Raises PipecheckError as :func:`generate` does, except that cases all over budget are
    returned (as dropped) rather than raised: a parametrized test shows each as skipped with why.
    """
    if not isinstance(spec, KernelSpec):
        raise PipecheckError(f"shapes.generate needs a KernelSpec, got {type(spec).__name__}")
    if level not in LEVELS:
        raise PipecheckError(f"spec {spec.name!r}: shape level {level!r} is not one of {', '.join(LEVELS)}")
    if sm_count is not None and (isinstance(sm_count, bool) or not isinstance(sm_count, int) or sm_count < 1):
        raise PipecheckError(f"spec {spec.name!r}: sm_count={sm_count!r} must be an integer >= 1")
    lv = LEVELS[level]
    s = spec.stages if stages is None else stages
    if isinstance(s, bool) or not isinstance(s, int) or s < 1:
        raise PipecheckError(f"spec {spec.name!r}: stages={s!r} must be an integer >= 1")
    cap = lv.max_count if max_count is None else max(1, min(max_count, lv.max_count))
    budget = _check_budget(spec, max_bytes)

    loop = spec.loop_dim
    tiled = [d for d in spec.dim_names if d in spec.tiles and d != loop]
    odd = max(5, lv.odd_trip_factor * s + 1)
    if odd % 2 == 0:
        odd += 1
    if odd <= s + 1:
        odd = s + 2 if (s + 2) % 2 else s + 3

    # (loop trips, ragged last loop tile, category per tiled dim): ordered so that truncation to a
    # low cap keeps the cases that find the most bugs (partial tiles, ring wrap) first.
    cases: list[tuple[int, bool, tuple[str, ...]]] = []

    def add(trips: int, ragged: bool, *categories: str) -> None:
        cats = tuple(categories[i % len(categories)] for i in range(len(tiled))) if tiled else ()
        cases.append((max(1, trips), ragged, cats))

    add(1, True, "below")                      # everything below one tile
    add(1, False, "one")                       # exactly one tile everywhere
    add(odd, True, "over", "under")            # ring wraps, partial last loop tile, ragged edges
    add(s + 1, True, "multiple")               # one more trip than stages
    add(s, False, "under")                     # trips == stages
    add(max(s - 1, 1), True, "over")           # trips == stages - 1 (the prologue alone)
    add(2, False, "below", "over_multiple")    # mixed partial tiles
    if lv.extra_cases:
        add(s + 1, False, "over_multiple", "below")
        add(s, True, "multiple", "one")
        add(odd + 2, False, "under", "over")
        add(2 * s + 1, True, "big", "below")
        add(max(s - 1, 1), False, "one", "multiple")
        if level == "large":
            add(odd * 2 + 1, True, "big")
            add(3, True, "big", "over_multiple")
            add(s + 2, True, "under", "big")

    shapes: list[Shape] = []
    for i, (trips, ragged, cats) in enumerate(cases):
        dims: dict[str, int] = {}
        for d in spec.dim_names:
            if d == loop:
                dims[d] = _fit(spec, d, _loop_value(spec.tiles[d], _align(spec, d), trips, ragged))
            elif d in spec.tiles:
                cat = cats[tiled.index(d)]
                dims[d] = _fit(spec, d, _tiled_value(spec.tiles[d], _align(spec, d), cat))
            else:
                dims[d] = _fit(spec, d, lv.free_values[i % len(lv.free_values)])
        shapes.append(Shape(dims))

    if sm_count is not None:
        shapes.insert(min(3, len(shapes)), _wave_shape(spec, sm_count, s))

    out: list[Case] = []
    seen: set[Shape] = set()
    for shp in _with_tile_extras(spec, s, shapes, cap):
        if shp in seen or spec.violations(shp):
            continue
        seen.add(shp)
        need = shape_bytes(spec, shp)
        why = None
        if need > budget:
            why = (f"shape {shp} of spec {spec.name!r} dropped: its inputs and outputs need {_format_bytes(need)} "
                   f"(guarded allocations of one launch), over the shape memory budget of {_format_bytes(budget)} "
                   "(shape_budget_mib: --pipecheck-shape-budget-mib, the ini key or the marker)")
        out.append(Case(shp, why))
    if not out:
        # say why the first was refused: a dimension expression that is whole at none of them appears in no
        # precondition
        refused = next((f"{shp}: {spec.violations(shp)[0]}" for shp in shapes if spec.violations(shp)), None)
        first = f"; the first refused, {refused}" if refused else ""
        raise PipecheckError(f"spec {spec.name!r}: no generated shape meets the preconditions "
                             f"({', '.join(str(p) for p in spec.preconditions)}){first}")
    return out


def _program_trips(spec: KernelSpec, dim: str, tile: int, n: int) -> tuple[int, ...]:
    """The trip counts of the programs along ``dim`` at size ``n`` (tiles per program): all equal to
    ``blocks_per_program`` but the last one."""
    trips = math.ceil(n / tile)
    per = (spec.blocks_per_program or {}).get(dim, 0)
    if not per or trips <= per:
        return (trips,)
    return (per, (trips - 1) % per + 1)


def _requirements(spec: KernelSpec, stages: int) -> list[tuple[str, int, str, int]]:
    """(dim, tile, kind, target) each generated list must meet beyond what the primary tile gives.

    kind ``odd``/``even``: a loop trip count (of the last program) of that parity, above the stage count
    where possible, with a partial last tile; ``partial``: a partial tile past the first; ``full_program``
    and ``lone_tile``: the last program covers all its tiles / a single one, the last partial.
    """
    reqs: list[tuple[str, int, str, int]] = []
    bpp = spec.blocks_per_program or {}
    for dim, sizes in spec.tile_sizes.items():
        per = bpp.get(dim, 0)
        for tile in sizes:
            if dim == spec.loop_dim and (len(sizes) > 1 or per > 1):
                top = per if per > 1 else 2 * stages + 3
                for parity in (1, 0):
                    target = next((t for t in range(stages + 1, top + 1) if t % 2 == parity), None)
                    if target is None:  # blocks_per_program <= stages: the ring cannot wrap
                        target = next((t for t in range(1, top + 1) if t % 2 == parity), 1)
                    reqs.append((dim, tile, "odd" if parity else "even", target))
            elif dim != spec.loop_dim and len(sizes) > 1 and tile != sizes[0]:
                reqs.append((dim, tile, "partial", 2))
            if per > 1:
                reqs.append((dim, tile, "full_program", per))
                reqs.append((dim, tile, "lone_tile", per + 1))
    return reqs


def _meets(spec: KernelSpec, shape: Mapping[str, int], dim: str, tile: int, kind: str, target: int) -> bool:
    n = shape[dim]
    if not n % tile:
        return False  # every requirement wants a partial last tile
    trips = _program_trips(spec, dim, tile, n)
    if kind in ("odd", "even"):
        return trips[-1] == target or (trips[-1] % 2 == target % 2 and trips[-1] > min(target, spec.stages))
    if kind == "partial":
        return trips[0] >= 2
    if kind == "full_program":
        return len(trips) >= 1 and trips[-1] == target
    if kind == "lone_tile":
        return len(trips) == 2 and trips[-1] == 1
    raise ValueError(kind)  # pragma: no cover - internal table


def _with_tile_extras(spec: KernelSpec, stages: int, shapes: list[Shape], cap: int) -> list[Shape]:
    """The first ``cap`` distinct shapes, then one shape per unmet requirement of :func:`_requirements`."""
    kept: list[Shape] = []
    for shp in shapes:
        if shp not in kept and not spec.violations(shp):
            kept.append(shp)
        if len(kept) >= cap:
            break
    if not kept:
        return kept
    base = kept[min(2, len(kept) - 1)]
    for dim, tile, kind, target in _requirements(spec, stages):
        if any(_meets(spec, shp, dim, tile, kind, target) for shp in kept):
            continue
        if kind in ("odd", "even"):
            per = (spec.blocks_per_program or {}).get(dim, 0)
            trips = (per + target) if per > 1 else target  # a full program, then the last with `target`
        elif kind == "partial":
            trips = 2
        else:
            trips = target
        step = _align(spec, dim) if _align(spec, dim) < tile else 1
        # `trips` tiles, the last partial; lone_tile: one tile past a full program
        value = trips * tile - step if kind != "lone_tile" else (trips - 1) * tile + step
        candidate = base.replace(**{dim: _fit(spec, dim, value)})
        if _meets(spec, candidate, dim, tile, kind, target) and not spec.violations(candidate):
            kept.append(candidate)
    return kept


def _wave_shape(spec: KernelSpec, sm_count: int, stages: int) -> Shape:
    """One full wave of blocks plus one (a partial last wave), with a partial last output tile."""
    loop = spec.loop_dim
    out_dims = [d for t in spec.outputs for d in spec.dims_of(t)]
    grid_dims = [d for d in spec.dim_names if d in spec.tiles and d != loop and d in out_dims]
    dims: dict[str, int] = {}
    for d in spec.dim_names:
        tile = spec.tiles.get(d)
        if d == loop:
            dims[d] = _fit(spec, d, _loop_value(tile or 1, _align(spec, d), stages, False))
        elif grid_dims and d == grid_dims[0] and tile:
            # sm_count full tiles plus a partial one: sm_count + 1 blocks along this dim
            step = _align(spec, d) if _align(spec, d) < tile else 1
            dims[d] = _fit(spec, d, sm_count * tile + step)
        elif tile:
            dims[d] = _fit(spec, d, tile)
        else:
            dims[d] = _fit(spec, d, 1)
    return Shape(dims)


def describe(spec: KernelSpec, shape: Mapping[str, int]) -> str:
    """A short human description of a shape: tiles per dim and loop trips (for messages)."""
    parts = []
    for d, tile in spec.tiles.items():
        n = shape[d]
        tiles = math.ceil(n / tile)
        partial = n % tile
        kind = f"{tiles} tile{'s' if tiles != 1 else ''}" + (f", last {partial}/{tile}" if partial else "")
        parts.append(f"{d}={n} ({kind})")
    return ", ".join(parts)
