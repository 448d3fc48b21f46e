"""How many blocks of a kernel fit on one SM, what limits them, and where the shared-memory cliffs are.

The model is the one the CUDA driver's occupancy API and the toolkit's ``cuda_occupancy.h`` use; it is
written here from the rules, not translated from the header, and the unit tests compare it with the
compiled header on thousands of random inputs per architecture. Each resource gives a separate bound
on resident blocks per SM and the smallest bound wins:

- warps: the SM's warp slots divided by the block's warps (threads rounded up to whole warps);
- registers: registers are granted per warp in fixed units; the register file is split into
  sub-partitions that each hold whole warps only, and a block is also charged for its warps rounded up
  to the sub-partition count (its per-block register budget must cover that);
- shared memory: static + dynamic + the driver's per-block reservation, rounded up to the allocation
  granularity, against the SM's shared memory as configured by the carveout; a block over the per-block
  limit (48 KB by default, the opt-in maximum when the kernel raised its limit) cannot launch at all;
- block slots: a fixed number per SM;
- barriers (9.0 and later): each block slot brings a fixed number of hardware barriers.

Zero blocks per SM means the launch would fail.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field, fields
from typing import Any

from .arch import ArchSpec, arch_spec
from .results import PipecheckError

__all__ = [
    "LIMITERS",
    "Occupancy",
    "OccupancyInputError",
    "format_bytes",
    "occupancy",
]

LIMITERS = ("warps", "registers", "shared_memory", "blocks", "barriers")

# Upper bound on a size anyone could mean: no GPU has more than a few hundred KB of shared memory
# per SM; larger values are typos (a byte count given in bits, a stride instead of a size).
_ABSURD_SMEM = 16 * 1024 * 1024


class OccupancyInputError(PipecheckError, ValueError):
    """Invalid input to the occupancy calculation; the message names the input."""


def format_bytes(n: int) -> str:
    """``115712`` -> ``"113 KB"``; ``50177`` -> ``"49 KB + 1 B"``. KB means 1024 bytes."""
    kb, rest = divmod(int(n), 1024)
    if rest == 0:
        return f"{kb} KB"
    if kb == 0:
        return f"{rest} B"
    return f"{kb} KB + {rest} B"


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _check_int(name: str, value: Any, lo: int, hi: int, why_hi: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            import operator

            value = operator.index(value)  # numpy integers
        except TypeError:
            raise OccupancyInputError(f"{name}={value!r} must be an integer") from None
    if value < lo:
        raise OccupancyInputError(f"{name}={value} must be >= {lo}")
    if value > hi:
        raise OccupancyInputError(f"{name}={value} must be <= {hi} ({why_hi})")
    return int(value)


# ----------------------------------------------------------------------------- the limits

def _warp_limit(spec: ArchSpec, warps: int) -> int:
    return spec.max_warps_per_sm // warps


def _register_limit(spec: ArchSpec, warps: int, registers: int) -> int | None:
    """Blocks allowed by the register file; None when the kernel uses no registers (no limit)."""
    per_warp = _round_up(registers * spec.warp_size, spec.register_alloc_granularity)
    if per_warp == 0:
        return None
    # the block's budget is checked for its warps as allocated and as spread over sub-partitions
    charged = per_warp * _round_up(warps, spec.warp_alloc_granularity)
    if charged > spec.registers_per_block or per_warp * warps > spec.registers_per_block:
        return 0
    warps_per_partition = (spec.registers_per_sm // spec.sub_partitions) // per_warp
    return (warps_per_partition * spec.sub_partitions) // warps


def _carveout_size(spec: ArchSpec, size: int) -> int | None:
    """The smallest configurable shared-memory size that holds ``size`` bytes (None: none does)."""
    for kb in spec.carveouts_kb:
        if kb * 1024 >= size:
            return kb * 1024
    return None


def _smem_per_sm(spec: ArchSpec, allocated: int, carveout: int | None) -> int:
    """Shared memory the SM is configured with when running blocks of ``allocated`` bytes."""
    preferred = spec.smem_per_sm if carveout is None else carveout * spec.smem_per_sm // 100
    preferred_cfg = _carveout_size(spec, preferred)
    if preferred_cfg is None:  # pragma: no cover - the table's smem_per_sm is always a carveout
        preferred_cfg = spec.smem_per_sm
    if preferred_cfg >= allocated:
        return preferred_cfg
    # the driver grows the carveout to fit one block (the per-block check ran before)
    grown = _carveout_size(spec, allocated)
    return grown if grown is not None else spec.smem_per_sm


def _smem_block_limit(spec: ArchSpec, opt_in: bool) -> int:
    """Largest static+dynamic+reserved bytes one block may use."""
    limit = spec.smem_per_block_optin if opt_in else spec.smem_per_block
    return limit + spec.smem_reserved_per_block


def _smem_limit(spec: ArchSpec, total: int, opt_in: bool, carveout: int | None) -> tuple[int | None, int]:
    """(blocks allowed by shared memory or None for unlimited, bytes allocated per block)."""
    allocated = _round_up(total + spec.smem_reserved_per_block, spec.smem_alloc_granularity)
    if allocated > _smem_block_limit(spec, opt_in):
        return 0, allocated
    if allocated == 0:
        return None, 0
    return _smem_per_sm(spec, allocated, carveout) // allocated, allocated


def _barrier_limit(spec: ArchSpec, barriers: int) -> int | None:
    if not spec.barrier_limit_applies or barriers == 0:
        return None
    return spec.max_blocks_per_sm * spec.barriers_per_block_slot // barriers


def _min_blocks(limits: dict[str, int | None]) -> int:
    bounded = [v for v in limits.values() if v is not None]
    return min(bounded) if bounded else 0


# ----------------------------------------------------------------------------- the result

@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per SM of one kernel configuration on one architecture, and why.

    ``limits`` maps each resource in :data:`LIMITERS` to the blocks it alone would allow (None: that
    resource sets no limit, e.g. a kernel using no shared memory on sm_70, or barriers before sm_90).
    ``smem_up`` is the largest static+dynamic shared memory per block at which one more block per SM
    would fit (None when another resource forbids it); ``smem_down`` is the smallest at which a block
    per SM would be lost (None at zero blocks).
    """

    arch: str
    threads_per_block: int
    registers_per_thread: int
    static_smem: int
    dynamic_smem: int
    opt_in: bool
    carveout: int | None
    barriers: int
    blocks_per_sm: int
    warps_per_block: int
    active_warps: int
    occupancy: float
    limiters: frozenset[str]
    limits: dict[str, int | None] = field(hash=False)
    smem_per_block_allocated: int
    registers_per_block_allocated: int
    smem_up: int | None
    smem_down: int | None

    @property
    def smem(self) -> int:
        """Static plus dynamic shared memory per block, as the kernel asks for it (no reservation)."""
        return self.static_smem + self.dynamic_smem

    @property
    def launchable(self) -> bool:
        return self.blocks_per_sm > 0

    @property
    def limiter(self) -> str:
        """The limiting resources joined with ``+`` in a fixed order (``"registers+shared_memory"``)."""
        return "+".join(n for n in LIMITERS if n in self.limiters)

    def max_smem_for_blocks(self, blocks: int) -> int | None:
        """Largest static+dynamic shared memory per block giving at least ``blocks`` blocks/SM.

        None when no amount of shared memory reaches ``blocks`` (another resource forbids it).
        """
        return _max_smem_for(arch_spec(self.arch), self, blocks)

    def max_registers_for_blocks(self, blocks: int) -> int | None:
        """Largest registers/thread giving at least ``blocks`` blocks/SM from the register file alone."""
        spec = arch_spec(self.arch)
        for regs in range(spec.max_registers_per_thread, -1, -1):
            lim = _register_limit(spec, self.warps_per_block, regs)
            if lim is None or lim >= blocks:
                return regs
        return None

    def cliff_text(self, floor: int | None = None) -> str:
        """The distance to the shared-memory cliff in words.

        With ``floor``: ``"needs <= 113 KB for 2 blocks/SM on sm_90; uses 128 KB"``. Without: the
        cliffs either side of the current count.
        """
        uses = format_bytes(self.smem)
        if floor is not None:
            if floor <= 0:
                return f"any size fits {floor} blocks/SM on {self.arch}; uses {uses}"
            need = self.max_smem_for_blocks(floor)
            if need is None:
                other = self._blocking(floor)
                return f"cannot reach {floor} blocks/SM on {self.arch} at any shared memory size ({other})"
            return f"needs <= {format_bytes(need)} for {floor} blocks/SM on {self.arch}; uses {uses}"
        parts = []
        if self.smem_up is not None:
            parts.append(f"<= {format_bytes(self.smem_up)} for {self.blocks_per_sm + 1} blocks/SM")
        if self.smem_down is not None:
            parts.append(f">= {format_bytes(self.smem_down)} drops to {self.blocks_per_sm - 1} blocks/SM")
        if not parts:
            return f"uses {uses} on {self.arch}; no shared-memory cliff in reach"
        return f"uses {uses} on {self.arch}; " + ", ".join(parts)

    def _blocking(self, floor: int) -> str:
        names = []
        for name in ("warps", "registers", "blocks", "barriers"):
            lim = self.limits[name]
            if lim is not None and lim < floor:
                names.append(f"{name} allow {lim}")
        if self.limits["registers"] is not None and self.limits["registers"] < floor:
            regs = self.max_registers_for_blocks(floor)
            if regs is not None:
                names.append(f"needs <= {regs} registers/thread, uses {self.registers_per_thread}")
        return "; ".join(names) or "per-block limit"

    def to_json(self) -> dict[str, Any]:
        """Every field in its order but ``warps_per_block``; the limiters as a list in :data:`LIMITERS` order."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "warps_per_block"}
        data["limiters"] = sorted(self.limiters, key=LIMITERS.index)
        data["limits"] = dict(self.limits)
        return data


def _max_smem_for(spec: ArchSpec, occ: Occupancy, blocks: int) -> int | None:
    """Largest static+dynamic bytes whose shared-memory bound (and the others) allow ``blocks``."""
    if blocks <= 0:
        return _smem_block_limit(spec, occ.opt_in) - spec.smem_reserved_per_block
    others = [occ.limits[n] for n in ("warps", "registers", "blocks", "barriers")]
    if any(v is not None and v < blocks for v in others):
        return None

    def fits(total: int) -> bool:
        lim, _ = _smem_limit(spec, total, occ.opt_in, occ.carveout)
        return lim is None or lim >= blocks

    if not fits(0):
        return None
    # The bound never grows with the size (a carveout step is at most twice the previous one, so a
    # block that outgrows the preferred carveout runs alone), so a binary search finds the last fit.
    hi_total = _smem_block_limit(spec, occ.opt_in) - spec.smem_reserved_per_block
    lo, hi = 0, max(hi_total, 0)
    if fits(hi):
        return hi
    # invariant: fits(lo), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def occupancy(
    arch: str | ArchSpec,
    threads_per_block: int,
    registers_per_thread: int,
    static_smem: int = 0,
    dynamic_smem: int = 0,
    *,
    opt_in: bool = True,
    carveout: int | None = None,
    barriers: int = 1,
) -> Occupancy:
    """Blocks per SM of a kernel on ``arch``, the limiting resources, and the shared-memory cliffs.

    ``opt_in`` says the kernel raised its dynamic shared-memory limit to the architecture's opt-in
    maximum (Triton does this itself; CUDA code calls ``cudaFuncSetAttribute``); without it a block is
    limited to 48 KB. ``carveout`` is the preferred shared-memory carveout in percent (None: the
    default, the most shared memory). ``barriers`` is the block barriers the kernel uses (ptxas
    "used N barriers"; the driver counts at least the one of ``__syncthreads``).

    Raises :class:`OccupancyInputError` (a :class:`PipecheckError`) naming the input for an unknown
    architecture, a block of 0 or more than 1024 threads, more registers than a thread can have, or
    negative or absurd sizes. A configuration that cannot launch is not an error: it has 0 blocks/SM.
    """
    try:
        spec = arch_spec(arch)
    except PipecheckError as exc:
        raise OccupancyInputError(str(exc)) from None
    threads = _check_int("threads_per_block", threads_per_block, 1, spec.max_threads_per_block,
                         f"the most threads a block can have on {spec.name}")
    regs = _check_int("registers_per_thread", registers_per_thread, 0, spec.max_registers_per_thread,
                      f"the most registers a thread can have on {spec.name}")
    static = _check_int("static_smem", static_smem, 0, _ABSURD_SMEM, "no GPU has that much shared memory")
    dynamic = _check_int("dynamic_smem", dynamic_smem, 0, _ABSURD_SMEM, "no GPU has that much shared memory")
    nbar = _check_int("barriers", barriers, 0, spec.max_barriers_per_block, "hardware barriers per block")
    if carveout is not None:
        carveout = _check_int("carveout", carveout, 0, 100, "a percentage")
    return _compute(spec, threads, regs, static, dynamic, bool(opt_in), carveout, nbar)


def _compute(spec: ArchSpec, threads: int, regs: int, static: int, dynamic: int, opt_in: bool,
             carveout: int | None, nbar: int) -> Occupancy:
    warps = -(-threads // spec.warp_size)
    total = static + dynamic
    smem_lim, allocated = _smem_limit(spec, total, opt_in, carveout)
    limits: dict[str, int | None] = {
        "warps": _warp_limit(spec, warps),
        "registers": _register_limit(spec, warps, regs),
        "shared_memory": smem_lim,
        "blocks": spec.max_blocks_per_sm,
        "barriers": _barrier_limit(spec, nbar),
    }
    blocks = _min_blocks(limits)
    limiters = frozenset(n for n, v in limits.items() if v is not None and v == blocks)
    per_warp_regs = _round_up(regs * spec.warp_size, spec.register_alloc_granularity)
    occ = Occupancy(
        arch=spec.name,
        threads_per_block=threads,
        registers_per_thread=regs,
        static_smem=static,
        dynamic_smem=dynamic,
        opt_in=opt_in,
        carveout=carveout,
        barriers=nbar,
        blocks_per_sm=blocks,
        warps_per_block=warps,
        active_warps=blocks * warps,
        occupancy=blocks * warps / spec.max_warps_per_sm,
        limiters=limiters,
        limits=limits,
        smem_per_block_allocated=allocated,
        registers_per_block_allocated=per_warp_regs * warps,
        smem_up=None,
        smem_down=None,
    )
    up = _max_smem_for(spec, occ, blocks + 1)
    down = None
    if blocks > 0:
        keep = _max_smem_for(spec, occ, blocks)
        # one byte more than the last size that keeps this count loses a block (past the per-block
        # limit it loses all of them)
        down = None if keep is None else keep + 1
    object.__setattr__(occ, "smem_up", up)
    object.__setattr__(occ, "smem_down", down)
    return occ


class _CallableModule(types.ModuleType):
    """Lets ``pytest_pipecheck.occupancy(...)`` work after this submodule has been imported.

    Importing ``pytest_pipecheck.occupancy`` binds the package attribute ``occupancy`` to this module,
    shadowing the package's lazy export of the function of the same name; calling the module calls
    the function, so the public spelling works in every import order.
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Occupancy:
        return occupancy(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
