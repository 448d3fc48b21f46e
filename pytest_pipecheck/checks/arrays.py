"""Backend-neutral arrays for the coverage checks: guarded allocations, poison, host copies.

Every array a check hands to a kernel lives inside a larger flat allocation:

    [ guard before | row 0 | pad | row 1 | pad | ... | last row | pad | guard after ]

The array itself is a *strided view* (row stride = last dim + padding, rounded up to 16 elements so
TMA and vector loads stay aligned). Outputs start as poison (NaN for floats, a sentinel for
integers) and their guards and padding hold a finite canary; inputs hold their values and their
guards and padding hold NaN (a sentinel for integers), so an unmasked load past an edge turns the
result into NaN and an unmasked store past an edge changes a canary. A kernel that assumes
contiguity instead of reading strides writes into the padding and is caught the same way.
Other layouts (contiguous, transposed, sliced, offset: :mod:`pytest_pipecheck.model.layouts`) place the
view differently in the same kind of guarded allocation.

Works for torch tensors (CPU or CUDA) and CuPy arrays; analysis happens on host NumPy copies.
torch, cupy and numpy are imported lazily.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..model.layouts import placement

__all__ = [
    "GuardedArray",
    "alloc_guarded",
    "allocate_exactly",
    "allocated_exactly",
    "bits",
    "clone",
    "guard_report",
    "is_float",
    "listen",
    "poison_bits",
    "poison_value",
    "synchronize",
    "to_numpy",
    "unlisten",
]

# A finite value, exactly representable in fp16/bf16/fp32, that a correct kernel is unlikely to write.
_FLOAT_CANARY = -1234.0
_INT_CANARY = 0x5A


def _is_float(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


# NaN with a payload: a kernel that computes NaN writes the canonical NaN (0x7E00 / 0x7FFF in fp16),
# so "still poison" (never written) and "wrote NaN" stay distinguishable. Two variants (both quiet
# NaNs): runs that must tell an unwritten element from a written one poison with different ones.
_NAN_POISON_BITS = (
    {"float16": 0x7E5A, "bfloat16": 0x7FDA, "float32": 0x7FC05A5A, "float64": 0x7FF8000000005A5A},
    {"float16": 0x7EA5, "bfloat16": 0x7FE5, "float32": 0x7FC0A5A5, "float64": 0x7FF800000000A5A5},
)
POISON_VARIANTS = len(_NAN_POISON_BITS)


def is_float(dtype: str) -> bool:
    """Whether ``dtype`` (pipecheck's name) is a floating-point type (its poison is a NaN payload)."""
    return _is_float(dtype)


def poison_bits(dtype: str, variant: int = 0) -> int:
    """The raw bits (unsigned) of the poison an unwritten output element holds (``variant`` 0 or 1)."""
    if _is_float(dtype):
        return _NAN_POISON_BITS[variant][dtype]
    import numpy as np

    value = poison_value(dtype, variant)
    return int(np.array([value], dtype=dtype).view(_bits_dtype(dtype))[0])


def _signed(pattern: int, bits_dtype: str) -> int:
    width = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}[bits_dtype]
    return pattern - (1 << width) if pattern >= 1 << (width - 1) else pattern


def poison_value(dtype: str, variant: int = 0) -> float | int:
    """What an unwritten output element holds: NaN for floats, a sentinel for integers.

    An integer poison is a value a kernel can also write (7 is a fine uint8 result), so it never
    proves an element unwritten on its own: a check runs integer outputs under both variants (near
    the minimum, near the maximum) and calls an element unwritten only when it holds the poison of
    each run.
    """
    if variant not in range(POISON_VARIANTS):
        raise ValueError(f"poison variant {variant!r} must be 0 or 1")
    if _is_float(dtype):
        return math.nan
    import numpy as np

    info = np.iinfo(_np_dtype_name(dtype))
    return int(info.min) + 7 if variant == 0 else int(info.max) - 12


def _input_guard_value(dtype: str) -> float | int:
    """What an input's guards hold: NaN for floats (poisons any result that reads it), else a big int."""
    if _is_float(dtype):
        return math.nan
    import numpy as np

    return int(np.iinfo(_np_dtype_name(dtype)).max) - 7


def _output_guard_value(dtype: str) -> float | int:
    return _FLOAT_CANARY if _is_float(dtype) else _INT_CANARY


def _np_dtype_name(dtype: str) -> str:
    return "float32" if dtype == "bfloat16" else dtype


def _bits_dtype(dtype: str) -> str:
    size = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1,
            "int16": 2, "int32": 4, "int64": 8}[dtype]
    return {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}[size]


def backend_of(array: Any) -> str:
    """'torch', 'cupy' or 'numpy', from the array's type (without importing anything new)."""
    mod = type(array).__module__
    if mod.startswith("torch"):
        return "torch"
    if mod.startswith("cupy"):
        return "cupy"
    return "numpy"


def to_numpy(array: Any) -> Any:
    """A host NumPy copy of ``array`` (bfloat16 becomes float32; torch, CuPy and NumPy accepted)."""
    import numpy as np

    kind = backend_of(array)
    if kind == "torch":
        import torch

        t = array.detach()
        if t.dtype == torch.bfloat16:
            t = t.float()
        # .numpy() of a CPU tensor shares its memory; a snapshot must not follow later writes
        return t.cpu().numpy().copy()
    if kind == "cupy":
        import cupy

        return cupy.asnumpy(array)
    return np.asarray(array)


def bits(array: Any, dtype: str) -> Any:
    """A host NumPy array of the raw bits of ``array`` (for bitwise comparison; NaN-safe)."""
    import numpy as np

    kind = backend_of(array)
    if kind == "torch":
        import torch

        width = {"uint8": torch.uint8, "uint16": torch.int16, "uint32": torch.int32, "uint64": torch.int64}
        t = array.detach()
        if not t.is_contiguous():
            t = t.contiguous()
        return t.view(width[_bits_dtype(dtype)]).cpu().numpy().view(_bits_dtype(dtype)).copy()
    if kind == "cupy":
        import cupy

        return cupy.asnumpy(cupy.ascontiguousarray(array).view(_bits_dtype(dtype)))
    return np.array(array, copy=True, order="C").view(_bits_dtype(dtype))


def clone(array: Any) -> Any:
    """A separate copy of ``array`` on its device (torch or CuPy), for code that must not touch the original."""
    if backend_of(array) == "torch":
        return array.detach().clone()
    return array.copy()


def synchronize(backend: str, device: str) -> None:
    """Wait for the device so that outputs are final (no-op on CPU)."""
    if backend == "cupy":
        import cupy

        cupy.cuda.Device().synchronize()
    elif device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


# who is told of every GuardedArray made on this thread (the out-of-bounds watch of a launch:
# :mod:`pytest_pipecheck.checks.bounds`); a stack, so a nested listener does not lose the outer one
_LISTENERS = threading.local()


def listen(fn: Callable[[GuardedArray], None]) -> int:
    """Call ``fn`` with every GuardedArray made on this thread until :func:`unlisten`; returns its token."""
    stack = getattr(_LISTENERS, "stack", None)
    if stack is None:
        stack = _LISTENERS.stack = []
    stack.append(fn)
    return len(stack)


def unlisten(token: int) -> None:
    """Stop the listener :func:`listen` returned ``token`` for (and any started after it)."""
    stack = getattr(_LISTENERS, "stack", None)
    if stack:
        del stack[token - 1:]


@dataclass
class GuardedArray:
    """A strided view (``array``) inside a flat allocation (``buffer``) with guard bands and row padding.

    One made while a listener is active on the thread (:func:`listen`) is reported to it.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    buffer: Any
    array: Any
    offset: int  # elements before the first array element
    strides: tuple[int, ...]  # in elements
    guard_value: float | int
    backend: str
    layout: str = "padded"
    # how the array came to be, for messages (the wrapper form: which op allocated it, and where)
    note: str = ""
    _initial_bits: Any = field(default=None, repr=False)
    # why an element the kernel never wrote cannot be told from a written one (empty: the view starts
    # poisoned); the wrapper form sets it for outputs the call initialized itself (torch.zeros) or that
    # pipecheck did not allocate
    unpoisoned: str = ""

    def __post_init__(self) -> None:
        stack = getattr(_LISTENERS, "stack", None)
        if stack:
            stack[-1](self)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def interior_mask(self) -> Any:
        """Boolean NumPy mask over the flat buffer: True where an array element lives."""
        import numpy as np

        total = int(self.buffer.shape[0])
        mask = np.zeros(total, dtype=bool)
        if self.size:
            idx = np.full((), self.offset, dtype=np.int64)
            for n, s in zip(self.shape, self.strides):
                idx = np.add.outer(idx, np.arange(n, dtype=np.int64) * s)
            mask[idx.ravel()] = True
        return mask

    def snapshot(self, known: Any = None) -> None:
        """Remember the buffer's bits so :meth:`changed` can tell what a launch modified.

        ``known``: those bits as :func:`bits` would return them, computed by the caller without reading
        the buffer (a read from a GPU is a synchronizing copy)."""
        self._initial_bits = bits(self.buffer, self.dtype) if known is None else known

    def changed(self) -> Any:
        """Boolean NumPy mask over the flat buffer of elements whose bits changed since snapshot()."""
        return bits(self.buffer, self.dtype) != self._initial_bits


# Set for the whole of a compute-sanitizer memcheck child (pytest_pipecheck.sanitizer.child_plugin): every
# array is allocated at exactly its view's extent, and each allocation is reported (name, address range)
_EXACT: list[Callable[[str, Any, GuardedArray | None], None]] = []


# The case whose arrays a memcheck child allocates now (its label, and each tensor's dimension names), so an
# invalid access names the shape it happened at: one test launches its kernel at many
_CASE: list[tuple[str, dict[str, tuple[str, ...]]]] = []


@contextlib.contextmanager
def exact_case(label: str, dims: Mapping[str, Sequence[str]]) -> Iterator[None]:
    """Label the allocations made inside (``kernel at M129-N65-K200``) with the case and the tensors' dims."""
    _CASE.append((label, {k: tuple(v) for k, v in dims.items()}))
    try:
        yield
    finally:
        _CASE.pop()


def current_case() -> tuple[str, dict[str, tuple[str, ...]]] | None:
    """(label, {tensor: dims}) of the innermost :func:`exact_case`, or None."""
    return _CASE[-1] if _CASE else None


def allocate_exactly(report: Callable[[str, Any, GuardedArray | None], None] | None) -> None:
    """From now on in this process, allocate each array at exactly its view's extent, without guard bands
    (:func:`pytest_pipecheck.model.layouts.placement` with ``exact``), and call ``report(name, buffer,
    guarded)`` for each allocation; None goes back to guarded allocations.

    memcheck sees a read past a tensor only where nothing valid lies past it: a guard band is valid
    memory. The checks judged in such a child then see no guard band (memcheck judges the accesses)."""
    _EXACT[:] = [report] if report is not None else []


def allocated_exactly(label: str, tensor: Any) -> bool:
    """Whether allocations stay as they are in this process (:func:`allocate_exactly`); if so, ``tensor``
    (an allocation pipecheck intercepted but does not place, named ``label``) is reported."""
    if not _EXACT:
        return False
    _EXACT[0](label, tensor, None)
    return True


def alloc_guarded(name: str, shape: Sequence[int], dtype: str, *, role: str, backend: str = "torch",
                  device: str = "cpu", values: Any = None, tiles: Sequence[int] | None = None,
                  poison_variant: int = 0, layout: str = "padded", slot: int = 0) -> GuardedArray:
    """Allocate ``shape`` as a strided view (``layout``, default padded rows) inside a guarded flat buffer.

    ``role="output"``: the view is filled with poison (``poison_variant`` of it) and the guards with
    a finite canary.
    ``role="input"``: the view gets ``values`` (any array-like of that shape) and the guards NaN
    (a large sentinel for integers). ``tiles`` (tile extent per dim, 1 where none) sizes the
    guard after the array so that an overrun of one whole tile in every dim stays inside it.
    ``layout`` and ``slot``: see :func:`pytest_pipecheck.model.layouts.placement`. In a process that
    :func:`allocate_exactly` switched, the allocation is the view's extent, with no guard bands.
    """
    shape = tuple(int(n) for n in shape)
    exact = bool(_EXACT)
    strides, before, total = placement(shape, tiles, layout, slot, exact=exact)

    guard = _output_guard_value(dtype) if role == "output" else _input_guard_value(dtype)
    interior = poison_value(dtype, poison_variant) if role == "output" else None
    if backend == "cupy":
        import cupy

        buf = cupy.empty(total, dtype=_np_dtype_name(dtype))
        buf.fill(guard)
        itemsize = buf.itemsize
        view = cupy.lib.stride_tricks.as_strided(buf[before:], shape=shape,
                                                 strides=tuple(s * itemsize for s in strides))
        if interior is not None:
            view.view(_bits_dtype(dtype))[...] = poison_bits(dtype, poison_variant)
        else:
            view[...] = cupy.asarray(values if backend_of(values) != "torch" else to_numpy(values))
    else:
        import torch

        tdtype = getattr(torch, dtype)
        buf = torch.empty(total, dtype=tdtype, device=device)
        buf.fill_(guard)
        view = torch.as_strided(buf, shape, strides, before)
        if interior is not None:
            sized = {"uint8": torch.uint8, "uint16": torch.int16, "uint32": torch.int32, "uint64": torch.int64}
            bdt = _bits_dtype(dtype)
            view.view(sized[bdt]).fill_(_signed(poison_bits(dtype, poison_variant), bdt))
        else:
            src = values if backend_of(values) == "torch" else torch.as_tensor(values)
            view.copy_(src.to(device=device, dtype=tdtype))
    g = GuardedArray(name, dtype, shape, buf, view, before, strides, guard, backend, layout=layout)
    g.snapshot()
    if exact:
        _EXACT[0](name, buf, g)
    return g


def guard_report(g: GuardedArray, changed: Any, interior: Any) -> str | None:
    """Describe writes outside the array (before, in row padding, after); None when there are none."""
    import numpy as np

    outside = changed & ~interior
    n = int(outside.sum())
    if n == 0:
        return None
    where = np.flatnonzero(outside)
    begin = g.offset
    row_major = list(g.strides) == sorted(g.strides, reverse=True) and (not g.strides or g.strides[-1] == 1)
    if g.shape and row_major:
        end_of_view = begin + g.shape[0] * g.strides[0]
    else:
        end_of_view = begin + (sum((n - 1) * s for n, s in zip(g.shape, g.strides)) + 1 if g.size else 0)
    n_before = int((where < begin).sum())
    n_after = int((where >= end_of_view).sum())
    n_pad = n - n_before - n_after
    parts = []
    if n_before:
        parts.append(f"{n_before} before its start (first at offset {int(where[0]) - begin})")
    if n_pad:
        first = int(where[(where >= begin) & (where < end_of_view)][0]) - begin
        if len(g.shape) >= 2 and row_major:
            row_stride = g.strides[-2]
            row, col = divmod(first, row_stride)
            lead = ", ".join(str(int(i)) for i in np.unravel_index(row, g.shape[:-1]))
            parts.append(f"{n_pad} in the row padding (first just past row [{lead}], at column {col} of a "
                         f"{g.shape[-1]}-wide row)")
        else:
            parts.append(f"{n_pad} in the gaps between its elements ({g.layout} layout, strides "
                         f"{tuple(g.strides)}: strides ignored?)")
    if n_after:
        first_after = int(where[where >= end_of_view][0]) - end_of_view
        gap = "immediately after its last element" if first_after == 0 else f"{first_after} element(s) beyond it"
        parts.append(f"{n_after} past its end (the first {gap})")
    return f"{n} element(s) written outside '{g.name}': " + ", ".join(parts)


def describe_index(index: Sequence[int], dims: Sequence[str], tiles: Mapping[str, Any],
                   shape: Sequence[int]) -> str:
    """``[64, 3] (M tile 4 of 5 (last, partial 1/16), N tile 0 of 1)`` for a flat-array index.

    ``tiles`` maps a dim to its tile, or, for a dim of ``c`` copies of a dimension D side by side (``2*N``), to
    ``(D, c, tile of D)``: its element is named by copy and D's tile, ``2*N copy 1 of 2, N tile 0 of 3``
    (:attr:`pytest_pipecheck.model.spec.KernelSpec.dim_tiles` gives both)."""
    parts = []
    for i, d, n in zip(index, dims, shape):
        t = tiles.get(d)
        if isinstance(t, tuple):
            base, copies, t = t
            n //= copies
            copy, i = divmod(int(i), n) if n else (0, int(i))
            parts.append(f"{d} copy {copy} of {copies}")
            d = base
        if not t:
            continue
        parts.append(f"{d} tile {_tile_of(int(i), n, t)}")
    head = "[" + ", ".join(str(int(i)) for i in index) + "]"
    return head + (f" ({', '.join(parts)})" if parts else "")


def _tile_of(i: int, n: int, t: int) -> str:
    """``4 of 5 (last, partial 1/16)``: index ``i``'s tile along a dim of ``n`` elements in tiles of ``t``."""
    count = -(-n // t)
    k = i // t
    note = ""
    if k == count - 1 and count > 1:
        rem = n % t
        note = f" (last, partial {rem}/{t})" if rem else " (last)"
    elif count == 1 and n % t:
        note = f" (partial {n}/{t})"
    return f"{k} of {count}{note}"
