"""Find a SASS disassembler (cuobjdump or nvdisasm) and run it on a cubin.

Each tool is found in the one search order of :mod:`pytest_pipecheck.toolkit`: ``PIPECHECK_CUOBJDUMP`` /
``PIPECHECK_NVDISASM``, Triton's own override variables (``TRITON_CUOBJDUMP_PATH`` /
``TRITON_NVDISASM_PATH``), the absolute ``PATH`` entries, ``CUDA_HOME`` / ``CUDA_PATH`` / ``CUDA_ROOT``,
the usual toolkit prefixes, NVIDIA's pip packages (``nvidia-cuda-cuobjdump``, ``nvidia-cuda-nvdisasm``),
and the copies Triton's wheel carries under ``triton/backends/nvidia/bin``.

A trap measured here: cuobjdump given a cubin for an architecture it does not know prints
``code for sm_99`` and nothing else, with exit status 0. :func:`disassemble` therefore compares
the listing against the kernels named in the cubin's own ELF section table and raises
:class:`UnknownArchError` instead of returning an empty listing.
"""

from __future__ import annotations

import functools
import os
import re
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .. import toolkit
from ..results import PipecheckError

__all__ = [
    "HOW_TO_GET",
    "Disassembler",
    "DisassemblerNotFound",
    "DisassemblyError",
    "UnknownArchError",
    "cubin_arch",
    "cubin_kernel_names",
    "disassemble",
    "find_disassembler",
    "known_archs",
    "require_disassembler",
]

TOOLS = ("cuobjdump", "nvdisasm")

HOW_TO_GET = (
    "install one: `pip install nvidia-cuda-cuobjdump` (or nvidia-cuda-nvdisasm), `pip install triton` "
    "(its wheel carries both), or the CUDA toolkit (put its bin/ on PATH or set CUDA_HOME); "
    "or point PIPECHECK_CUOBJDUMP / PIPECHECK_NVDISASM at the executable"
)


class DisassemblerNotFound(PipecheckError):
    """No cuobjdump or nvdisasm could be found; the message says which package provides one."""


class DisassemblyError(PipecheckError):
    """The disassembler failed on the input (not a cubin, corrupt, or another tool error)."""


class UnknownArchError(DisassemblyError):
    """The disassembler does not know the cubin's architecture (it printed no code for it)."""


@dataclass(frozen=True)
class Disassembler:
    """One located disassembler executable."""

    tool: str  # "cuobjdump" or "nvdisasm"
    path: str
    found_via: str
    version: str | None

    def describe(self) -> str:
        ver = f" (CUDA {self.version})" if self.version else ""
        return f"{self.tool}{ver} at {self.path} [{self.found_via}]"


@functools.lru_cache(maxsize=8)
def find_disassembler(prefer: tuple[str, ...] = TOOLS) -> Disassembler | None:
    """The first usable disassembler, trying the tools in ``prefer`` order; None when there is none."""
    for tool in prefer:
        if tool not in TOOLS:
            raise ValueError(f"unknown disassembler {tool!r}; expected one of {', '.join(TOOLS)}")
        found = toolkit.find_tool(tool)
        if found is not None:
            return Disassembler(tool=tool, path=found.path, found_via=found.found_via,
                                version=toolkit.tool_version(found.path))
    return None


def require_disassembler(prefer: tuple[str, ...] = TOOLS) -> Disassembler:
    """Like :func:`find_disassembler`, but raises :class:`DisassemblerNotFound` saying how to get one."""
    found = find_disassembler(prefer)
    if found is None:
        raise DisassemblerNotFound(f"no SASS disassembler ({' or '.join(prefer)}) found: {HOW_TO_GET}")
    return found


@functools.lru_cache(maxsize=8)
def known_archs(disassembler: Disassembler) -> frozenset[int] | None:
    """SM numbers the tool lists in its ``--help`` ("Allowed values"), or None when it lists none.

    cuobjdump lists them under ``--gpu-architecture``, nvdisasm under ``--binary``.
    """
    try:
        proc = subprocess.run(
            [disassembler.path, "--help"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    option = "--gpu-architecture" if disassembler.tool == "cuobjdump" else "--binary"
    text = proc.stdout
    start = text.find(option)
    if start < 0:
        return None
    m = re.search(r"Allowed values for this option:(.*?)\.\s*\n", text[start:], re.DOTALL)
    if not m:
        return None
    nums = {int(n) for n in re.findall(r"'(?:sm_|SM)(\d+)[af]?'", m.group(1))}
    return frozenset(nums) or None


# ----------------------------------------------------------------------------- ELF facts


def _elf_sections(data: bytes) -> list[tuple[str, int]]:
    """(name, type) of each section of a 64-bit little-endian ELF; [] when ``data`` is not one."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []
    try:
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
        str_off, str_size = headers[shstrndx][4], headers[shstrndx][5]
        names = data[str_off : str_off + str_size]
    except (struct.error, IndexError):
        return []
    out = []
    for name_off, sh_type, *_ in headers:
        end = names.find(b"\0", name_off)
        out.append((names[name_off:end].decode("ascii", "replace"), sh_type))
    return out


def cubin_kernel_names(data: bytes) -> list[str]:
    """Names of the functions with code in a cubin (its ``.text.<name>`` sections), in file order."""
    return [name[len(".text.") :] for name, _ in _elf_sections(data) if name.startswith(".text.")]


def cubin_arch(data: bytes) -> str | None:
    """The ``sm_XY`` a cubin was built for, from its ELF header; None when ``data`` is not a cubin.

    CUDA ELF ABI version 8 and later keep the SM number in bits 8-15 of ``e_flags``; older ones in
    bits 0-7 (checked against nvcc 13.0 output for sm_80, sm_90a and sm_120).
    """
    if len(data) < 0x34 or data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    flags = struct.unpack_from("<I", data, 0x30)[0]
    sm = (flags >> 8) & 0xFF if data[8] >= 8 else flags & 0xFF
    return f"sm_{sm}" if sm else None


# ----------------------------------------------------------------------------- running


def _run(cmd: list[str], what: str) -> str:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    except subprocess.TimeoutExpired:
        raise DisassemblyError(f"{cmd[0]} timed out after 300 s on {what}") from None
    except OSError as exc:
        raise DisassemblyError(f"could not run {cmd[0]} on {what}: {exc}") from None
    if proc.returncode != 0:
        err = " ".join((proc.stderr or proc.stdout).split()) or f"exit status {proc.returncode}"
        if re.search(r"not defined for option 'gpu-architecture'|[Uu]nsupported (GPU )?arch", err):
            raise UnknownArchError(f"{Path(cmd[0]).name} does not know the architecture of {what}: {err}")
        raise DisassemblyError(f"{Path(cmd[0]).name} failed on {what}: {err}")
    return proc.stdout


def disassemble(
    cubin: bytes | str | os.PathLike[str],
    *,
    disassembler: Disassembler | None = None,
    name: str | None = None,
) -> str:
    """SASS listing of ``cubin`` (bytes or a path) in cuobjdump's ``-sass`` or nvdisasm's format.

    Raises :class:`DisassemblerNotFound` when no tool is installed, :class:`DisassemblyError` when
    the input is not a cubin or the tool fails, and :class:`UnknownArchError` when the tool does
    not know the cubin's architecture (it prints no code for kernels the ELF says are there).
    """
    tool = disassembler or require_disassembler()
    if isinstance(cubin, (bytes, bytearray)):
        data = bytes(cubin)
        what = name or "the cubin"
    else:
        path = Path(cubin)
        what = name or str(path)
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise DisassemblyError(f"cannot read {what}: {exc.strerror or exc}") from None
    if not data.startswith(b"\x7fELF"):
        raise DisassemblyError(f"{what} is not a cubin (no ELF header)")
    arch = cubin_arch(data)
    known = known_archs(tool)
    if arch is not None and known and int(arch[3:]) not in known:
        version = f" from CUDA {tool.version}" if tool.version else ""
        listed = ", ".join(f"sm_{n}" for n in sorted(known))
        raise UnknownArchError(
            f"{tool.tool}{version} does not know {arch}, the architecture of {what} (it knows {listed}); "
            "use a disassembler from a CUDA toolkit that supports it"
        )
    with tempfile.TemporaryDirectory(prefix="pipecheck-sass-") as tmp:
        file = os.path.join(tmp, "kernel.cubin")
        with open(file, "wb") as fh:
            fh.write(data)
        if tool.tool == "cuobjdump":
            text = _run([tool.path, "-sass", file], what)
        else:
            # -c: code sections only; -hex off keeps the lines short
            text = _run([tool.path, "-c", file], what)
    kernels = cubin_kernel_names(data)
    has_code = re.search(r"^\s*/\*[0-9a-f]{4,}\*/\s+\S", text, re.MULTILINE) is not None
    if kernels and not has_code:
        version = f" from CUDA {tool.version}" if tool.version else ""
        raise UnknownArchError(
            f"{tool.tool}{version} printed no code for {what} ({arch or 'unknown arch'}, kernels: {', '.join(kernels[:3])}): "
            f"it does not know {arch}; use a disassembler from a CUDA toolkit that supports it"
        )
    return text
