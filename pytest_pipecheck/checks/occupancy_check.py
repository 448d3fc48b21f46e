"""The occupancy check: a kernel must reach a floor of blocks per SM on every target architecture.

Used as ``pipecheck.check_occupancy(...)``. The kernel's resources come from one of:

- a :class:`~pytest_pipecheck.resources.cubin.KernelResources` (its own architecture) or a mapping
  ``{arch: KernelResources}``;
- a Triton ``@triton.jit`` kernel plus the launch's ``args``, ``num_warps``, ``num_stages`` and
  constexprs: compiled ahead of time for each architecture, as the JIT would on that GPU;
- a path to a ``.cu`` file plus ``kernel=`` (compiled for each architecture);
- explicit numbers: ``threads=``, ``registers=``, ``static_smem=``, ``dynamic_smem=``.

The targets are ``arch=`` or the test's configuration (``--pipecheck-arch``, ini, marker); the floor is
``min_blocks=`` or the configuration's ``min_blocks``. A failure raises
:class:`~pytest_pipecheck.results.PipecheckFailure` with one row per architecture.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..arch import base_arch
from ..occupancy import Occupancy, format_bytes, occupancy
from ..results import CheckResult, PipecheckError, PipecheckFailure, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from ..resources.cubin import KernelResources
    from .context import CheckContext

__all__ = ["check_occupancy", "launch_or_occupancy_failure", "occupancy_table"]


def _arch_list(arch: str | Sequence[str] | None, ctx: CheckContext) -> list[str]:
    from ..arch import parse_arch_list

    return list(parse_arch_list(ctx.config.arch if arch is None else arch, where="check_occupancy(arch=...)",
                                base=True))


def _is_triton_kernel(obj: Any) -> bool:
    mod = type(obj).__module__ or ""
    return mod.startswith("triton") and hasattr(obj, "fn")


def _resources_per_arch(target: Any, archs: list[str], kernel: str | None,
                        kw: dict[str, Any]) -> dict[str, KernelResources]:
    from ..resources.cubin import KernelResources, compile_resources

    if isinstance(target, KernelResources):
        return {base_arch(target.arch): target}
    if isinstance(target, Mapping):
        out = {}
        for key, res in target.items():
            if not isinstance(res, KernelResources):
                raise PipecheckError(f"check_occupancy: value for {key!r} must be KernelResources, "
                                     f"got {type(res).__name__}")
            out[base_arch(str(key))] = res
        return out
    if _is_triton_kernel(target):
        from ..resources.triton import triton_resources

        args = kw.pop("args", None)
        if args is None:
            raise PipecheckError("check_occupancy on a Triton kernel needs args= (the launch's arguments)")
        return {a: triton_resources(target, args, arch=a, **kw) for a in archs}
    if isinstance(target, (str, os.PathLike)):
        if not kernel:
            raise PipecheckError("check_occupancy on a .cu file needs kernel= (which kernel to check)")
        out = {}
        for a in archs:
            found = compile_resources(target, a, options=kw.get("options", ()),
                                      include_dirs=kw.get("include_dirs", ()), defines=kw.get("defines"))
            if kernel not in found:
                raise PipecheckError(f"kernel {kernel!r} not found in {os.fspath(target)!r}; "
                                     f"it defines {', '.join(sorted(found)) or 'no kernels'}")
            out[a] = found[kernel]
        return out
    raise PipecheckError(f"check_occupancy: cannot read resources from {type(target).__name__}; give "
                         "KernelResources, a dict of them per arch, a Triton kernel with args=, a .cu path "
                         "with kernel=, or threads= and registers=")


def occupancy_table(rows: Sequence[Occupancy], floor: int | None) -> str:
    """One line per architecture: smem/block, registers, blocks/SM, limiter and the cliff."""
    head = (f"{'arch':<7} {'smem/block':>15} {'regs':>5} {'threads':>7} {'blocks/SM':>9}  "
            f"{'limited by':<24} distance to the cliff")
    lines = [head]
    for o in rows:
        mark = ("  <-- cannot launch" if not o.launchable else
                "  <-- below floor" if floor is not None and o.blocks_per_sm < floor else "")
        lines.append(f"{o.arch:<7} {format_bytes(o.smem):>15} {o.registers_per_thread:>5} "
                     f"{o.threads_per_block:>7} {o.blocks_per_sm:>9}  {o.limiter or '-':<24} "
                     f"{o.cliff_text(floor)}{mark}")
    return "\n".join(lines)


def check_occupancy(
    ctx: CheckContext,
    target: Any = None,
    *,
    threads: int | None = None,
    registers: int | None = None,
    static_smem: int = 0,
    dynamic_smem: int | None = None,
    arch: str | Sequence[str] | None = None,
    min_blocks: int | None = None,
    kernel: str | None = None,
    opt_in: bool = True,
    barriers: int | None = None,
    **kw: Any,
) -> CheckResult:
    """Check blocks/SM against the floor on every target architecture; record and return the result.

    Raises :class:`PipecheckFailure` (the test fails) with a per-architecture table when any
    architecture is below the floor, and :class:`PipecheckError` for unusable input (unknown arch,
    missing numbers, a kernel that does not compile).
    """
    __tracebackhide__ = True
    archs = _arch_list(arch, ctx)
    if min_blocks is None:
        floor = ctx.config.min_blocks
    else:
        import operator

        try:
            if isinstance(min_blocks, bool):
                raise TypeError
            floor = operator.index(min_blocks)  # numpy integers too
        except TypeError:
            raise PipecheckError(f"check_occupancy(min_blocks={min_blocks!r}) must be an integer >= 1") from None
    if floor < 1:
        raise PipecheckError(f"check_occupancy(min_blocks={floor}) must be >= 1 (a floor of 0 would pass a kernel "
                             "that cannot launch)")
    name = kernel or ctx.config.kernel
    rows: list[Occupancy] = []
    resources: dict[str, Any] = {}
    if target is None:
        if threads is None or registers is None:
            raise PipecheckError("check_occupancy needs a kernel (KernelResources, Triton kernel, .cu path) or "
                                 "threads= and registers=")
        for a in archs:
            rows.append(occupancy(a, threads, registers, static_smem, dynamic_smem or 0, opt_in=opt_in,
                                  barriers=1 if barriers is None else barriers))
    else:
        per_arch = _resources_per_arch(target, archs, kernel, dict(kw))
        if isinstance(target, Mapping) or type(target).__name__ == "KernelResources":
            archs = [a for a in archs if a in per_arch] or list(per_arch)
        for a in archs:
            res = per_arch[a]
            name = name or (getattr(target, "__name__", None) or res.name)
            t = threads if threads is not None else res.threads
            if t is None:
                raise PipecheckError(f"check_occupancy: give threads= for kernel {res.name!r} (its block size "
                                     "is set at the launch)")
            dyn = dynamic_smem if dynamic_smem is not None else res.dynamic_smem
            bars = barriers if barriers is not None else (1 if res.barriers is None else res.barriers)
            rows.append(occupancy(a, t, res.registers if registers is None else registers,
                                  res.static_smem + static_smem, dyn, opt_in=opt_in, barriers=bars))
            resources[a] = res.to_json()
    if name is None and _is_triton_kernel(target):
        name = getattr(getattr(target, "fn", None), "__name__", None)
    return _verdict(ctx, rows, floor, name, resources)


def _verdict(ctx: CheckContext, rows: list[Occupancy], floor: int, name: str | None,
             resources: dict[str, Any], extra: dict[str, Any] | None = None) -> CheckResult:
    __tracebackhide__ = True
    # 0 blocks/SM is a launch failure whatever the floor says
    below = [o for o in rows if o.blocks_per_sm < floor or not o.launchable]
    summary = ", ".join(f"{o.arch} {o.blocks_per_sm}" for o in rows) + f" blocks/SM (floor {floor})"
    details: dict[str, Any] = {
        "floor": floor,
        "archs": {o.arch: {**o.to_json(), "cliff": o.cliff_text(floor),
                           "smem_for_floor": o.max_smem_for_blocks(floor) if floor > 0 else None}
                  for o in rows},
        "below_floor": [o.arch for o in below],
    }
    if resources:
        details["resources"] = resources
    if extra:
        details.update(extra)
    verdict = Verdict.FAIL if below else Verdict.PASS
    result = ctx.record(CheckResult("occupancy", verdict, summary, kernel=name, details=details))
    if below:
        who = f"kernel {name!r}" if name else "kernel"
        dead = [o.arch for o in below if not o.launchable]
        why = f" (cannot launch at all on {', '.join(dead)}: 0 blocks/SM)" if dead else ""
        msg = (f"pipecheck occupancy: {who} is below the floor of {floor} blocks/SM on "
               f"{', '.join(o.arch for o in below)}{why}\n{occupancy_table(rows, floor)}")
        raise PipecheckFailure(msg, result)
    return result


def launch_or_occupancy_failure(ctx: CheckContext, launch: Callable[..., Any], *args: Any,
                                kernel: str | None = None, **kwargs: Any) -> Any:
    """Run ``launch(*args, **kwargs)``; a Triton "out of resource: shared memory" becomes the verdict.

    On a live GPU Triton raises ``triton.runtime.errors.OutOfResources`` when a kernel asks for more
    shared memory than a block may have. That is an occupancy fact, not a crash: it is recorded as a
    failing occupancy result (0 blocks/SM on the device's architecture, with the numbers) and raised
    as :class:`PipecheckFailure`. Any other exception propagates unchanged.
    """
    __tracebackhide__ = True
    try:
        return launch(*args, **kwargs)
    except Exception as exc:
        if type(exc).__name__ != "OutOfResources" or not type(exc).__module__.startswith("triton"):
            raise
        required = getattr(exc, "required", None)
        limit = getattr(exc, "limit", None)
        resource = getattr(exc, "name", "shared memory")
        device = ctx.tier.device
        arch = device.arch if device is not None else "unknown"
        floor = max(ctx.config.min_blocks, 1)
        name = kernel or ctx.config.kernel or getattr(getattr(launch, "fn", None), "__name__", None)
        detail = {"floor": floor, "archs": {arch: {"blocks_per_sm": 0, "required": required,
                                                   "limit": limit, "resource": resource}},
                  "below_floor": [arch], "triton_error": str(exc)}
        summary = f"{arch} 0 blocks/SM (floor {floor}): out of {resource}"
        result = ctx.record(CheckResult("occupancy", Verdict.FAIL, summary, kernel=name, details=detail))
        need = f"needs {format_bytes(int(required))}" if isinstance(required, int) else "needs more"
        have = f"a block may have {format_bytes(int(limit))}" if isinstance(limit, int) else ""
        raise PipecheckFailure(
            f"pipecheck occupancy: kernel {name!r} cannot launch on {arch}: out of {resource}; {need}, {have} "
            f"(0 blocks/SM, floor {floor})", result) from None
