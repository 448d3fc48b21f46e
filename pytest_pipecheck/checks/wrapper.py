"""The wrapper form: check the user's entry point as shipped (``y = my_op(x, w)``).

A spec with ``call=my_op`` (see :class:`~pytest_pipecheck.model.spec.KernelSpec`) is checked by the same
coverage, tile-probe and determinism checks as a launcher, under the same value patterns and
layouts; only the launch differs. pipecheck allocates the inputs as usual (guarded, in the spec's
layouts: contiguous by default, values from the test's pattern), calls ``my_op(*inputs)`` (inouts
among them, each a fresh copy per call that the call updates in place) under :class:`PoisonAllocations`, a ``torch.utils._python_dispatch.TorchDispatchMode``,
and checks the tensors it returns as the outputs, in the order ``returns=`` names them.

What is intercepted
    Every torch factory op dispatched while the call runs, from the call's own code or from any
    library it uses (a C++ extension that allocates through the dispatcher, ``at::empty``, included):

    * uninitialized allocations ``aten.empty.memory_format``, ``empty_strided``, ``empty_like``,
      ``new_empty``, ``new_empty_strided``, ``empty_permuted`` (``torch.empty``, ``torch.empty_like``,
      ``x.new_empty``, ...) become a view, with the sizes and strides torch chose, into a larger
      allocation: guard bands before and after, the view filled with poison (a NaN payload for floats,
      a sentinel for integers). A contiguous request stays contiguous (``is_contiguous()`` holds).
    * initializing allocations ``zeros``, ``ones``, ``full``, their ``_like`` and ``new_`` forms are
      placed the same way with their values (not poisoned: the wrapper defined them), so a write past
      their end still trips the guard band.

    After the call, every intercepted allocation's guard bands must be intact (a write past the end of
    a scratch buffer is named by the op and the line that allocated it), and each returned output is
    checked as the spec form checks its outputs: no element may still hold poison, no write may land
    outside it, and it must match the reference.

What is not intercepted
    * allocations the Triton runtime makes itself (the interpreter's host copies, the autotuner's
      benchmark buffers): they are recognised by the caller's module and passed through untouched;
    * results of computing ops (``x + 1``, ``torch.matmul``, ``x.contiguous()`` of a non-contiguous
      ``x``): torch writes every element of them;
    * memory that does not come from a torch factory op dispatched on this thread: CuPy or NumPy
      arrays, ``at::detail::empty_*`` or the CUDA caching allocator called directly from C++ (e.g.
      ``c10::cuda::CUDACachingAllocator::raw_alloc``), ``cudaMalloc``, other threads, and allocations
      made inside a registered custom op (the op is dispatched as a whole; its outputs are torch's);
    * empty tensors, and dtypes pipecheck cannot poison (bool, complex, unsigned types wider than 8 bits).

    A returned output that was not intercepted (it aliases an input, or comes from one of the above)
    is still compared with the reference; its check details say ``allocated: not intercepted (...)``,
    because the unwritten-element check does not apply to it.

What it costs
    A launch of the wrapper form costs what the wrapper's call costs under a dispatch mode (entering
    and leaving the mode, and a C++ -> Python -> C++ round trip for every op the call dispatches, not
    only the factory ops: a dispatch mode sees them all) plus pipecheck's work per intercepted
    allocation (placing, poisoning and recording it; the spec form allocates its outputs likewise)
    and mapping what the call returned. ``benchmarks/bench_wrapper.py`` measures both parts against
    the spec form of the same kernel. The mode is reused between calls and refers to its owner only
    while active, so a finished call leaves nothing for the garbage collector.

The form needs ``backend="torch"``, on CPU (the Triton interpreter) or CUDA.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import FrameType
from typing import TYPE_CHECKING, Any

from ..model import layouts as _layouts
from ..model.shape import Shape
from ..model.spec import KernelSpec
from ..model.tensor import normalize_dtype
from . import arrays as _arr

if TYPE_CHECKING:  # pragma: no cover
    from .context import CheckContext

__all__ = ["EMPTY_OPS", "INIT_OPS", "Allocation", "PoisonAllocations", "launch"]

# op names (overloads of torch.ops.aten) that allocate without initializing, and that initialize
EMPTY_OPS = ("empty.memory_format", "empty_strided.default", "empty_like.default", "new_empty.default",
             "new_empty_strided.default", "empty_permuted.default")
INIT_OPS = ("zeros.default", "zeros_like.default", "ones.default", "ones_like.default", "full.default",
            "full_like.default", "new_zeros.default", "new_ones.default", "new_full.default")

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SIGNED = {"uint8": "uint8", "uint16": "int16", "uint32": "int32", "uint64": "int64"}


def _resolve(names: tuple[str, ...]) -> dict[Any, str]:
    import torch

    out: dict[Any, str] = {}
    for name in names:
        packet, _, overload = name.partition(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None:  # an op this torch version does not have
            out[op] = packet
    return out


@dataclass
class Allocation:
    """One intercepted allocation: the op, where it was made, and its guarded placement."""

    index: int
    op: str
    site: str
    poisoned: bool
    guarded: _arr.GuardedArray

    def describe(self) -> str:
        shape = tuple(self.guarded.shape)
        return f"allocation #{self.index} ({self.op} of {self.guarded.dtype} {shape} at {self.site})"


class _Frames:
    """Where a factory op was called from: the first frame outside torch and pipecheck."""

    def __init__(self) -> None:
        import torch

        self.skip = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep, _PKG_DIR + os.sep)
        triton = sys.modules.get("triton")
        triton_file = getattr(triton, "__file__", None)
        self.triton = os.path.dirname(os.path.abspath(triton_file)) + os.sep if triton_file else None

    def caller(self) -> tuple[str, bool]:
        """(``file:line`` of the caller, whether it is the Triton runtime)."""
        frame: FrameType | None = sys._getframe(2)
        while frame is not None:
            filename = frame.f_code.co_filename
            if not filename.startswith(self.skip):
                internal = self.triton is not None and filename.startswith(self.triton)
                return f"{filename}:{frame.f_lineno}", internal
            frame = frame.f_back
        return "<unknown>", False


def _make_mode_class() -> type:
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Mode(TorchDispatchMode):
        """See :class:`PoisonAllocations`."""

        def __init__(self) -> None:
            super().__init__()
            self.owner: PoisonAllocations | None = None  # set while a PoisonAllocations is active

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            # every op dispatched inside the call comes here: keep the path of a non-factory op short
            out = func(*args, **kwargs) if kwargs else func(*args)
            op = _OPS_GET(func)
            if op is None:
                return out
            assert self.owner is not None
            return self.owner.place(op, out)

    return _Mode


_MODE_CLASS: type | None = None
_OPS: dict[Any, tuple[str, bool]] | None = None
_OPS_GET: Any = None
_FRAMES: _Frames | None = None
# modes not in use (owner None), reused rather than built for every call; list.pop and list.append are
# atomic, so two threads never take the same one
_IDLE_MODES: list[Any] = []


@dataclass(frozen=True)
class _Fill:
    """How allocations of one torch dtype are filled: its pipecheck name, the guard value, the raw
    (unsigned) bits of the guard and of each variant's poison, and the NumPy integer dtypes of the same
    width that a host-built buffer is read as (``unsigned``, as :func:`~pytest_pipecheck.checks.arrays.bits`
    reads buffers) and handed to torch as (``signed``: torch's own unsigned types are incomplete)."""

    dtype: str
    guard: float | int
    unsigned: Any
    signed: Any
    guard_raw: int
    poison_raw: tuple[int, ...]

    def initial_bits(self, total: int, before: int, sizes: tuple[int, ...], strides: tuple[int, ...],
                     variant: int) -> Any:
        """The bits of a freshly placed, poisoned allocation (guard everywhere, poison on the view) as
        :func:`~pytest_pipecheck.checks.arrays.bits` reads them, computed on the host: snapshotting by
        reading the buffer back would synchronize with the GPU once per allocation."""
        import numpy as np

        init = np.full(total, self.guard_raw, dtype=self.unsigned)
        if tuple(strides) == _contiguous_strides(sizes):
            init[before:before + math.prod(sizes)] = self.poison_raw[variant]  # the usual case, 3x faster
        else:
            view = np.lib.stride_tricks.as_strided(init[before:], shape=sizes,
                                                   strides=tuple(s * self.unsigned.itemsize for s in strides))
            view[...] = self.poison_raw[variant]
        return init


# torch dtype -> its fill, or the reason it cannot be poisoned (computed once per dtype)
_FILLS: dict[Any, _Fill | str] = {}


def _fill_of(torch_dtype: Any) -> _Fill | str:
    fill = _FILLS.get(torch_dtype)
    if fill is None:
        import numpy as np
        import torch

        try:
            dtype = normalize_dtype(torch_dtype)
        except ValueError:
            fill = f"dtype {torch_dtype} cannot be poisoned"
        else:
            bdt = _arr._bits_dtype(dtype)
            unsigned = np.dtype(bdt)
            guard = _arr._output_guard_value(dtype)
            # bfloat16 has no NumPy type: the guard's bits come from torch, as a signed value
            guard_signed = torch.full((1,), guard, dtype=torch_dtype).view(getattr(torch, _SIGNED[bdt])).item()
            fill = _Fill(dtype, guard, unsigned, np.dtype(_SIGNED[bdt]),
                         int(guard_signed) & ((1 << (8 * unsigned.itemsize)) - 1),
                         tuple(_arr.poison_bits(dtype, v) for v in range(_arr.POISON_VARIANTS)))
        _FILLS[torch_dtype] = fill
    return fill


class PoisonAllocations:
    """A context manager: torch factory ops dispatched inside it return guarded, poisoned placements.

    ``variant`` picks the poison (0 or 1, :func:`pytest_pipecheck.checks.arrays.poison_bits`);
    ``guard_tile`` sizes the guard band after each allocation (the largest tile of the spec, so a
    store one tile past the end stays inside it). ``allocations`` lists what was intercepted;
    ``passed`` counts the factory ops left alone, by reason.
    """

    def __init__(self, variant: int = 0, guard_tile: int = 1) -> None:
        global _MODE_CLASS
        if _MODE_CLASS is None:
            _MODE_CLASS = _make_mode_class()
        self.variant = variant
        self.guard_tile = max(1, int(guard_tile))
        self.allocations: list[Allocation] = []
        self.passed: dict[str, int] = {}
        if variant not in range(_arr.POISON_VARIANTS):
            raise ValueError(f"poison variant {variant!r} must be 0 or 1")
        global _OPS, _OPS_GET, _FRAMES
        if _OPS is None:
            # op overload -> (its name, whether it leaves the memory uninitialized)
            _OPS = {**{op: (name, True) for op, name in _resolve(EMPTY_OPS).items()},
                    **{op: (name, False) for op, name in _resolve(INIT_OPS).items()}}
            _OPS_GET = _OPS.get
        if _FRAMES is None or (_FRAMES.triton is None and "triton" in sys.modules):
            _FRAMES = _Frames()  # again once triton is imported: its allocations must be recognised
        self._frames = _FRAMES
        self._mode: Any = None

    def __enter__(self) -> PoisonAllocations:
        if self._mode is not None:
            raise RuntimeError("PoisonAllocations is already active (it cannot be entered twice)")
        assert _MODE_CLASS is not None
        try:
            mode = _IDLE_MODES.pop()
        except IndexError:
            mode = _MODE_CLASS()
        # the mode refers to this object and this object to the mode only while it is active, so no
        # reference cycle outlives the call (each one would keep the call's allocations alive until the
        # garbage collector runs, and a collection costs more than the whole launch)
        mode.owner = self
        try:
            mode.__enter__()
        except BaseException:
            mode.owner = None
            _IDLE_MODES.append(mode)
            raise
        self._mode = mode
        return self

    def __exit__(self, *exc: Any) -> None:
        mode, self._mode = self._mode, None
        try:
            mode.__exit__(*exc)
        finally:
            mode.owner = None
            _IDLE_MODES.append(mode)

    def _pass(self, why: str, out: Any) -> Any:
        self.passed[why] = self.passed.get(why, 0) + 1
        return out

    def place(self, op: tuple[str, bool], out: Any) -> Any:
        """Return ``out`` placed in a guarded allocation (poisoned when ``op`` leaves memory uninitialized)."""
        import torch

        site, internal = self._frames.caller()
        if internal:
            return self._pass("made by the Triton runtime", out)
        if not isinstance(out, torch.Tensor) or out.layout != torch.strided or out.numel() == 0:
            return self._pass("empty or not a strided tensor", out)
        if _arr.allocated_exactly(f"torch.{op[0]} at {os.path.basename(site)}", out):
            return self._pass("kept at its exact size for compute-sanitizer memcheck", out)
        fill = _fill_of(out.dtype)
        if isinstance(fill, str):
            return self._pass(fill, out)
        sizes = tuple(out.shape)
        strides = out.stride()
        span = 1
        for n, st in zip(sizes, strides):
            if st < 0:
                return self._pass("negative strides", out)
            span += (n - 1) * st
        before = _layouts.GUARD_MIN
        after = _layouts.aligned(_layouts.GUARD_MIN + min(span, self.guard_tile * max(strides, default=1)))
        name, poisoned = op
        initial = None
        if poisoned:
            # the whole buffer (guards and poison) is built on the host and copied over once: one copy
            # instead of an allocation and two fills on the device, and its bits are the snapshot
            initial = fill.initial_bits(before + span + after, before, sizes, strides, self.variant)
            buf = torch.from_numpy(initial.view(fill.signed)).to(out.device, copy=True).view(out.dtype)
            view = torch.as_strided(buf, sizes, strides, before)
        else:
            buf = torch.empty(before + span + after, dtype=out.dtype, device=out.device)
            buf.fill_(fill.guard)
            view = torch.as_strided(buf, sizes, strides, before)
            view.copy_(out)
        # The record keeps its own view of the buffer, not the tensor handed back: torch detaches a
        # tensor that __torch_dispatch__ returns while Python still holds it, and that detach is one
        # more op dispatched through this mode (about a fifth of a small call's overhead).
        record = torch.as_strided(buf, sizes, strides, before)
        g = _arr.GuardedArray("", fill.dtype, sizes, buf, record, before, strides, fill.guard, "torch",
                              layout="as allocated")
        # the bits of a poisoned placement are known without reading the buffer back; an initialized
        # one holds what the factory op computed, read back once
        g.snapshot(initial)
        self.allocations.append(Allocation(len(self.allocations) + 1, f"torch.{name}", site, poisoned, g))
        return view


class ReturnMismatch(Exception):
    """The call returned something other than the spec declares (count, name, shape or dtype)."""


def _returned(spec: KernelSpec, shape: Shape, got: Any, passed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Map the call's return value to output names, checking count, shape and dtype.

    An inout named in ``returns`` must come back as the tensor the call was given (``passed``): it is
    updated in place, and that tensor is what is compared.
    """
    import torch

    names = tuple(spec.returns) if spec.returns is not None else tuple(t.name for t in spec.outputs)
    if got is None and not names:
        return {}  # an in-place call with no outputs
    if isinstance(got, Mapping):
        missing = [t.name for t in spec.outputs if t.name not in got]
        if missing:
            raise ReturnMismatch(f"the call returned a dict without {missing[0]!r} (keys: "
                                 f"{', '.join(map(str, got)) or 'none'})")
        values = {t.name: got[t.name] for t in spec.outputs}
    else:
        items = list(got) if isinstance(got, (tuple, list)) else [got]
        if len(items) != len(names):
            raise ReturnMismatch(f"the call returned {len(items)} value(s), but returns= names {len(names)} "
                                 f"({', '.join(str(n) for n in names)})")
        values = {n: v for n, v in zip(names, items) if n is not None}
    for t in spec.inputs:
        if t.name not in values or passed is None:
            continue
        v = values.pop(t.name)
        if not isinstance(v, torch.Tensor) or _storage(v) != _storage(passed[t.name]):
            raise ReturnMismatch(f"the call returned a new {type(v).__name__} for inout {t.name!r}; returns= names an "
                                 "inout only when the call returns the tensor it updated in place")
    for t in spec.outputs:
        v = values[t.name]
        if not isinstance(v, torch.Tensor):
            raise ReturnMismatch(f"the call returned {type(v).__name__} for output {t.name!r}, not a torch tensor")
        want = spec.shape_of(t, shape)
        if tuple(v.shape) != want:
            raise ReturnMismatch(f"the call returned {t.name!r} with shape {tuple(v.shape)}, but the spec declares "
                                 f"{want} = ({', '.join(t.dims)}) at {shape}")
        fill = _fill_of(v.dtype)
        dt = fill.dtype if isinstance(fill, _Fill) else _dtype_name(v.dtype)
        if dt != t.dtype:
            raise ReturnMismatch(f"the call returned {t.name!r} as {dt}, but the spec declares {t.dtype}")
    return values


def _dtype_name(torch_dtype: Any) -> str:
    try:
        return normalize_dtype(torch_dtype)
    except ValueError:
        return str(torch_dtype)


def _storage(t: Any) -> int:
    return int(t.untyped_storage().data_ptr())


def _output(name: str, value: Any, dtype: str, mode: PoisonAllocations,
            inputs: Mapping[str, _arr.GuardedArray]) -> _arr.GuardedArray:
    """The GuardedArray checked for a returned output: its intercepted allocation, or a bare stand-in."""
    ptr = _storage(value)
    for a in mode.allocations:
        if _storage(a.guarded.buffer) == ptr:
            note = f"{a.op} at {a.site}" + (", poisoned" if a.poisoned else ", initialized by the wrapper") + \
                ", guarded"
            r = a.guarded
            # built directly (dataclasses.replace and copy.copy both cost several times as much), sharing
            # the allocation's buffer and its snapshot; the allocation keeps its own record
            unpoisoned = "" if a.poisoned else (f"{a.op} in the call at {a.site}: initialized by the wrapper, so an "
                                                "element the kernel never wrote keeps that value")
            return _arr.GuardedArray(name, r.dtype, r.shape, r.buffer, value, r.offset, r.strides, r.guard_value,
                                     r.backend, r.layout, note, r._initial_bits, unpoisoned)
    aliased = [n for n, g in inputs.items() if _storage(g.buffer) == ptr]
    why = f"it aliases input {aliased[0]!r}" if aliased else "not made by an intercepted torch factory op"
    flat = value.detach().reshape(-1).clone()
    stand_in = _arr.GuardedArray(name, dtype, tuple(int(n) for n in value.shape), flat, value, 0,
                                 _contiguous_strides(value.shape), 0, "torch", layout="as returned",
                                 note=f"not intercepted ({why}): no poison or guard check, compared only",
                                 unpoisoned=f"not intercepted ({why}): compared only")
    stand_in.snapshot()
    return stand_in


def _contiguous_strides(shape: Any) -> tuple[int, ...]:
    out: list[int] = []
    acc = 1
    for n in reversed(tuple(int(n) for n in shape)):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))


def launch(ctx: CheckContext, spec: KernelSpec, shape: Shape, inputs: Mapping[str, _arr.GuardedArray],
           extra: Mapping[str, Any], what: str, check: str, poison: int = 0,
           pattern: Any = None) -> dict[str, _arr.GuardedArray]:
    """Call ``spec.call`` on the inputs under :class:`PoisonAllocations`; return its outputs as GuardedArrays.

    ``inputs`` holds every input and inout (the caller's fresh copy of each inout, which the call
    updates in place), in the layouts the check chose; ``pattern`` (the value pattern, for messages)
    names the inputs' values where a failure is reported.

    A raising call, a return value that does not match the spec, and a write outside any intercepted
    allocation the call did not return (a scratch buffer) are PipecheckFailures recorded under
    ``check``; writes outside a returned output are left to the coverage check, as in the spec form.
    """
    __tracebackhide__ = True
    device = ctx.device
    # guard bands as wide as the largest extent one program reaches (every tile size, blocks per program,
    # through the dimension expressions: 2*N reaches two N tiles)
    reach = [*spec.guard_tiles.values(), *(g for t in spec.tensors for g in spec.axis_guard_tiles(t))]
    mode = PoisonAllocations(poison, max(reach, default=1))
    args = [inputs[t.name].array for t in spec.inputs]
    assert spec.call is not None
    try:
        with mode:
            got = spec.call(*args, **extra)
        _arr.synchronize(spec.backend, device)
        values = _returned(spec, shape, got, {t.name: inputs[t.name].array for t in spec.inputs if t.is_inout})
    except Exception as exc:
        from .failures import raised as _raised

        _raised(ctx, spec, shape, exc, what, check, who="the call", pattern=pattern)
    outputs = {t.name: _output(t.name, values[t.name], t.dtype, mode, inputs) for t in spec.outputs}
    returned = {_storage(g.buffer) for g in outputs.values()}
    lines: list[str] = []
    for a in mode.allocations:
        if _storage(a.guarded.buffer) in returned:
            continue
        g = a.guarded
        changed = g.changed()
        if not changed.any():
            continue  # nothing in its buffer changed: no write outside it (the interior mask is not needed)
        report = _arr.guard_report(replace(g, name=a.describe()), changed, g.interior_mask())
        if report:
            lines.append(f"{report} (a store past the end of a buffer the wrapper allocated)")
    if lines:
        from .failures import fail as _fail
        from .failures import where as _where

        details = {"shape": str(shape), "allocations": [a.describe() for a in mode.allocations]}
        _fail(ctx, check, spec, f"write outside a wrapper allocation at {shape}",
              [f"{_where(spec, shape, pattern)}: during {what}, the kernel wrote outside an allocation the call made", *lines],
              details)
    return outputs
