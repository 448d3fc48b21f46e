"""Memory layouts per tensor, generated like shapes: contiguous, padded rows, and strided variants.

Every array a check hands to a kernel lives inside a larger guarded allocation
(:mod:`pytest_pipecheck.checks.arrays`). Its layout says how the array sits in it:

``contiguous``
    Row-major with no gaps, guard bands before and after (``x.is_contiguous()`` holds). The default
    for the inputs of the wrapper form (``KernelSpec(call=...)``): wrappers usually require it.
``padded``
    Each row followed by padding (guards the kernel must not touch). Each tensor gets a different
    padding, so two tensors of one shape have different row strides and a kernel that uses one
    tensor's stride for the other reads or writes the wrong elements. The default of the spec form.
``transposed``
    The last two dimensions stored column-major (``x.t().contiguous().t()``, with padding): row
    stride 1. Catches kernels that assume the last dimension is the unit-stride one.
``sliced``
    Every other element of a wider allocation along the last dimension (``x[..., ::2]``): the gaps
    hold guards. Catches kernels that assume a last-dimension stride of 1.
``offset``
    Contiguous, but starting one element past an aligned address. Catches kernels that assume a
    16-byte aligned base pointer (vector loads, TMA) without declaring it.

``Tensor(layout=...)`` takes one name or a tuple; the first is the tensor's *base* layout and the
others are *variants*. ``"strided"`` is short for ``("padded", "transposed", "sliced", "offset")``.
Left out, a tensor is ``"strided"`` in the spec form (a launcher must take strides from its arrays)
and ``"contiguous"`` as an input of the wrapper form. Outputs of the wrapper form take no layout: the
wrapper allocates them.

:func:`generate` returns the base :class:`Layout` (every tensor in its base layout) followed by one
case per variant (one tensor in a variant layout, the others in their base), bounded per level
(small 4, medium 8, large 16 in all). ``str(layout)`` is a readable pytest id: ``padded``,
``contiguous`` or ``base`` for the base case, ``a-transposed``, ``out-sliced`` for a variant. The
checks take ``layout=`` (a Layout, its id, or ``{tensor name: layout}``); the plugin parametrizes a
test argument named ``layout`` when the marker names a spec.

Pairing (:func:`pair`): a test taking ``shape`` and ``layout`` runs every generated shape (and, when it
also takes ``values``, every (shape, value pattern) case) in the base layout, and each variant layout
at :data:`PER_LAYOUT` shapes (small 2, medium 3, large 4) under the ``normal`` pattern, chosen among
the shapes with a partial tile (where masks meet strides), rotating so that different variants land on
different shapes. A stride mix-up shows at any shape; crossing every variant with every shape and
every pattern would multiply the cases (8 shapes x 4 layouts x ... at the small level) for nothing a
variant at two shapes does not show. At the small level a spec gets 8 + 3 x 2 = 14 cases instead of 32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..results import PipecheckError
from .names import KINDS, STRIDED, VARIANTS, layout_kinds

if TYPE_CHECKING:  # pragma: no cover
    from .shape import Shape
    from .spec import KernelSpec
    from .tensor import Tensor

__all__ = ["KINDS", "LEVEL_COUNTS", "PER_LAYOUT", "STRIDED", "Layout", "as_layout", "base", "generate", "kinds_of",
           "pair"]

#: every element of a guarded allocation is aligned to this many elements (rows, guards)
_ALIGN_ELEMS = 16
#: elements of guard before a view and, at least, after its last tile
GUARD_MIN = 1024
LEVEL_COUNTS = {"small": 4, "medium": 8, "large": 16}
# how many shapes each variant layout is paired with, per shape level (see :func:`pair`)
PER_LAYOUT = {"small": 2, "medium": 3, "large": 4}


def kinds_of(spec: KernelSpec, t: Tensor) -> tuple[str, ...]:
    """The layouts ``t`` is checked in: its base first, then its variants."""
    kinds = layout_kinds(spec.name, t.name, t.layout, t.dims)
    if kinds is not None:
        return kinds
    if spec.call is not None:
        return ("contiguous",)
    return STRIDED if len(t.dims) >= 2 else ("padded", "sliced", "offset")


@dataclass(frozen=True)
class Layout:
    """One layout per tensor of a spec; ``str()`` is the pytest id.

    ``alike``: every tensor gets the same row padding (slot 0) instead of one of its own, so that tensors of
    one shape in one layout have equal strides. Never generated: a diagnosis uses it to tell a kernel that
    takes one tensor's strides for another's (it then passes) from one that ignores strides (it fails)."""

    kinds: tuple[tuple[str, str], ...]  # (tensor name, layout), in the spec's tensor order
    id: str
    alike: bool = False

    def of(self, name: str) -> str:
        for n, k in self.kinds:
            if n == name:
                return k
        return "padded"

    def slot_of(self, spec: KernelSpec, name: str) -> int:
        """The padding slot of tensor ``name``: its own (:func:`slot`), or 0 for every tensor when ``alike``."""
        return 0 if self.alike else slot(spec, name)

    def __str__(self) -> str:
        return self.id


def base(spec: KernelSpec) -> Layout:
    """Every tensor in its base layout (what the checks use when no ``layout=`` is given)."""
    kinds = tuple((t.name, kinds_of(spec, t)[0]) for t in _laid_out(spec))
    distinct = {k for _, k in kinds}
    return Layout(kinds, distinct.pop() if len(distinct) == 1 else "base")


def _laid_out(spec: KernelSpec) -> tuple[Tensor, ...]:
    # the wrapper allocates its own outputs: only its inputs have a layout pipecheck chooses
    return spec.inputs if spec.call is not None else tuple(spec.tensors)


def generate(spec: KernelSpec, level: str = "small", max_count: int | None = None) -> list[Layout]:
    """The base layout, then one variant per (tensor, variant layout), at most LEVEL_COUNTS[level] in all.

    Variants are interleaved so that a low cap still covers each kind of variant on different tensors
    (first tensor transposed, second sliced, third offset, then the next round). Raises
    PipecheckError naming the spec for a bad level.
    """
    if level not in LEVEL_COUNTS:
        raise PipecheckError(f"spec {spec.name!r}: layout level {level!r} is not one of {', '.join(LEVEL_COUNTS)}")
    cap = LEVEL_COUNTS[level] if max_count is None else max(1, min(max_count, LEVEL_COUNTS[level]))
    first = base(spec)
    tensors = _laid_out(spec)
    wanted = {t.name: kinds_of(spec, t)[1:] for t in tensors}
    out = [first]
    n = len(tensors)
    seen: set[tuple[str, str]] = set()
    for rnd in range(n):
        for i, kind in enumerate((*VARIANTS, "contiguous", "padded")):
            t = tensors[(rnd + i) % n]
            if kind in wanted[t.name] and (t.name, kind) not in seen:
                seen.add((t.name, kind))
                kinds = tuple((name, kind if name == t.name else k) for name, k in first.kinds)
                out.append(Layout(kinds, f"{t.name}-{kind}"))
    # anything the interleaving missed (several variants on few tensors)
    for t in tensors:
        for kind in wanted[t.name]:
            if (t.name, kind) not in seen:
                seen.add((t.name, kind))
                kinds = tuple((name, kind if name == t.name else k) for name, k in first.kinds)
                out.append(Layout(kinds, f"{t.name}-{kind}"))
    return out[:cap]


def pair(spec: KernelSpec, shapes: Sequence[Shape], level: str = "small") -> list[tuple[Shape, Layout]]:
    """(shape, variant layout) cases: each variant of :func:`generate` at ``PER_LAYOUT[level]`` of
    ``shapes`` (those with a partial tile first), rotating; the base layout is not among them (the
    caller runs every shape in it). Raises PipecheckError naming the spec for a bad level."""
    from .values import _ragged

    variants = generate(spec, level)[1:]
    if not variants or not shapes:
        return []
    pool = _ragged(spec, shapes)
    k = min(PER_LAYOUT.get(level, 1), len(pool))
    return [(pool[(i * k + j) % len(pool)], lay) for i, lay in enumerate(variants) for j in range(k)]


def as_layout(spec: KernelSpec, layout: Any) -> Layout:
    """Accept None (the base), a Layout, an id (``"a-transposed"``) or ``{tensor: layout}``.

    Raises PipecheckError naming the spec for an unknown tensor or layout name.
    """
    first = base(spec)
    if layout is None:
        return first
    if isinstance(layout, Layout):
        if {n for n, _ in layout.kinds} != {n for n, _ in first.kinds}:
            raise PipecheckError(f"spec {spec.name!r}: layout {layout} was made for other tensors "
                                 f"({', '.join(n for n, _ in layout.kinds)})")
        return layout
    if isinstance(layout, str):
        if layout in (first.id, "base"):
            return first
        name, sep, kind = layout.rpartition("-")
        if not sep:
            raise PipecheckError(f"spec {spec.name!r}: layout {layout!r} is not the base ({first.id!r}) nor "
                                 "TENSOR-LAYOUT such as 'a-transposed'")
        layout = {name: kind}
    if not isinstance(layout, Mapping):
        raise PipecheckError(f"spec {spec.name!r}: layout must be a Layout, an id or a dict of tensor: layout, "
                             f"got {type(layout).__name__}")
    names = [n for n, _ in first.kinds]
    for name, kind in layout.items():
        if name not in names:
            what = "an input" if spec.call is not None else "a tensor"
            raise PipecheckError(f"spec {spec.name!r}: layout names {name!r}, which is not {what} "
                                 f"({', '.join(names)})")
        if kind not in KINDS:
            raise PipecheckError(f"spec {spec.name!r}: layout {kind!r} for {name!r} is not one of {', '.join(KINDS)}")
        if kind == "transposed" and len(spec.tensor(name).dims) < 2:
            raise PipecheckError(f"spec {spec.name!r}: layout 'transposed' for {name!r} needs at least 2 dims")
    kinds = tuple((n, layout.get(n, k)) for n, k in first.kinds)
    changed = [f"{n}-{k}" for (n, k), (_, b) in zip(kinds, first.kinds) if k != b]
    return Layout(kinds, "_".join(changed) if changed else first.id)


def slot(spec: KernelSpec, name: str) -> int:
    """The tensor's position among the spec's tensors: its padding differs from every other tensor's."""
    for i, t in enumerate(spec.tensors):
        if t.name == name:
            return i
    return 0


def describe(layout: Layout, spec: KernelSpec) -> str:
    """`` (layout a-transposed)`` for a variant, empty for the base (for messages)."""
    return "" if layout == base(spec) else f" (layout {layout})"


def aligned(n: int) -> int:
    """``n`` rounded up to a multiple of the alignment (16 elements)."""
    return -(-n // _ALIGN_ELEMS) * _ALIGN_ELEMS


def _row_major(shape: Sequence[int], row: int) -> tuple[tuple[int, ...], int]:
    """Strides of ``shape`` stored row-major with rows ``row`` elements apart, and the elements spanned."""
    strides_rev = [1]
    extent = row
    for n in reversed(shape[:-1]):
        strides_rev.append(extent)
        extent *= n
    return tuple(reversed(strides_rev)), extent


def placement(shape: tuple[int, ...], tiles: Sequence[int] | None, kind: str = "padded",
              slot: int = 0, *, exact: bool = False) -> tuple[tuple[int, ...], int, int]:
    """(strides of the view, elements before it, elements of the whole allocation) for ``shape``.

    ``kind`` is one of :data:`KINDS`; ``slot`` (the tensor's
    position in its spec) widens the row padding by 16 elements per slot, so that tensors of one shape
    get different row strides.

    ``exact``: the view's strides, but no guard bands: the allocation starts at the view's first element
    (one element earlier for ``offset``, which is about the base's alignment) and ends just past its last
    one, so that an access past the view is outside the allocation. What a compute-sanitizer memcheck
    child uses: a guard band is valid memory to the tool.
    """
    ndim = len(shape)
    tiles = tuple(tiles) if tiles is not None else (1,) * ndim
    if kind not in KINDS:
        raise ValueError(f"layout {kind!r} is not one of {', '.join(KINDS)}")
    pad = max(_ALIGN_ELEMS, int(tiles[-1]) if ndim else 1) + _ALIGN_ELEMS * max(0, slot)
    before = GUARD_MIN
    if ndim == 0:
        strides: tuple[int, ...] = ()
        span = 1
    elif kind == "padded" and ndim >= 2:
        strides, span = _row_major(shape, aligned(shape[-1] + pad))
    elif kind == "transposed" and ndim >= 2:
        # the last two dims stored swapped (column-major), with padded "rows" of the stored order
        stored = (*shape[:-2], shape[-1], shape[-2])
        st, span = _row_major(stored, aligned(shape[-2] + pad))
        strides = (*st[:-2], st[-1], st[-2])
    elif kind == "sliced":
        row = aligned(2 * shape[-1] + (pad if ndim >= 2 else 0))
        st, span = _row_major(shape, row)
        strides = (*st[:-1], 2)
        span = span if ndim >= 2 else 2 * shape[-1]
    else:  # contiguous, offset, and padded/transposed of a 1-D array (nothing to pad)
        strides, span = _row_major(shape, shape[-1])
        if kind == "offset":
            before += 1  # one element past an aligned address
    if exact:
        first = 1 if kind == "offset" else 0
        last = sum((int(n) - 1) * s for n, s in zip(shape, strides)) + 1 if all(int(n) > 0 for n in shape) else 0
        return strides, first, first + last
    overrun = sum(int(t) * s for t, s in zip(tiles, strides))
    after = aligned(overrun + GUARD_MIN)
    return strides, before, before + span + after


def allocation_elements(shape: Sequence[int], tiles: Sequence[int] | None = None, layout: str = "padded",
                        slot: int = 0) -> int:
    """Elements :func:`pytest_pipecheck.checks.arrays.alloc_guarded` allocates for ``shape`` (view, row padding and guards), without
    allocating anything: what a shape will cost before it is tried."""
    return placement(tuple(int(n) for n in shape), tiles, layout, slot)[2]
