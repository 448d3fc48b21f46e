"""``python -m pytest_pipecheck inspect FILE.cu|FILE.cubin --arch sm_80,sm_90 [--json]``.

Prints, per file, architecture and kernel, what the compiled code contains: async copies, matrix
instructions, barriers, local memory and spills, the main loop and whether it overlaps copies
with matrix instructions. Exit status 0 on success, 2 on bad input (a missing file, a file with
no kernels, no disassembler, an architecture the disassembler does not know).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_arguments", "run"]

DEFAULT_ARCH = "sm_80,sm_90"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``inspect`` subcommand's arguments on ``parser``."""
    parser.add_argument("files", nargs="+", metavar="FILE", help=".cu source (compiled with nvcc) or .cubin")
    parser.add_argument(
        "--arch",
        default=DEFAULT_ARCH,
        help=f"comma-separated target architectures for .cu files (default {DEFAULT_ARCH}); "
        "a cubin is read for the architecture it was built for",
    )
    parser.add_argument("--kernel", default=None, help="only kernels whose name contains this")
    parser.add_argument(
        "-D",
        dest="defines",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="preprocessor define for .cu files (repeatable)",
    )
    parser.add_argument(
        "-I",
        dest="include_dirs",
        action="append",
        default=[],
        metavar="DIR",
        help="include directory for .cu files (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")


def _defines(items: list[str]) -> dict[str, str | int]:
    out: dict[str, str | int] = {}
    for item in items:
        name, _, value = item.partition("=")
        out[name] = value if value else 1
    return out


def _inspect_file(path: Path, archs: list[str], args: argparse.Namespace) -> list[dict[str, Any]]:
    from ..inspect import inspect_cu, inspect_cubin
    from ..results import PipecheckError

    if not path.is_file():
        raise PipecheckError(f"{path} does not exist")
    rows: list[dict[str, Any]] = []
    if path.suffix == ".cubin":
        for f in inspect_cubin(path, kernel=args.kernel):
            rows.append({"file": str(path), "arch": f.arch, **f.to_dict()})
        return rows
    if path.suffix not in (".cu", ".cuh"):
        raise PipecheckError(f"{path}: expected a .cu or .cubin file")
    for arch in archs:
        target = "sm_90a" if arch == "sm_90" else arch  # wgmma/setmaxnreg need the arch-specific target
        for f in inspect_cu(
            path,
            target,
            defines=_defines(args.defines),
            include_dirs=tuple(args.include_dirs),
            kernel=args.kernel,
        ):
            rows.append({"file": str(path), **f.to_dict(), "arch": arch})
    return rows


def _counts(table: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in sorted(table.items()))


def _render(row: dict[str, Any]) -> str:
    loop = row["main_loop"]
    overlap = "yes" if row["overlap"] else "no"
    if row["overlap"] and row["overlap_mode"] != "same loop":
        overlap += f" ({row['overlap_mode']})"
    if row["overlap_reason"]:
        overlap += f": {row['overlap_reason']}"
    if row["spills_source"] == "ptxas":
        spills = f"{row['spill_stores']} B spill stores, {row['spill_loads']} B spill loads"
    else:
        spills = "unknown (no ptxas log)"
    lines = [
        f"{row['file']}  {row['arch']}  {row['name']}",
        f"  async copies : {_counts(row['async_copies']) or 'none'}",
        f"  async stores : {_counts(row['async_stores']) or 'none'}",
        f"  matrix       : {_counts(row['mma']) or 'none'}"
        + (f" (scalar: {_counts(row['fma'])})" if row["fma"] else ""),
        f"  barriers     : {row['block_barriers']} block (BAR.SYNC/RED), {row['mbarrier_ops']} mbarrier (SYNCS), "
        f"{row['copy_commits']} commits, {row['copy_waits']} waits",
        f"  local memory : LDL x{row['local_loads']}, STL x{row['local_stores']}; spills: {spills}",
        f"  main loop    : {f'[{loop[0]:#06x}, {loop[1]:#06x}]' if loop else 'none'} ({row['loops']} loops)",
        f"  overlap      : {overlap}",
    ]
    if row["evidence"]:
        lines.append("  evidence     : " + row["evidence"][0])
        lines += [f"                 {ln}" for ln in row["evidence"][1:6]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run ``inspect`` on ``args.files``; print findings; return the exit status."""
    from ..arch import parse_arch_list
    from ..results import PipecheckError

    try:
        archs = list(parse_arch_list(str(args.arch), where="--arch"))
        rows: list[dict[str, Any]] = []
        for file in args.files:
            rows += _inspect_file(Path(file), archs, args)
    except PipecheckError as exc:
        sys.stderr.write(f"pipecheck inspect: error: {exc}\n")
        return 2
    if args.json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
    else:
        sys.stdout.write("\n\n".join(_render(r) for r in rows) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Standalone entry (``python -m pytest_pipecheck.cli.inspect``) for when no dispatcher is present."""
    parser = argparse.ArgumentParser(prog="pipecheck inspect", description=__doc__.split("\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
