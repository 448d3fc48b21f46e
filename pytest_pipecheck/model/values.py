"""Value patterns generated like shapes: input distributions that make masking and statistics bugs visible.

One default distribution hides whole classes of bugs. A masked max-reduction whose masked load uses
``other=0`` instead of ``-inf`` is only wrong when a whole row is negative; a mean or variance taken
over padded lanes is weak when the inputs have zero mean. So, next to its shapes, a spec gets a small
set of *value patterns*, each with a readable id (``values=negative``):

==========  ==================================================================================
normal      standard normal values (the default distribution; a check without ``values=``)
offset      normal values around a mean of 2 (std 1): a statistic over padded lanes shows
negative    every value negative, ``-(|z| + 1/8)``: a max whose masked lanes read 0 shows
large       normal values scaled to ``sqrt(max / (64 n))`` (``max``: the dtype's largest finite
            value, ``n``: the loop extent): products and sums of squares over the loop reach about
            1/64 of the dtype's range, without overflowing a correct kernel; the absolute tolerance
            is scaled by the reference's magnitude (above 1): a correct kernel's rounding error on
            a sum that cancels is relative to its terms, not to the result
tiny        normal values scaled to ``4 sqrt(smallest normal)``: products and squares stay normal
            numbers; the absolute tolerance is scaled by the reference's magnitude (below 1), or
            any output under the dtype's ``atol`` would agree
equal       every value 0.75: reductions of equal values, ties, a variance of exactly zero
==========  ==================================================================================

Extreme patterns are opt-in (name them in ``KernelSpec(values=...)`` or pass ``values=`` to a check):

==========  ==================================================================================
nan         normal values with NaN at every 7th element: NaN must propagate where the reference
            has it
inf         normal values with +inf / -inf alternating at every 7th element
max         normal values with +/- the dtype's largest finite value at every 7th element
denormal    values of subnormal magnitude (absolute tolerance scaled as for ``tiny``)
==========  ==================================================================================

Under ``nan``, ``inf`` and ``max`` the reference is rounded to the output dtype first; where it is
NaN the kernel must write NaN, where it is +/-inf the same inf, elsewhere the usual tolerance holds
(and an element never written is still found by its poison). The tile probe does not run under these
three (it zeros the inputs outside one tile: NaN and inf do not cancel); it records a skip saying so.

Patterns change the floating-point inputs whose ``init`` is ``"randn"`` (the default); inputs with
``init="uniform"``, ``"randint"`` or a callable, and integer inputs, keep their values (they are
often probabilities, indices or exact small integers). A pattern that would change no input of a spec
is not generated for it.

When a pattern makes the reference exceed the output dtype's range (``offset`` or ``large`` on a long
reduction into float16), the check cannot tell a correct kernel from a wrong one there: it records a
skip naming the pattern, the shape and the magnitude, never a pass.

Pairing (:func:`pair`): a parametrized test taking both ``shape`` and ``values`` runs every generated
shape with ``normal`` and each other pattern at ``per_pattern`` shapes (small 1, medium 2, large 3),
chosen among the *ragged* shapes (a partial last tile in the loop dimension; when no shape has one,
a partial tile in any tiled dimension), rotating so that different patterns land on different shapes. The masking and statistics
bugs patterns expose live in partial tiles, where masked lanes exist; an exact shape would hide them.
At the small level that is at most 8 + 5 = 13 cases instead of the 48 of every shape with every
pattern.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .names import DEFAULT, EXTREME, PATTERNS, Pattern, resolve

if TYPE_CHECKING:  # pragma: no cover
    from .shape import Shape
    from .spec import KernelSpec

# the table of patterns lives in .names, below the spec that names them; it is re-exported here
__all__ = ["DEFAULT", "EXTREME", "PATTERNS", "Pattern", "applies", "names_for", "pair", "resolve"]


# how many ragged shapes each non-normal pattern is paired with, per shape level
PER_PATTERN = {"small": 1, "medium": 2, "large": 3}

# (largest finite, smallest normal, smallest subnormal) per float dtype
_FINFO = {
    "float16": (65504.0, 2.0**-14, 2.0**-24),
    "bfloat16": (3.3895313892515355e38, 2.0**-126, 2.0**-133),
    "float32": (3.4028234663852886e38, 2.0**-126, 2.0**-149),
    "float64": (1.7976931348623157e308, 2.0**-1022, 2.0**-1074),
}


def applies(tensor: Any) -> bool:
    """Whether patterns change this input (a floating-point input with ``init="randn"``)."""
    return (tensor.init == "randn" and (tensor.dtype.startswith("float") or tensor.dtype == "bfloat16"))


def names_for(spec: KernelSpec) -> tuple[str, ...]:
    """The patterns generated for ``spec``: its ``values`` (default: :data:`DEFAULT`), ``normal`` first,
    without those that would change none of its inputs (then only ``normal`` is left)."""
    chosen = tuple(getattr(spec, "values", None) or DEFAULT)
    names = ["normal", *(n for n in chosen if n != "normal")]
    if not any(applies(t) for t in spec.inputs):
        return ("normal",)
    return tuple(names)


def apply(pattern: Pattern, values: Any, dtype: str, loop_extent: int) -> Any:
    """Turn standard normal ``values`` (a float torch tensor or NumPy array) into ``pattern``'s values."""
    name = pattern.name
    if name == "normal":
        return values
    big, small_normal, _ = _FINFO[dtype]
    if name == "offset":
        return values + 2.0
    if name == "negative":
        return -(abs(values) + 0.125)
    if name == "large":
        return values * math.sqrt(big / (64.0 * max(1, loop_extent)))
    if name == "tiny":
        return values * 4.0 * math.sqrt(small_normal)
    if name == "equal":
        return values * 0 + 0.75
    if name == "denormal":
        # uniform in (1/8, 1) of the smallest normal, with random signs: subnormal for every float dtype
        return values.clip(-4, 4) / 4.0 * small_normal * 0.875 + _sign(values) * small_normal * 0.125
    out = values.clone() if hasattr(values, "clone") else values.copy()
    flat = out.reshape(-1)
    if name == "nan":
        flat[::7] = math.nan
    elif name == "inf":
        flat[::14] = math.inf
        flat[7::14] = -math.inf
    elif name == "max":
        flat[::14] = big
        flat[7::14] = -big
    return out


def _sign(values: Any) -> Any:
    return (values >= 0) * 2.0 - 1.0


def pair(spec: KernelSpec, shapes: Sequence[Shape], level: str = "small",
         names: Sequence[str] | None = None) -> list[tuple[Shape, str]]:
    """(shape, pattern name) cases for a test parametrized by both: every shape with ``normal``, and each
    other pattern at :data:`PER_PATTERN` ragged shapes (see the module docstring)."""
    names = tuple(names) if names is not None else names_for(spec)
    cases = [(s, "normal") for s in shapes] if "normal" in names else []
    others = [n for n in names if n != "normal"]
    if not others or not shapes:
        return cases
    ragged = _ragged(spec, shapes)
    k = min(PER_PATTERN.get(level, 1), len(ragged))
    for i, name in enumerate(others):
        for j in range(k):
            # k consecutive ragged shapes per pattern (distinct, as k <= len(ragged)), each pattern starting
            # where the previous one stopped
            cases.append((ragged[(i * k + j) % len(ragged)], name))
    return cases


def _ragged(spec: KernelSpec, shapes: Sequence[Shape]) -> list[Shape]:
    """The shapes with a partial last loop tile; if none, those with any partial tile; if none, all."""
    def partial(shape: Mapping[str, int], dim: str) -> bool:
        return any(shape[dim] % t for t in spec.tile_sizes[dim])

    loop = [s for s in shapes if partial(s, spec.loop_dim)]
    anyp = [s for s in shapes if any(partial(s, d) for d in spec.tiles)]
    return loop or anyp or list(shapes)
