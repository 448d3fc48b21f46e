"""One kernel argument array, :class:`Tensor`: its name, named dimensions, dtype, role, how it starts, its
memory layout and what the tile probe does with it; and the names those fields take (:data:`DTYPES` with
:func:`normalize_dtype`, :data:`ROLES`, :data:`INITS`, :data:`OUTPUT_INITS`, :data:`PROBES`), which
:class:`~pytest_pipecheck.model.spec.KernelSpec` checks its tensors against::

    Tensor(name, dims, dtype="float16", role="input", init="randn", layout=None, probe="mask")

* ``role``: ``"input"``, ``"output"`` (poisoned before the launch; every element must be written) or
  ``"inout"`` (updated in place: it holds its input values when the kernel starts, and the reference
  gets the pre-call values and returns the expected post-call value under its name, or updates its
  copy in place). An inout tensor cannot be poisoned: an element the kernel should update but leaves
  alone is found only where the update changes its value.
* An output with ``init="zeros"`` is zeroed before the launch, as the caller does for a kernel that
  accumulates into it (split-K with atomic adds). It cannot be poisoned either, so its coverage
  compares values only: an element never written is found only where the reference is not zero.
* ``dims`` may be expressions of the dimension names, integer literals and the spec's ``constants``, with
  ``+ - * /`` and parentheses: ``Tensor("w", ("K/8", "N"), "int32")`` (packed weights),
  ``Tensor("scales", ("K/group", "N"))`` with ``constants={"group": 128}``, ``Tensor("x", ("M", "2*N"))`` (a fused
  input). ``/`` is exact: ``K/8`` makes K a multiple of 8 (an implied ``Divisible``), and no shape is generated
  or accepted where an expression is not a positive whole size. Such tensors are allocated, poisoned, guarded
  and probed like any other (:mod:`pytest_pipecheck.model.dimexpr` gives the rules).
* ``init`` is ``"randn"`` (normal values; the value patterns of :mod:`pytest_pipecheck.model.values` apply
  to these), ``"randint"`` (small integers in [-3, 3], never all zero: keeps sums exact),
  ``"uniform"`` ([0, 1)), or a callable ``init(shape, generator) -> array`` that returns values
  (torch/NumPy, any dtype); pipecheck casts them and places them on the device. ``generator`` is a
  ``torch.Generator`` (torch backend) or ``numpy.random.Generator`` (CuPy). A callable that takes a
  third argument (or a keyword ``dims``) also gets the shape's sizes, for inputs constrained by
  another dimension: ``init=lambda shape, gen, dims: torch.randint(0, dims["V"], shape, generator=gen)``.

This module lies below :mod:`.spec`, which validates a spec's tensors, and imports no module of the model
but :mod:`.dimexpr`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import dimexpr

__all__ = ["DTYPES", "INITS", "OUTPUT_INITS", "PROBES", "ROLES", "Tensor", "normalize_dtype"]

# dtype names pipecheck understands; the values are (kind, bits)
DTYPES: dict[str, tuple[str, int]] = {
    "float16": ("f", 16),
    "bfloat16": ("f", 16),
    "float32": ("f", 32),
    "float64": ("f", 64),
    "int8": ("i", 8),
    "int16": ("i", 16),
    "int32": ("i", 32),
    "int64": ("i", 64),
    "uint8": ("u", 8),
}
_DTYPE_ALIASES = {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32",
                  "fp32": "float32", "double": "float64", "fp64": "float64"}
INITS = ("randn", "randint", "uniform")
ROLES = ("input", "output", "inout")
#: what the tile probe does with an input (Tensor.probe)
PROBES = ("mask", "whole")
OUTPUT_INITS = ("zeros",)  # besides the default: how an output starts


def normalize_dtype(dtype: Any) -> str:
    """Return pipecheck's name for ``dtype`` (a string, a torch dtype or a NumPy/CuPy dtype).

    Raises ValueError for a dtype pipecheck cannot poison and compare.
    """
    text = str(dtype)
    for prefix in ("torch.", "<class 'numpy.", "numpy."):
        if text.startswith(prefix):
            text = text[len(prefix):]
    text = text.rstrip("'>").strip().lower()
    text = _DTYPE_ALIASES.get(text, text)
    if text not in DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r} (supported: {', '.join(DTYPES)})")
    return text


@dataclass(frozen=True)
class Tensor:
    """One kernel argument array: its name, named dimensions, dtype, role and how inputs are filled."""

    #: the argument's name: the key in ``arrays``, the reference's result and every message
    name: str
    #: named dimensions, e.g. ``("M", "K")`` (a string ``"MK"`` reads as one name per letter), or expressions
    #: of them, integer literals and the spec's ``constants``: ``("K/8", "N")``, ``("K/group", "N")``, ``("M", "2*N")``
    #: (:mod:`pytest_pipecheck.model.dimexpr`)
    dims: tuple[str, ...]
    #: float16, bfloat16, float32, float64, int8, int16, int32, int64 or uint8 (torch dtypes accepted)
    dtype: str = "float16"
    #: ``"input"``, ``"output"`` (poisoned; every element must be written) or ``"inout"`` (updated in place:
    #: holds its input values at the start, compared with the reference's post-call value after)
    role: str = "input"
    #: how an input is filled: ``"randn"`` (value patterns apply), ``"randint"`` (small integers), ``"uniform"``,
    #: or ``init(shape, gen)`` / ``init(shape, gen, dims)``; for an output, ``"zeros"``: the caller zeroes it
    #: before the launch (split-K atomics), so coverage compares values only
    init: str | Callable[..., Any] = "randn"
    #: memory layout: ``"contiguous"``, ``"padded"``, ``"transposed"``, ``"sliced"``, ``"offset"``, ``"strided"``
    #: (padded plus the three variants), or a tuple of them (the first is the base, the rest are generated
    #: variants); default: padded with the variants (spec form), contiguous (inputs of the wrapper form)
    layout: str | Sequence[str] | None = None
    #: what the tile probe does with an input along the loop dimension: ``"mask"`` (zero it outside the probed
    #: tile) or ``"whole"`` (leave it as it is: an input with an invariant that zeroing would break, such as a
    #: cumulative sum along the loop, a normalizer or indices)
    probe: str = "mask"

    def __post_init__(self) -> None:
        # a list is fine; a string "MK" is read as the dims ("M", "K")
        object.__setattr__(self, "dims", tuple(self.dims))

    @property
    def is_output(self) -> bool:
        return self.role == "output"

    @property
    def is_inout(self) -> bool:
        return self.role == "inout"

    @property
    def zeroed(self) -> bool:
        """An output the caller zeroes before the launch (``init="zeros"``): it cannot be poisoned."""
        return self.role == "output" and self.init == "zeros"

    @property
    def compared(self) -> bool:
        """Whether its value after the launch is compared with the reference (outputs and inouts)."""
        return self.role in ("output", "inout")

    def init_takes_dims(self) -> bool:
        """Whether a callable ``init`` takes the shape's sizes (a third parameter or a ``dims`` keyword)."""
        if not callable(self.init):
            return False
        try:
            params = list(inspect.signature(self.init).parameters.values())
        except (TypeError, ValueError):
            return False
        if any(p.name == "dims" for p in params) or any(p.kind is p.VAR_POSITIONAL for p in params):
            return True
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        return len(positional) >= 3

    def shape(self, dims: Mapping[str, int]) -> tuple[int, ...]:
        """Its sizes at ``dims``, which names every dimension (and constant) its expressions use; raises
        ValueError for an expression that is not a positive whole size there. A spec's constants are
        added by :meth:`.spec.KernelSpec.shape_of`, which also names the spec and the tensor in that error."""
        return tuple(int(dims[d]) if d in dims else int(dimexpr.parse(d).value(dims)) for d in self.dims)
