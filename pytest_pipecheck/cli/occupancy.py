"""``pipecheck occupancy``: blocks per SM of one kernel configuration on one or more architectures."""

from __future__ import annotations

import argparse
import json
import sys

from ..arch import parse_arch_list as _parse_arch_list
from ..occupancy import LIMITERS, Occupancy, format_bytes, occupancy
from ..results import PipecheckError

HELP = "blocks per SM, limiter and shared-memory cliffs for a kernel configuration"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", required=True, help="architectures, comma-separated (sm_86, sm_90a, 9.0, 90)")
    parser.add_argument("--threads", type=int, required=True, help="threads per block")
    parser.add_argument("--regs", type=int, required=True, help="registers per thread")
    parser.add_argument("--smem", type=int, default=0, help="dynamic shared memory per block, bytes")
    parser.add_argument("--static-smem", type=int, default=0, help="static shared memory per block, bytes")
    parser.add_argument("--barriers", type=int, default=1, help="block barriers used (default 1)")
    parser.add_argument("--carveout", type=int, default=None, help="preferred shared-memory carveout, percent")
    parser.add_argument("--no-opt-in", action="store_true",
                        help="the kernel did not raise its dynamic shared-memory limit above 48 KB")
    parser.add_argument("--min-blocks", type=int, default=None,
                        help="floor (>= 1): exit 1 when an architecture reaches fewer blocks/SM; without it, "
                             "exit 1 only where the kernel cannot launch (0 blocks/SM)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")


def parse_arch_list(text: str) -> list[str]:
    """``"sm_80,86, 9.0"`` -> ``["sm_80", "sm_86", "sm_90"]`` (the resource tables' names); raises
    :class:`~pytest_pipecheck.arch.ArchError` naming ``--arch`` and the bad name."""
    return list(_parse_arch_list(text, where="--arch", base=True))


def _row(o: Occupancy, floor: int | None) -> str:
    limit = o.limiter or "-"
    return (f"{o.arch:<7} {o.blocks_per_sm:>9} {o.occupancy:>9.0%} {limit:<26} "
            f"{format_bytes(o.smem_per_block_allocated):>14}  {o.cliff_text(floor)}")


def run(args: argparse.Namespace) -> int:
    archs = parse_arch_list(args.arch)
    if args.min_blocks is not None and args.min_blocks < 1:
        raise PipecheckError(f"--min-blocks={args.min_blocks} must be >= 1 (a floor of 0 would pass a kernel "
                             "that cannot launch)")
    results = []
    for arch in archs:
        try:
            results.append(occupancy(arch, args.threads, args.regs, args.static_smem, args.smem,
                                     opt_in=not args.no_opt_in, carveout=args.carveout,
                                     barriers=args.barriers))
        except PipecheckError as exc:
            # name the command-line flag, not the Python parameter
            msg = str(exc)
            for py, flag in (("threads_per_block", "--threads"), ("registers_per_thread", "--regs"),
                             ("dynamic_smem", "--smem"), ("static_smem", "--static-smem"),
                             ("barriers", "--barriers"), ("carveout", "--carveout")):
                msg = msg.replace(f"{py}=", f"{flag}=")
            raise PipecheckError(msg) from None
    # a configuration that cannot launch (0 blocks/SM) fails with or without a floor
    cannot_launch = [o.arch for o in results if not o.launchable]
    failed = [o.arch for o in results
              if not o.launchable or (args.min_blocks is not None and o.blocks_per_sm < args.min_blocks)]
    if args.json:
        doc = {"results": [o.to_json() for o in results], "min_blocks": args.min_blocks, "failed": failed,
               "cannot_launch": cannot_launch}
        for d, o in zip(doc["results"], results):
            if args.min_blocks is not None:
                d["smem_for_floor"] = o.max_smem_for_blocks(args.min_blocks)
            d["cliff"] = o.cliff_text(args.min_blocks)
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(f"{'arch':<7} {'blocks/SM':>9} {'occupancy':>9} {'limited by':<26} {'smem/block':>14}  cliff")
        for o in results:
            print(_row(o, args.min_blocks))
        print(f"limiters: {', '.join(LIMITERS)}; smem/block includes the reserved 1 KB on sm_80+")
        if cannot_launch:
            print(f"cannot launch (0 blocks/SM) on {', '.join(cannot_launch)}")
    return 1 if failed else 0
