"""``pipecheck resources FILE.cu``: per-kernel registers, shared memory, spills and blocks/SM per arch."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..results import PipecheckError
from .occupancy import parse_arch_list

HELP = "per-kernel registers, shared memory and spills of a .cu file for each architecture"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("source", help="CUDA C++ source file (.cu)")
    parser.add_argument("--arch", default="sm_80,sm_86,sm_89,sm_90", help="architectures, comma-separated")
    parser.add_argument("--threads", type=int, default=None, help="threads per block, for blocks/SM")
    parser.add_argument("--dynamic-smem", type=int, default=0, help="dynamic shared memory per block, bytes")
    parser.add_argument("-I", dest="include_dirs", action="append", default=[], help="include directory")
    parser.add_argument("-D", dest="defines", action="append", default=[], help="NAME or NAME=VALUE")
    parser.add_argument("--option", dest="options", action="append", default=[],
                        help="extra compiler option (repeatable)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")


def run(args: argparse.Namespace) -> int:
    from ..resources.cubin import compile_resources

    archs = parse_arch_list(args.arch)
    if not os.path.isfile(args.source):
        raise PipecheckError(f"source {args.source!r} does not exist")
    defines = dict(d.split("=", 1) if "=" in d else (d, "") for d in args.defines)
    rows: list[dict[str, Any]] = []
    for arch in archs:
        kernels = compile_resources(args.source, arch, options=args.options, include_dirs=args.include_dirs,
                                    defines=defines)
        for key, res in kernels.items():
            row: dict[str, Any] = {"kernel": key, **res.to_json()}
            if args.threads is not None:
                occ = res.occupancy(args.threads, args.dynamic_smem)
                row["threads"] = args.threads
                row["blocks_per_sm"] = occ.blocks_per_sm
                row["limiter"] = occ.limiter
                row["occupancy"] = occ.occupancy
            rows.append(row)
    if args.json:
        json.dump({"source": args.source, "archs": archs, "threads": args.threads,
                   "dynamic_smem": args.dynamic_smem, "kernels": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    head = f"{'kernel':<28} {'arch':<7} {'regs':>5} {'smem':>8} {'spill st/ld':>12} {'stack':>6} {'bar':>4}"
    if args.threads is not None:
        head += f" {'blocks/SM':>9}  limited by"
    print(head)
    for r in rows:
        line = (f"{r['kernel'][:28]:<28} {r['arch']:<7} {r['registers']:>5} {r['static_smem']:>8} "
                f"{_spill_text(r):>12} {r['stack_frame']:>6} "
                f"{'-' if r['barriers'] is None else r['barriers']:>4}")
        if args.threads is not None:
            line += f" {r['blocks_per_sm']:>9}  {r['limiter']}"
        print(line)
    return 0


def _spill_text(row: dict[str, Any]) -> str:
    """"stores/loads", or "?/?" where the numbers came from a binary that has no spill count."""
    if row["spill_stores"] is None:
        return "?/?"
    return f"{row['spill_stores']}/{row['spill_loads']}"
