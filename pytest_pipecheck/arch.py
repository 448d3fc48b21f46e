"""Per-architecture resource tables: what one SM and one block may hold on each compute capability.

The numbers come from NVIDIA's CUDA C++ Programming Guide (technical specifications per compute
capability) and the occupancy header shipped with the toolkit (``cuda_occupancy.h``); the header's
results that the tests hold the table to are in ``tests/unit/test_occupancy_oracle.py``. The occupancy
calculation (:mod:`pytest_pipecheck.occupancy`)
reads nothing but this table, so a wrong number here is a wrong verdict everywhere: on a GPU,
:func:`compare_with_device` checks the row of the live device against its reported attributes.

Names are parsed by :func:`normalize_arch`, lists of them by :func:`parse_arch_list`: ``sm_90``, ``sm_90a``, ``9.0``, ``90``
and ``compute_90`` all name compute capability 9.0. The ``a``/``f`` suffixes select arch-specific
instructions, not different resources, so they share the base row.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .results import PipecheckError

__all__ = [
    "ARCHS",
    "ArchError",
    "ArchSpec",
    "arch_spec",
    "base_arch",
    "compare_with_device",
    "known_archs",
    "normalize_arch",
    "parse_arch_list",
]

# compute capabilities with a table below, as the digits of their sm_ name
KNOWN_CC = ("70", "75", "80", "86", "87", "89", "90", "100", "103", "110", "120", "121")


class ArchError(PipecheckError, ValueError):
    """An architecture name pipecheck has no table for, or cannot parse."""


@dataclass(frozen=True)
class ArchSpec:
    """Resources of one SM and one block for a compute capability.

    Sizes are bytes; register counts are 32-bit registers. ``carveouts_kb`` are the shared-memory
    sizes (KB) the L1/shared split can be configured to; the SM's shared memory is always one of them.
    """

    major: int
    minor: int
    max_threads_per_block: int
    warp_size: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    registers_per_sm: int
    registers_per_block: int
    max_registers_per_thread: int
    # registers are handed to a warp in units of this many (per warp, not per thread)
    register_alloc_granularity: int
    # a block's warps are spread over this many sub-partitions (each 1/N of the register file);
    # a block is charged registers for its warp count rounded up to this
    warp_alloc_granularity: int
    sub_partitions: int
    smem_per_sm: int
    smem_per_block: int  # default limit without the opt-in attribute
    smem_per_block_optin: int
    smem_reserved_per_block: int  # taken by the driver from every block (sm_80+)
    smem_alloc_granularity: int
    carveouts_kb: tuple[int, ...]
    # hardware barriers per block slot; on sm_90+ the occupancy limit includes them
    barriers_per_block_slot: int
    max_barriers_per_block: int = 16

    @property
    def name(self) -> str:
        return f"sm_{self.major}{self.minor}"

    @property
    def cc(self) -> str:
        return f"{self.major}.{self.minor}"

    @property
    def max_threads_per_sm(self) -> int:
        return self.max_warps_per_sm * self.warp_size

    @property
    def barrier_limit_applies(self) -> bool:
        """Whether block barriers limit occupancy (compute capability 9.0 and later)."""
        return self.major >= 9

    def to_json(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__dataclass_fields__}
        data["carveouts_kb"] = list(self.carveouts_kb)
        data["name"] = self.name
        return data


_KB = 1024
_CARVE_70 = (0, 8, 16, 32, 64, 96)
_CARVE_75 = (32, 64)
_CARVE_100K = (0, 8, 16, 32, 64, 100)
_CARVE_164K = (0, 8, 16, 32, 64, 100, 132, 164)
_CARVE_228K = (0, 8, 16, 32, 64, 100, 132, 164, 196, 228)


# One row per compute capability. Columns: compute capability; shared memory per SM, per block with
# the opt-in attribute, and reserved by the driver per block (all KB); shared-memory allocation
# granularity (bytes); max warps and max blocks per SM; the carveouts; hardware barriers per block slot.
# Every other field is the same on all of them (see _spec).
_TABLE: tuple[tuple[str, int, int, int, int, int, int, tuple[int, ...], int], ...] = (
    # cc     smem_sm optin reserved gran warps blocks carveouts    barriers
    ("7.0",  96,     96,   0,       256, 64,   32,    _CARVE_70,   2),
    ("7.5",  64,     64,   0,       256, 32,   16,    _CARVE_75,   2),
    ("8.0",  164,    163,  1,       128, 64,   32,    _CARVE_164K, 2),
    ("8.6",  100,    99,   1,       128, 48,   16,    _CARVE_100K, 1),
    ("8.7",  164,    163,  1,       128, 48,   16,    _CARVE_164K, 1),
    ("8.9",  100,    99,   1,       128, 48,   24,    _CARVE_100K, 1),
    ("9.0",  228,    227,  1,       128, 64,   32,    _CARVE_228K, 2),
    ("10.0", 228,    227,  1,       128, 64,   32,    _CARVE_228K, 2),
    ("10.3", 228,    227,  1,       128, 64,   32,    _CARVE_228K, 2),
    ("11.0", 228,    227,  1,       128, 48,   24,    _CARVE_228K, 1),
    ("12.0", 100,    99,   1,       128, 48,   24,    _CARVE_100K, 1),
    ("12.1", 100,    99,   1,       128, 48,   24,    _CARVE_100K, 1),
)


def _spec(cc: str, smem_sm_kb: int, optin_kb: int, reserved_kb: int, gran: int, warps: int, blocks: int,
          carve: tuple[int, ...], barriers: int) -> ArchSpec:
    major, minor = (int(p) for p in cc.split("."))
    return ArchSpec(
        major=major,
        minor=minor,
        max_threads_per_block=1024,
        warp_size=32,
        max_warps_per_sm=warps,
        max_blocks_per_sm=blocks,
        registers_per_sm=65536,
        registers_per_block=65536,
        max_registers_per_thread=255,
        register_alloc_granularity=256,
        warp_alloc_granularity=4,
        sub_partitions=4,
        smem_per_sm=smem_sm_kb * _KB,
        smem_per_block=48 * _KB,
        smem_per_block_optin=optin_kb * _KB,
        smem_reserved_per_block=reserved_kb * _KB,
        smem_alloc_granularity=gran,
        carveouts_kb=carve,
        barriers_per_block_slot=barriers,
    )


# One spec per compute capability, keyed by the canonical sm_XY name.
ARCHS: dict[str, ArchSpec] = {a.name: a for a in (_spec(*row) for row in _TABLE)}


def normalize_arch(raw: str) -> str:
    """Return the canonical ``sm_XY`` / ``sm_XYa`` spelling of an architecture name.

    Accepts ``sm_90``, ``sm_90a``, ``compute_90``, ``9.0``, ``90``. Raises ValueError for anything
    that is not one of the compute capabilities pipecheck has tables for.
    """
    text = raw.strip().lower()
    m = re.fullmatch(r"(?:sm_?|compute_?)?(\d{2,3})([af]?)", text)
    if m:
        digits, suffix = m.group(1), m.group(2)
    else:
        m = re.fullmatch(r"(\d{1,2})\.(\d)([af]?)", text)
        if not m:
            raise ValueError(f"{raw!r} is not an architecture name (expected e.g. sm_90, sm_90a, 9.0 or 90)")
        digits, suffix = m.group(1) + m.group(2), m.group(3)
    if digits not in KNOWN_CC:
        known = ", ".join("sm_" + c for c in KNOWN_CC)
        raise ValueError(f"{raw!r} is not a known architecture; pipecheck knows {known}")
    return f"sm_{digits}{suffix}"


def parse_arch_list(raw: str | Iterable[str], *, where: str = "", base: bool = False) -> tuple[str, ...]:
    """The architectures a list names, canonical, in order, each once.

    ``raw`` is a string (names separated by commas and/or white space: ``"sm_80,86 9.0"``) or a
    sequence of such strings. Every name goes through :func:`normalize_arch`; ``base=True`` drops the
    ``a``/``f`` suffix (``sm_90a`` -> ``sm_90``) for callers that need only the resource table.
    Raises :class:`ArchError` for a name that is not an architecture or a list that names none; the
    message starts with ``where`` (the option, marker or argument the list came from) when given.
    """
    prefix = f"{where}: " if where else ""
    if isinstance(raw, str):
        parts = [raw]
    else:
        try:
            parts = list(raw)
        except TypeError:
            raise ArchError(f"{prefix}{raw!r} is not a list of architecture names") from None
    out: list[str] = []
    for part in parts:
        if not isinstance(part, str):
            raise ArchError(f"{prefix}{part!r} is not an architecture name (expected e.g. sm_90)")
        for name in re.split(r"[,\s]+", part.strip()):
            if not name:
                continue
            try:
                arch = normalize_arch(name)
            except ValueError as exc:
                raise ArchError(f"{prefix}{exc}") from None
            if base:
                arch = arch.rstrip("af")
            if arch not in out:
                out.append(arch)
    if not out:
        raise ArchError(f"{prefix}names no architecture (e.g. sm_80,sm_90)")
    return tuple(out)


def known_archs() -> tuple[str, ...]:
    """The canonical names of every architecture with a table, oldest first."""
    return tuple(ARCHS)


def base_arch(name: str) -> str:
    """``sm_90a`` -> ``sm_90``; raises :class:`ArchError` for an unknown name."""
    try:
        canonical = normalize_arch(str(name))
    except ValueError as exc:
        raise ArchError(str(exc)) from None
    return canonical.rstrip("af")


def arch_spec(arch: str | ArchSpec) -> ArchSpec:
    """The table row for ``arch`` (``sm_90``, ``sm_90a``, ``9.0``, ``90`` or an :class:`ArchSpec`).

    Raises :class:`ArchError` (a :class:`PipecheckError`) naming the input when it is unknown.
    """
    if isinstance(arch, ArchSpec):
        return arch
    if not isinstance(arch, str):
        raise ArchError(f"architecture {arch!r} must be a name such as 'sm_90'")
    return ARCHS[base_arch(arch)]


# Attribute names under which each backend reports a device property, mapped to our field. torch's
# get_device_properties() object uses snake_case; CuPy's getDeviceProperties() and cuda-python's
# cudaDeviceProp use the CUDA runtime's camelCase.
_DEVICE_KEYS: dict[str, tuple[str, ...]] = {
    "major": ("major",),
    "minor": ("minor",),
    "warp_size": ("warp_size", "warpSize"),
    "max_threads_per_block": ("max_threads_per_block", "maxThreadsPerBlock"),
    "max_threads_per_sm": ("max_threads_per_multi_processor", "maxThreadsPerMultiProcessor",
                           "max_threads_per_multiprocessor"),
    "max_blocks_per_sm": ("max_blocks_per_multi_processor", "maxBlocksPerMultiProcessor",
                          "max_blocks_per_multiprocessor"),
    "registers_per_sm": ("regs_per_multiprocessor", "regsPerMultiprocessor"),
    "registers_per_block": ("regs_per_block", "regsPerBlock"),
    "smem_per_sm": ("shared_memory_per_multiprocessor", "sharedMemPerMultiprocessor"),
    "smem_per_block": ("shared_memory_per_block", "sharedMemPerBlock"),
    "smem_per_block_optin": ("shared_memory_per_block_optin", "sharedMemPerBlockOptin"),
    "smem_reserved_per_block": ("reserved_shared_memory_per_block", "reservedSharedMemPerBlock"),
}


def _lookup(attributes: Any, names: tuple[str, ...]) -> Any:
    for n in names:
        if isinstance(attributes, Mapping):
            if n in attributes:
                return attributes[n]
        elif hasattr(attributes, n):
            return getattr(attributes, n)
    return None


def compare_with_device(attributes: Any, arch: str | ArchSpec | None = None) -> list[str]:
    """Compare the table with a live device's attributes; return one line per disagreement.

    ``attributes`` is a mapping or an object: ``torch.cuda.get_device_properties(i)``,
    ``cupy.cuda.runtime.getDeviceProperties(i)`` or any dict using either spelling. Attributes the
    backend does not report are not compared. ``arch`` defaults to the device's own major.minor.
    An empty list means the table agrees. Raises :class:`ArchError` if the device's compute capability
    has no table.
    """
    if arch is None:
        major, minor = _lookup(attributes, ("major",)), _lookup(attributes, ("minor",))
        if major is None or minor is None:
            raise ArchError("device attributes carry no major/minor compute capability")
        arch = f"{int(major)}.{int(minor)}"
    spec = arch_spec(arch)
    out: list[str] = []
    for field_name, keys in _DEVICE_KEYS.items():
        live = _lookup(attributes, keys)
        if live is None:
            continue
        try:
            live_value = int(live)
        except (TypeError, ValueError):
            continue
        ours = getattr(spec, field_name)
        if live_value != ours:
            out.append(f"{spec.name} {field_name}: table {ours}, device {live_value}")
    return out
