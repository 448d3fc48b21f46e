"""Out-of-bounds accesses on the CPU tier: every load and store Triton's interpreter makes, checked against
the guarded arrays of the launch.

The coverage check places every tensor inside a guarded allocation (:mod:`.arrays`). An unmasked store
past an edge changes a canary and an unmasked load past an edge reads NaN, but a load whose value is
discarded (a GEMM whose A load drops its row mask reads rows past M; the rows of C past M are never
stored) reads the guard band, valid memory, and leaves no trace in any output. Compiled, the same load
reads whatever lies past the tensor or faults.

:func:`watch` closes that gap where kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, the CPU
tier). For the duration of one launch it wraps the interpreter builder's memory operations
(``create_masked_load`` and ``create_masked_store``, which every other load and store of the interpreter
goes through: unmasked ones, tensor descriptors, Triton 3.6's block pointers, atomic loads and stores; and
``create_atomic_rmw`` and ``create_atomic_cas``). The pointers an interpreted kernel computes are raw host
addresses of the launch's tensors; each access's addresses, on the lanes whose mask is true, are mapped
to the guarded allocation they fall in and looked up in its view's element mask. An access to an element
of the allocation that is not an element of the view (the guard bands, row padding, the gaps of a sliced
layout) is recorded with the tensor, the element's index in the view's coordinates and the kernel's
source line (the innermost frame outside Triton, NumPy and this module: the interpreter runs the kernel's
Python function). The coverage check reports each as a line of its verdict.

Every GuardedArray made while a watch is active on the thread is registered with it (the spec form's
inputs and outputs, the wrapper form's intercepted allocations); an address in no registered allocation
(memory the kernel's launcher or Triton made itself) is not judged.

The wrappers are installed on the builder class when the first watch starts and put back when the last
one ends; each access looks up the watch of its own thread, so a kernel interpreted on another thread
meanwhile is left alone. The check is vectorized: per access, a min and max over the live addresses, one
bisection among the registered allocations, and one gather from the view's element mask.
"""

from __future__ import annotations

import bisect
import itertools
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import arrays as _arr

if TYPE_CHECKING:  # pragma: no cover
    from ..model.spec import KernelSpec
    from .context import CheckContext

__all__ = ["MAX_LINES", "Finding", "Watch", "enabled_reason", "installed", "watch"]

#: findings reported in full; the rest are counted in one line
MAX_LINES = 8

_VERBS = {"read": "reads", "write": "writes", "atomic": "atomic updates"}
# the interpreter builder's methods that touch memory (every other load and store goes through them)
_METHODS = ("create_masked_load", "create_masked_store", "create_atomic_rmw", "create_atomic_cas")

_LOCAL = threading.local()
_INSTALL_LOCK = threading.Lock()
_USERS = 0
_SAVED: dict[str, Any] = {}
_BUILDER: Any = None
_SKIP_DIRS: tuple[str, ...] = ()


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def enabled_reason(ctx: CheckContext, spec: KernelSpec) -> str | None:
    """Why accesses of ``spec``'s launches cannot be checked here (None when they can).

    Only Triton's interpreter hands pipecheck every address; on the GPU tier compute-sanitizer's memcheck
    sees reads past a tensor (its child allocates each tensor exactly: :mod:`pytest_pipecheck.sanitizer`).
    """
    if ctx.device != "cpu" or spec.backend != "torch":
        return "kernels run compiled on this tier"
    if not _interpreting():
        return "TRITON_INTERPRET is not set: no interpreted kernel to watch"
    try:
        import triton.runtime.interpreter  # noqa: F401
    except ImportError:
        return "Triton is not installed"
    return None


# ----------------------------------------------------------------------------- registered allocations


@dataclass
class _Region:
    """One guarded allocation: its address range, element size and the mask of its view's elements."""

    g: _arr.GuardedArray  # kept alive: its memory cannot be reused by another allocation during the watch
    start: int
    end: int
    itemsize: int
    _interior: Any = None

    @property
    def interior(self) -> Any:
        if self._interior is None:
            self._interior = self.g.interior_mask()
        return self._interior


def _address_range(g: _arr.GuardedArray) -> tuple[int, int, int] | None:
    """(first byte, one past the last byte, element size) of ``g``'s flat buffer; None off the host."""
    buf = g.buffer
    if _arr.backend_of(buf) != "torch" or buf.device.type != "cpu":
        return None
    start = int(buf.data_ptr())
    itemsize = int(buf.element_size())
    return start, start + int(buf.numel()) * itemsize, itemsize


# ----------------------------------------------------------------------------- findings


@dataclass
class Finding:
    """Accesses of one kind, at one source line, to elements of one allocation that are not in its view."""

    region: _Region
    kind: str  # read, write, atomic
    site: str  # file:line of the kernel
    count: int = 0
    first: tuple[int, ...] | None = None  # index in the view's coordinates (None: strides not nested)
    first_offset: int = 0  # elements from the view's first element
    first_gap: int = 0  # elements past ``first`` (not 0 in a gap between two elements of the innermost dim)
    classes: dict[str, int] = field(default_factory=dict)  # before / after / padding -> lanes
    low: dict[int, int] = field(default_factory=dict)  # dim -> lowest index out of its range
    high: dict[int, int] = field(default_factory=dict)  # dim -> highest index out of its range


def _nested_order(shape: Sequence[int], strides: Sequence[int]) -> list[int] | None:
    """Dims from the largest stride to the smallest when each stride spans the dims inside it (every
    layout pipecheck places): then an element offset has one index per dim; else None."""
    if any(s <= 0 for s in strides):
        return None
    order = sorted(range(len(shape)), key=lambda d: -strides[d])
    for outer, inner in itertools.pairwise(order):
        if strides[outer] < strides[inner] * shape[inner]:
            return None
    return order


class Watch:
    """The accesses of one launch: the allocations registered with it and what fell outside their views."""

    def __init__(self, spec: KernelSpec | None = None, active: bool = True, why: str | None = None) -> None:
        self.spec = spec
        self.active = active
        #: why nothing is checked (``active`` False)
        self.why = why
        #: accesses checked, and the lanes of them that were live (mask true)
        self.accesses = 0
        self.lanes = 0
        self._regions: list[_Region] = []
        self._starts: list[int] = []
        self._by_buffer: dict[int, _Region] = {}
        self._findings: dict[tuple[int, str, str], Finding] = {}

    # -- allocations

    def register(self, g: _arr.GuardedArray) -> None:
        """Judge accesses to ``g``'s allocation from now on (a later array on the same buffer names it)."""
        where = _address_range(g)
        if where is None:
            return
        start, end, itemsize = where
        known = self._by_buffer.get(start)
        if known is not None:
            if g.name and not known.g.name:
                known.g = g  # the wrapper form names an intercepted allocation once the call returned it
            return
        region = _Region(g, start, end, itemsize)
        i = bisect.bisect_left(self._starts, start)
        self._starts.insert(i, start)
        self._regions.insert(i, region)
        self._by_buffer[start] = region

    # -- accesses

    def access(self, ptrs: Any, mask: Any, kind: str) -> None:
        """Check one access: ``ptrs`` the interpreter's pointer handle, ``mask`` its mask (None: every lane)."""
        import numpy as np

        addrs = getattr(ptrs, "data", None)
        if not isinstance(addrs, np.ndarray) or addrs.dtype != np.uint64 or not self._regions:
            return
        self.accesses += 1
        if mask is not None:
            live = mask.data if isinstance(getattr(mask, "data", None), np.ndarray) else np.asarray(mask)
            if live.shape != addrs.shape:
                live = np.broadcast_to(live, addrs.shape)
            if not live.all():
                addrs = addrs[live.astype(bool, copy=False)]
        addrs = addrs.reshape(-1)
        if addrs.size == 0:
            return
        self.lanes += int(addrs.size)
        width = _access_width(ptrs)
        lo = int(addrs.min())
        hi = int(addrs.max())
        i = bisect.bisect_right(self._starts, lo) - 1
        if i >= 0 and hi < self._regions[i].end:
            self._check_region(self._regions[i], addrs, width, kind)
            return
        # the lanes reach several allocations (or memory pipecheck did not allocate): one group each
        starts = np.asarray(self._starts, dtype=np.uint64)
        which = np.searchsorted(starts, addrs, side="right").astype(np.int64) - 1
        for j in np.unique(which):
            if j < 0:
                continue
            region = self._regions[int(j)]
            group = addrs[which == j]
            group = group[group < np.uint64(region.end)]
            if group.size:
                self._check_region(region, group, width, kind)

    def _check_region(self, region: _Region, addrs: Any, width: int, kind: str) -> None:
        import numpy as np

        offsets = addrs - np.uint64(region.start)
        elems = offsets // np.uint64(region.itemsize)
        inside = region.interior[elems]
        if width > region.itemsize:  # a wider access than the element (a reinterpreting pointer): its last byte too
            last = np.minimum((offsets + np.uint64(width - 1)) // np.uint64(region.itemsize),
                              np.uint64(region.interior.shape[0] - 1))
            inside &= region.interior[last]
        if inside.all():
            return
        bad = elems[~inside].astype(np.int64)
        self._record(region, bad, kind)

    def _record(self, region: _Region, elems: Any, kind: str) -> None:
        import numpy as np

        site = _kernel_site()
        key = (region.start, kind, site)
        finding = self._findings.get(key)
        if finding is None:
            finding = self._findings[key] = Finding(region, kind, site)
        g = region.g
        rel = elems - g.offset
        finding.count += int(rel.size)
        order = _nested_order(g.shape, g.strides)
        if order is None:  # strides that overlap or repeat (a broadcast): where, as an offset only
            if not finding.classes:
                finding.first_offset = int(rel[0])
            last = sum((n - 1) * s for n, s in zip(g.shape, g.strides))
            for name, n in (("before", int((rel < 0).sum())), ("after", int((rel > last).sum()))):
                if n:
                    finding.classes[name] = finding.classes.get(name, 0) + n
            rest = int(rel.size) - int((rel < 0).sum()) - int((rel > last).sum())
            if rest:
                finding.classes["padding"] = finding.classes.get("padding", 0) + rest
            return
        idx, rem = _index(rel, g.shape, g.strides, order)
        shape = np.asarray(g.shape, dtype=np.int64)
        out = (idx < 0) | (idx >= shape)
        if finding.first is None:
            finding.first = tuple(int(v) for v in idx[0])
            finding.first_offset = int(rel[0])
            finding.first_gap = int(rem[0])
        outer = order[0] if order else None
        if outer is None:  # a 0-d tensor: one element
            before = rel < 0
            after = rel > 0
        else:
            before = idx[:, outer] < 0
            after = idx[:, outer] >= shape[outer]
        padding = ~before & ~after
        for name, sel in (("before", before), ("after", after), ("padding", padding)):
            n = int(sel.sum())
            if n:
                finding.classes[name] = finding.classes.get(name, 0) + n
        for d in range(len(g.shape)):
            col = idx[out[:, d], d]
            if col.size:
                lo, hi = int(col.min()), int(col.max())
                finding.low[d] = min(lo, finding.low.get(d, lo))
                finding.high[d] = max(hi, finding.high.get(d, hi))

    # -- report

    @property
    def findings(self) -> list[Finding]:
        """What fell outside a view, in the order first seen."""
        return list(self._findings.values())

    def lines(self) -> list[str]:
        """One line per finding (at most :data:`MAX_LINES`, then a count of the rest), for the coverage verdict."""
        found = self.findings
        out = [_describe(f, self.spec) for f in found[:MAX_LINES]]
        if len(found) > MAX_LINES:
            rest = found[MAX_LINES:]
            out.append(f"... and {len(rest)} more out-of-bounds access site(s) ({sum(f.count for f in rest)} "
                       "accesses)")
        return out

    def details(self) -> dict[str, Any]:
        """What the check details record: accesses checked, and each finding in short."""
        if not self.active:
            return {"checked": False, "reason": self.why}
        return {"checked": True, "accesses": self.accesses, "lanes": self.lanes,
                "findings": [{"tensor": f.region.g.name or _unnamed(f.region.g), "access": f.kind, "count": f.count,
                              "first": list(f.first) if f.first is not None else f.first_offset,
                              "where": dict(f.classes), "site": f.site} for f in self.findings]}


def _index(rel: Any, shape: Sequence[int], strides: Sequence[int], order: list[int]) -> tuple[Any, Any]:
    """(index per lane and dim, remainder per lane) of element offsets ``rel`` from the view's first
    element, dims taken from the largest stride to the smallest (``order``). A remainder is not 0 for an
    offset between two elements of the innermost dim (a gap of a sliced layout)."""
    import numpy as np

    idx = np.zeros((rel.shape[0], len(shape)), dtype=np.int64)
    rem = rel.copy()
    for d in order:
        q = rem // strides[d]  # floor: an offset before the view gets a negative outer index
        idx[:, d] = q
        rem = rem - q * strides[d]
    return idx, rem


def _access_width(ptrs: Any) -> int:
    """Bytes one lane of the access reads or writes (the pointer's element type)."""
    dtype: Any = getattr(ptrs, "dtype", None)
    while hasattr(dtype, "element_ty"):
        dtype = dtype.element_ty
    bits = getattr(dtype, "primitive_bitwidth", 8)
    return max(1, int(bits) // 8)


def _unnamed(g: _arr.GuardedArray) -> str:
    return f"an allocation of the call ({g.dtype} {tuple(g.shape)})"


def _tensor(g: _arr.GuardedArray, spec: KernelSpec | None) -> Any:
    """The spec's tensor ``g`` was made for (None: unnamed, or not one of the spec's)."""
    if spec is None or not g.name:
        return None
    return next((t for t in spec.tensors if t.name == g.name), None)


def _label(g: _arr.GuardedArray, spec: KernelSpec | None) -> str:
    if not g.name:
        return _unnamed(g)
    t = _tensor(g, spec)
    kind = "tensor" if t is None else "inout" if t.is_inout else "output" if t.is_output else "input"
    return f"{kind} {g.name!r}"


def _row_major(g: _arr.GuardedArray) -> bool:
    return len(g.shape) >= 2 and g.strides[-1] == 1 and list(g.strides) == sorted(g.strides, reverse=True)


def _describe(f: Finding, spec: KernelSpec | None) -> str:
    """``input 'a': 96 reads past its view (M 65..95 of 65, in the guard band after it), first at a[65, 0]
    (M tile 4 of 5 (last, partial 1/16), K tile 0 of 3), at gemm.py:42``."""
    g = f.region.g
    t = _tensor(g, spec)
    if t is not None and len(t.dims) == len(g.shape):
        dims, tiles = tuple(t.dims), spec.dim_tiles if spec is not None else {}
    else:
        dims, tiles = tuple(f"dim {d}" for d in range(len(g.shape))), {}
    padding = "in its row padding" if _row_major(g) else f"in the gaps of its {g.layout} layout"
    bands = {"before": "in the guard band before it", "after": "in the guard band after it", "padding": padding}
    kinds = set(f.classes)
    where = {frozenset({"after"}): "past its view", frozenset({"before"}): "before its view",
             frozenset({"padding"}): "past the end of its rows" if _row_major(g) else "between its elements"
             }.get(frozenset(kinds), "outside its view")
    ranges = [f"{dims[d]} {f.low[d]}" + (f"..{f.high[d]}" if f.high[d] != f.low[d] else "") + f" of {g.shape[d]}"
              for d in sorted(f.low)]
    if len(kinds) == 1:
        paren = ", ".join([*ranges, bands[kinds.pop()]])
    else:  # several places: how many lanes in each
        split = ", ".join(f"{n} {bands[k]}" for k, n in sorted(f.classes.items(), key=lambda kv: -kv[1]))
        paren = "; ".join([", ".join(ranges), split] if ranges else [split])
    if f.first is not None:
        index, sep, tile = _arr.describe_index(f.first, dims, tiles, g.shape).partition(" (")
        gap = f" + {f.first_gap} (between two elements)" if f.first_gap else ""
        first = f"{g.name}{index}{gap}{sep}{tile}"
    else:
        first = f"{f.first_offset:+d} elements from its first element"
    return f"{_label(g, spec)}: {f.count} {_VERBS[f.kind]} {where} ({paren}), first at {first}, at {f.site}"


# ----------------------------------------------------------------------------- the kernel's source line


def _kernel_site() -> str:
    """``file:line`` of the innermost frame outside Triton, NumPy and this module: the kernel's line (or
    a ``@triton.jit`` helper's) that made the access."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not filename.startswith(_SKIP_DIRS) and filename != __file__:
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown line>"


# ----------------------------------------------------------------------------- installing the wrappers


def _current() -> Watch | None:
    return getattr(_LOCAL, "watch", None)


def _wrapped(name: str, original: Any) -> Any:
    if name == "create_masked_load":
        def create_masked_load(self: Any, ptrs: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
            w = _current()
            if w is not None:
                w.access(ptrs, mask, "read")
            return original(self, ptrs, mask, *rest, **kw)
        return create_masked_load
    if name == "create_masked_store":
        def create_masked_store(self: Any, ptrs: Any, value: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
            w = _current()
            if w is not None:
                w.access(ptrs, mask, "write")
            return original(self, ptrs, value, mask, *rest, **kw)
        return create_masked_store
    if name == "create_atomic_rmw":
        def create_atomic_rmw(self: Any, op: Any, ptr: Any, val: Any, mask: Any, *rest: Any, **kw: Any) -> Any:
            w = _current()
            if w is not None:
                w.access(ptr, mask, "atomic")
            return original(self, op, ptr, val, mask, *rest, **kw)
        return create_atomic_rmw

    def create_atomic_cas(self: Any, ptr: Any, *rest: Any, **kw: Any) -> Any:
        w = _current()
        if w is not None:
            w.access(ptr, None, "atomic")
        return original(self, ptr, *rest, **kw)
    return create_atomic_cas


def _install() -> None:
    """Wrap the interpreter builder's memory operations (the first watch of the process does it)."""
    global _USERS, _BUILDER, _SKIP_DIRS
    with _INSTALL_LOCK:
        if _USERS == 0:
            import numpy
            import triton
            from triton.runtime import interpreter

            builder = interpreter.InterpreterBuilder
            _SKIP_DIRS = tuple(os.path.dirname(os.path.abspath(m.__file__ or "")) + os.sep for m in (triton, numpy))
            for name in _METHODS:
                original = builder.__dict__.get(name)
                if original is None:
                    continue  # a Triton without this operation
                _SAVED[name] = original
                setattr(builder, name, _wrapped(name, original))
            _BUILDER = builder
        _USERS += 1


def _uninstall() -> None:
    """Put the originals back when the last watch ends (a method someone else replaced since is left alone)."""
    global _USERS, _BUILDER
    with _INSTALL_LOCK:
        _USERS -= 1
        if _USERS > 0 or _BUILDER is None:
            return
        for name, original in _SAVED.items():
            current = _BUILDER.__dict__.get(name)
            if getattr(current, "__qualname__", "").startswith("_wrapped."):
                setattr(_BUILDER, name, original)
        _SAVED.clear()
        _BUILDER = None


def installed() -> bool:
    """Whether the wrappers are on the interpreter's builder now (only while a watch is active)."""
    with _INSTALL_LOCK:
        return _BUILDER is not None


@contextmanager
def watch(ctx: CheckContext, spec: KernelSpec) -> Iterator[Watch]:
    """Check every access the launches inside this block make (see the module's docstring).

    GuardedArrays made inside the block are registered as they are made; pass earlier ones to
    :meth:`Watch.register`. On the GPU tier (or without Triton's interpreter) the watch checks nothing and
    says why (``active`` False, ``why``).
    """
    why = enabled_reason(ctx, spec)
    if why is not None:
        yield Watch(spec, active=False, why=why)
        return
    w = Watch(spec)
    _install()
    previous = getattr(_LOCAL, "watch", None)
    _LOCAL.watch = w
    token = _arr.listen(w.register)
    try:
        yield w
    finally:
        _arr.unlisten(token)
        _LOCAL.watch = previous
        _uninstall()
