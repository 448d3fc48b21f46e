"""The names a kernel spec may declare, and their checks: value patterns (``KernelSpec(values=...)``) and
memory layouts (``Tensor(layout=...)``).

These are tables, not generators: what each pattern does to the inputs is :mod:`.values`, how each layout
places a tensor is :mod:`.layouts`. They live here, below :mod:`.spec`, so that a spec can check what it
declares by importing this module, while the generators, which work on specs, import the spec.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..results import PipecheckError

__all__ = ["DEFAULT", "EXTREME", "KINDS", "PATTERNS", "STRIDED", "VARIANTS", "Pattern", "layout_kinds", "resolve",
           "validate_names"]


# ----------------------------------------------------------------------------- value patterns
@dataclass(frozen=True)
class Pattern:
    """One input distribution, by name; see the module docstring for each."""

    name: str
    description: str
    extreme: bool = False  # opt-in only
    nonfinite: bool = False  # the reference may be NaN/inf: compare NaN and inf positions
    # atol scaled by the reference's magnitude: "down" (tiny magnitudes: below 1) or "up" (large ones: above 1)
    scale_atol: str = ""

    @property
    def id(self) -> str:
        return f"values={self.name}"

    def __str__(self) -> str:
        return self.id


PATTERNS: dict[str, Pattern] = {p.name: p for p in (
    Pattern("normal", "standard normal values"),
    Pattern("offset", "normal values around a mean of 2"),
    Pattern("negative", "every value negative"),
    Pattern("large", "large magnitudes: products over the loop reach 1/64 of the dtype's range",
            scale_atol="up"),
    Pattern("tiny", "tiny magnitudes: products and squares stay normal numbers", scale_atol="down"),
    Pattern("equal", "every value equal (0.75)"),
    Pattern("nan", "NaN at every 7th element", extreme=True, nonfinite=True),
    Pattern("inf", "+inf/-inf at every 7th element", extreme=True, nonfinite=True),
    Pattern("max", "+/- the dtype's largest finite value at every 7th element", extreme=True, nonfinite=True),
    Pattern("denormal", "subnormal magnitudes", extreme=True, scale_atol="down"),
)}
DEFAULT: tuple[str, ...] = tuple(n for n, p in PATTERNS.items() if not p.extreme)
EXTREME: tuple[str, ...] = tuple(n for n, p in PATTERNS.items() if p.extreme)


def resolve(value: Pattern | str | None, spec_name: str = "") -> Pattern:
    """The Pattern for a name (``"negative"`` or ``"values=negative"``), a Pattern, or None (normal).

    Raises PipecheckError naming the spec and the known patterns for an unknown name.
    """
    if value is None:
        return PATTERNS["normal"]
    if isinstance(value, Pattern):
        return value
    if isinstance(value, str):
        name = value[len("values="):] if value.startswith("values=") else value
        if name in PATTERNS:
            return PATTERNS[name]
    raise PipecheckError(f"spec {spec_name!r}: values={value!r} is not a value pattern (default: "
                         f"{', '.join(DEFAULT)}; opt-in: {', '.join(EXTREME)})")


def validate_names(names: Iterable[Any], spec_name: str) -> tuple[str, ...]:
    """Check a spec's ``values=`` list; raises PipecheckError naming the spec and the bad entry."""
    if isinstance(names, str):
        raise PipecheckError(f"spec {spec_name!r}: values={names!r} must be a list of pattern names, "
                             f"e.g. ({names!r},)")
    out = tuple(resolve(n, spec_name).name for n in names)
    if not out:
        raise PipecheckError(f"spec {spec_name!r}: values=() is empty; leave it out for the default set")
    return out


# ----------------------------------------------------------------------------- memory layouts
KINDS = ("contiguous", "padded", "transposed", "sliced", "offset")
STRIDED = ("padded", "transposed", "sliced", "offset")
VARIANTS = ("transposed", "sliced", "offset")


def layout_kinds(spec: str, tensor: str, raw: Any, dims: Sequence[str]) -> tuple[str, ...] | None:
    """The layout kinds a tensor's ``layout=`` declares (``"strided"`` expanded), in order, without repeats;
    None where it declares none. Raises PipecheckError naming the spec and the tensor."""
    if raw is None:
        return None
    names = [raw] if isinstance(raw, str) else list(raw)
    out: list[str] = []
    for name in names:
        if not isinstance(name, str):
            raise PipecheckError(f"spec {spec!r}: tensor {tensor!r} layout must be a name or a tuple of names, "
                                 f"got {raw!r}")
        expanded = STRIDED if name == "strided" else (name,)
        for kind in expanded:
            if kind not in KINDS:
                raise PipecheckError(f"spec {spec!r}: tensor {tensor!r} layout {name!r} is not one of "
                                     f"{', '.join((*KINDS, 'strided'))}")
            if kind == "transposed" and len(dims) < 2:
                raise PipecheckError(f"spec {spec!r}: tensor {tensor!r} layout 'transposed' needs at least 2 "
                                     f"dims, it has {len(dims)} ({', '.join(dims)})")
            if kind not in out:
                out.append(kind)
    if not out:
        raise PipecheckError(f"spec {spec!r}: tensor {tensor!r} layout is empty")
    return tuple(out)
