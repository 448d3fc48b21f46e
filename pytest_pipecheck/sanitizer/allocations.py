"""Which tensor a memcheck finding is about: exact allocations in the memcheck child, and their address ranges.

The coverage check places every tensor inside a guarded allocation (:mod:`pytest_pipecheck.checks.arrays`).
To compute-sanitizer a guard band is valid memory: a load past a tensor that lands in it is no error, so
memcheck would miss exactly the reads whose values the kernel discards (a GEMM's A rows past M), which the
guard bands cannot show either.

Child side
    :func:`start` (called by the memcheck child's plugin) switches the child's allocations to exact ones
    (:func:`pytest_pipecheck.checks.arrays.allocate_exactly`): each array is its own allocation, from its
    view's first element to just past its last one, with the layout's strides; a torch allocation the
    wrapper form intercepts keeps torch's own (exact, with the caching allocator off in the child). Each
    allocation prints one :data:`.parse.ALLOC` line (JSON: name, address, bytes, dtype, shape, strides),
    inside the test's BEGIN/END lines, when it is made.

Parent side
    :func:`attribute` names, for each invalid access of a test that carries an address, the array it is
    past (or before): ``tensor`` says which (``past 'a'``) and ``tensor_note`` how far; the allocation the
    tool calls the nearest one when the test's ALLOC lines hold it, else the one nearest to the address; the
    latest of that test's allocations at that place, since a freed allocation's addresses are reused. All
    records of one instruction name one tensor (:func:`attribute`). The finding then reads ``reads past 'a' (ends at 0x..., read
    at 0x...+16)``, with the element the address would be by the array's strides where they say one.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .parse import ALLOC, Finding

__all__ = ["attribute", "cause", "payload", "start", "stop"]

_VERBS = {"read": "reads", "write": "writes", "atomic": "accesses"}


def payload(name: str, buffer: Any, guarded: Any = None) -> dict[str, Any] | None:
    """What one ALLOC line says of an allocation: its name and address range, and the view's dtype, shape,
    strides and offset (elements) when pipecheck placed it (``guarded``); None for an array it cannot read."""
    try:
        if hasattr(buffer, "untyped_storage"):  # torch: the whole storage is the allocation
            storage = buffer.untyped_storage()
            start, nbytes, itemsize = int(storage.data_ptr()), int(storage.nbytes()), int(buffer.element_size())
        else:  # CuPy
            start, nbytes, itemsize = int(buffer.data.ptr), int(buffer.nbytes), int(buffer.itemsize)
    except Exception:
        return None
    out: dict[str, Any] = {"name": name, "start": start, "bytes": nbytes, "itemsize": itemsize}
    from ..checks.arrays import current_case

    case = current_case()
    if case is not None:  # the check's launch this allocation is for, and the tensor's dimension names
        out["case"] = case[0]
        if name in case[1]:
            out["dims"] = list(case[1][name])
    if guarded is not None:
        out.update(dtype=guarded.dtype, shape=list(guarded.shape), strides=list(guarded.strides),
                   offset=int(guarded.offset))
    else:
        out.update(dtype=str(getattr(buffer, "dtype", "?")).replace("torch.", ""),
                   shape=[int(n) for n in getattr(buffer, "shape", ())],
                   strides=[int(s) for s in (buffer.stride() if hasattr(buffer, "stride") else ())],
                   offset=int(buffer.storage_offset()) if hasattr(buffer, "storage_offset") else 0)
    return out


def start(emit: Callable[[str], None]) -> None:
    """In a memcheck child: allocate every array exactly, and print an ALLOC line for each (``emit`` writes
    one marker line)."""
    from ..checks import arrays

    def report(name: str, buffer: Any, guarded: Any) -> None:
        data = payload(name, buffer, guarded)
        if data is not None:
            emit(ALLOC + json.dumps(data))

    arrays.allocate_exactly(report)


def stop() -> None:
    """Back to guarded allocations (the child's session ends)."""
    from ..checks import arrays

    arrays.allocate_exactly(None)


def _valid(a: Any) -> bool:
    return (isinstance(a, Mapping) and isinstance(a.get("name"), str) and isinstance(a.get("start"), int)
            and isinstance(a.get("bytes"), int) and a["bytes"] >= 0)


def _index(a: Mapping[str, Any], address: int) -> list[int] | None:
    """The index ``address`` would be by the array's strides (out of the shape's range past or before the
    array: ``[129, 0]``, ``[0, -83]``); None where the strides do not say one."""
    shape, strides, itemsize = a.get("shape"), a.get("strides"), a.get("itemsize")
    if not (isinstance(shape, list) and isinstance(strides, list) and isinstance(itemsize, int) and itemsize > 0
            and len(shape) == len(strides) and shape and all(isinstance(s, int) and s > 0 for s in strides)):
        return None
    off = address - a["start"]
    if off % itemsize:
        return None
    rel = off // itemsize - int(a.get("offset") or 0)
    order = sorted(range(len(shape)), key=lambda d: -strides[d])
    for outer, inner in itertools.pairwise(order):
        if strides[outer] < strides[inner] * shape[inner]:
            return None
    index = [0] * len(shape)
    for d in order:
        # before the array, toward zero: 83 elements before x[0, 0] read as x[0, -83] (the column the mask
        # misses), not as x[-1, 301] of the row before
        index[d] = rel // strides[d] if rel >= 0 else -((-rel) // strides[d])
        rel -= index[d] * strides[d]
    if rel:
        return None
    return index


def _element(a: Mapping[str, Any], address: int) -> str:
    """``: a[65, 0] by its strides`` (empty where the strides do not say)."""
    index = _index(a, address)
    return "" if index is None else f": {a['name']}[{', '.join(str(i) for i in index)}] by its strides"


def cause(f: Finding, a: Mapping[str, Any]) -> str:
    """The ``cause:`` of an invalid access past or before array ``a``: which dimension's bound the access
    does not respect, at which case (``a load of 'a' past its end at gemm at M129-N128-K64: a[129, 0] is
    M index 129 of 129; the access is not bounded (masked) on M, ...``)."""
    assert f.address is not None
    verb = {"read": "load", "write": "store"}.get(f.access or "", "access")
    past = f.address >= a["start"] + a["bytes"]
    where = f"{'past the end' if past else 'before the start'} of '{a['name']}'"
    case = f" at {a['case']}" if a.get("case") else ""
    index, shape = _index(a, f.address), a.get("shape")
    dims = a.get("dims") if isinstance(a.get("dims"), list) and len(a["dims"]) == len(shape or []) else None
    names = dims or [f"dim {d}" for d in range(len(shape or []))]
    bound = ""
    if index is not None and isinstance(shape, list):
        out = [d for d, i in enumerate(index) if not 0 <= i < shape[d]]
        if out:
            d = out[0]
            element = f"{a['name']}[{', '.join(str(i) for i in index)}]"
            bound = (f": {element} is {names[d]} index {index[d]} of {shape[d]}, so the {verb} is not bounded "
                     f"(masked) on {names[d]}{' at 0' if index[d] < 0 else ''}")
    discarded = " (whether or not its value is used: a value masked after the load was still read)" \
        if f.access == "read" else ""
    return f"a {verb} {where}{case}{bound}{discarded}"


def _note(f: Finding, a: Mapping[str, Any]) -> str:
    """``reads past 'a' (ends at 0x..., read at 0x...+16: a[65, 0] by its strides)``."""
    assert f.address is not None
    verb = _VERBS.get(f.access or "", "accesses")
    what = "read" if f.access == "read" else "written" if f.access == "write" else "accessed"
    first, end = a["start"], a["start"] + a["bytes"]
    if f.address >= end:
        return (f"{verb} past '{a['name']}' (ends at {end:#x}, {what} at {end:#x}+{f.address - end}"
                f"{_element(a, f.address)})")
    if f.address < first:
        return (f"{verb} before '{a['name']}' (starts at {first:#x}, {what} at {first:#x}-{first - f.address}"
                f"{_element(a, f.address)})")
    return (f"{verb} inside '{a['name']}' as allocated earlier in the test ({first:#x}..{end:#x}, {what} at "
            f"{first:#x}+{f.address - first}; freed since?)")


def _gap(a: Mapping[str, Any], address: int) -> int:
    """Bytes between ``address`` and allocation ``a`` (0 inside it)."""
    end = a["start"] + a["bytes"]
    if address >= end:
        return address - end
    return a["start"] - address if address < a["start"] else 0


def _inside(a: Mapping[str, Any], address: Any) -> bool:
    return bool(a["start"] <= address < a["start"] + a["bytes"])


def _instruction(f: Finding) -> tuple[Any, ...] | None:
    """Which instruction ``f`` is a record of: the kernel and the instruction's offset, or without one the
    kernel and its source line; None where neither says (a record of its own)."""
    if f.kernel is None:
        return None
    if f.pc is not None:  # with its line too: one kernel compiled for two cases may place two loads at one offset
        return (f.kernel, f.access, "pc", f.pc, f.file, f.line)
    if f.file is not None and f.line is not None:
        return (f.kernel, f.access, "line", f.file, f.line)
    return None


def _latest_nearest(address: int, candidates: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """Of ``candidates``, the one nearest ``address``; the latest at that distance (a freed allocation's
    addresses are reused)."""
    gaps = [_gap(a, address) for a in candidates]
    return candidates[len(gaps) - 1 - gaps[::-1].index(min(gaps))]


def _nearest(f: Finding, known: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The allocation one record is about on its own: the one the tool calls the nearest when the test's
    ALLOC lines hold it, else the nearest one to the address."""
    if f.nearest is not None:
        chosen = next((a for a in reversed(known) if a["start"] == f.nearest), None)
        if chosen is not None:
            return chosen
    assert f.address is not None
    return _latest_nearest(f.address, known)


def attribute(findings: Sequence[Finding], allocations: Sequence[Any]) -> None:
    """Set ``tensor`` and ``tensor_note`` of each invalid access in ``findings`` that carries an address, from
    the ALLOC payloads of the same test (see the module's docstring); the others are left alone.

    The records of one load or store instruction are about one tensor: a warp's reads that run past the end
    of 'a' into the gap before 'b' are nearer 'b''s start for their last threads, but they are the same
    instruction's reads past 'a'. So each instruction is named by its record nearest to an edge (the one
    whose address says the tensor plainest), and each of its records by the allocation of that name nearest
    to it (a test launches its kernel at several cases, each with its own allocations)."""
    known = [a for a in allocations if _valid(a)]
    if not known:
        return
    records = [f for f in findings if f.kind == "invalid_access" and f.address is not None]
    own = {id(f): _nearest(f, known) for f in records}
    groups: dict[tuple[Any, ...], list[Finding]] = {}  # instruction -> its records
    for f in records:
        key = _instruction(f)
        if key is not None:
            groups.setdefault(key, []).append(f)
    named: dict[int, str] = {}  # record -> the tensor its instruction's records are about
    for group in groups.values():
        edge = [f for f in group if not _inside(own[id(f)], f.address)] or group  # an access inside a
        # (freed) allocation says nothing of an edge; it names the instruction only when no record does
        anchor = min(edge, key=lambda f: _gap(own[id(f)], f.address))  # type: ignore[arg-type]
        named.update(dict.fromkeys(map(id, group), own[id(anchor)]["name"]))
    for f in records:
        assert f.address is not None
        name = named.get(id(f))
        chosen = own[id(f)] if name is None else _latest_nearest(f.address, [a for a in known if a["name"] == name])
        end = chosen["start"] + chosen["bytes"]
        where = "past" if f.address >= end else "before" if f.address < chosen["start"] else "inside"
        f.tensor = f"{where} '{chosen['name']}'"
        f.tensor_note = _note(f, chosen) + (f", at {chosen['case']}" if chosen.get("case") else "")
        if where != "inside":
            f.cause = cause(f, chosen)
