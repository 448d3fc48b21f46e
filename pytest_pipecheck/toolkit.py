"""The CUDA toolkit: where its tools and headers are, and one cached compiler for CUDA C++.

Every part of pipecheck that runs a CUDA tool (nvcc, ptxas, cuobjdump, nvdisasm, cu++filt,
compute-sanitizer) or needs a toolkit header finds it here, in one order (the first executable file
wins):

1. the variable that names the tool explicitly: ``PIPECHECK_<TOOL>`` (``PIPECHECK_NVCC``,
   ``PIPECHECK_PTXAS``, ``PIPECHECK_CUOBJDUMP``, ``PIPECHECK_NVDISASM``,
   ``PIPECHECK_COMPUTE_SANITIZER``; ``-`` and ``+`` in the name become ``_`` and ``X``), then
   Triton's own override (``TRITON_<TOOL>_PATH``) for the tools Triton also runs;
2. the absolute entries of ``PATH``, in order;
3. ``$CUDA_HOME``, ``$CUDA_PATH``, ``$CUDA_ROOT`` (absolute values only);
4. the toolkit prefixes ``/usr/local/cuda*`` (newest name first) and ``/opt/cuda``;
5. NVIDIA's pip packages in this interpreter's site-packages directories (``nvidia/<pkg>/``:
   ``nvidia/cu13`` of the CUDA 13 wheels, ``nvidia/cuda_nvcc``, ``nvidia/cuda_cuobjdump``, ...);
6. the copies Triton's wheel carries under ``triton/backends/nvidia/`` (located with
   ``importlib.util.find_spec``, never imported).

compute-sanitizer is the one exception: its pip package (``nvidia-cuda-sanitizer-api``, installed
at a tested version by pipecheck's ``sanitizer`` extra) is searched right after step 1,
before ``PATH`` and the toolkits: a newer compute-sanitizer sees more and reports fewer false
positives than the one of an older toolkit, and the version pipecheck pins is the one it was
validated with. Its order is therefore 1, 5, 2, 3, 4, 6.

In steps 3 to 6 a tool is looked for in ``<root>/bin/``; compute-sanitizer also in
``<root>/compute-sanitizer/``, where its own installer puts it. Headers (:func:`find_include_dir`)
are looked for in ``<root>/include`` of the toolkit whose nvcc was found, then of the roots of steps
3 to 5.

The working directory is never searched: not through an empty or relative ``PATH`` entry, a relative
``CUDA_HOME``, nor ``sys.path[0]`` (the working directory under ``python -m pytest``). A checkout
that ships a file named like a CUDA tool must not get it executed. Only the explicit variables of
step 1 are taken as written: the user named that file.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import importlib
import importlib.util
import os
import re
import site
import subprocess
import sysconfig
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .arch import ArchError, arch_spec, normalize_arch
from .results import PipecheckError

__all__ = [
    "COMPILE_TIMEOUT_S",
    "CompileError",
    "Compiled",
    "Tool",
    "ToolkitError",
    "candidates",
    "clear_cache",
    "compile_cuda",
    "compile_flags",
    "find_include_dir",
    "find_tool",
    "nvcc_command",
    "tool_version",
    "version_tuple",
    "which",
]

COMPILE_TIMEOUT_S = 300.0
ENV_VARS = ("CUDA_HOME", "CUDA_PATH", "CUDA_ROOT")
# tools that Triton also runs and lets the user point at with TRITON_<TOOL>_PATH
_TRITON_OVERRIDES = ("ptxas", "cuobjdump", "nvdisasm")
# where an installer puts a tool other than <root>/bin
_EXTRA_DIRS = {"compute-sanitizer": ("compute-sanitizer",)}
# tools whose pip package is searched before PATH and the toolkits (step 5 before step 2)
PIP_FIRST = frozenset({"compute-sanitizer"})


# where the search looks, for a message that says what to set
NOT_FOUND_HINT = "searched PIPECHECK_<TOOL>, PATH, CUDA_HOME/CUDA_PATH/CUDA_ROOT, /usr/local/cuda*, NVIDIA pip packages"


class ToolkitError(PipecheckError):
    """A CUDA tool is missing, or could not read its input (a missing or unreadable source file)."""


class CompileError(ToolkitError):
    """The kernel source did not compile; the message holds the compiler's output and the target."""


@dataclass(frozen=True)
class Tool:
    """One located tool: its path and the step of the search order that found it."""

    name: str
    path: str
    found_via: str


# ----------------------------------------------------------------------------- the search order


def site_dirs() -> list[str]:
    """This interpreter's installed-package directories (absolute); never ``sys.path[0]``."""
    dirs: list[str] = []
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # pragma: no cover - old virtualenv's site module
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:  # pragma: no cover
        pass
    for key in ("purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            dirs.append(path)
    out: list[str] = []
    for d in dirs:
        if os.path.isabs(d) and d not in out:
            out.append(d)
    return out


def _triton_dirs() -> list[str]:
    try:
        spec = importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [os.path.join(loc, "backends", "nvidia") for loc in spec.submodule_search_locations
            if os.path.isabs(loc)]


def roots() -> list[tuple[str, str]]:
    """Toolkit roots of steps 3 to 6, in order, as (absolute directory, how it was found)."""
    out: list[tuple[str, str]] = []
    for var in ENV_VARS:
        root = os.environ.get(var)
        if root and os.path.isabs(root):
            out.append((root, var))
    for root in [*sorted(glob.glob("/usr/local/cuda*"), reverse=True), "/opt/cuda"]:
        out.append((root, root))
    for site_dir in site_dirs():
        for hit in sorted(glob.glob(os.path.join(glob.escape(site_dir), "nvidia", "*"))):
            out.append((hit, "pip package"))
    out += [(d, "triton wheel") for d in _triton_dirs()]
    return out


def _env_name(tool: str) -> str:
    return tool.upper().replace("-", "_").replace("+", "X")


def candidates(tool: str) -> list[tuple[str, str]]:
    """Every place to look for ``tool``, in the order of this module's docstring (NVIDIA's pip package
    right after step 1 for the tools of :data:`PIP_FIRST`), as (path, how it was found). Only absolute
    paths, but the explicit variables of step 1."""
    out: list[tuple[str, str]] = [(value, var) for var, value in _explicit_variables(tool)]
    all_roots = roots()
    pip_first = tool in PIP_FIRST
    if pip_first:
        out += _in_roots(tool, [r for r in all_roots if r[1] == "pip package"])
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if entry and os.path.isabs(entry):  # "" and relative entries would search the working directory
            out.append((os.path.join(entry, tool), "PATH"))
    out += _in_roots(tool, [r for r in all_roots if not (pip_first and r[1] == "pip package")])
    return out


def _in_roots(tool: str, found: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(os.path.join(root, sub, tool), via) for root, via in found
            for sub in ("bin", *_EXTRA_DIRS.get(tool, ()))]


def _executable(path: str) -> bool:
    real = os.path.realpath(path)
    return os.path.isfile(real) and os.access(real, os.X_OK)


def _explicit_variables(tool: str) -> list[tuple[str, str]]:
    """(variable, value) of each step-1 variable set for ``tool``, in order."""
    names = [f"PIPECHECK_{_env_name(tool)}"]
    if tool in _TRITON_OVERRIDES:
        names.append(f"TRITON_{_env_name(tool)}_PATH")
    return [(var, os.environ[var]) for var in names if os.environ.get(var)]


def explicit_variable(tool: str) -> tuple[str, str] | None:
    """(variable, value) of the first step-1 variable set for ``tool``, or None."""
    found = _explicit_variables(tool)
    return found[0] if found else None


def find_tool(tool: str) -> Tool | None:
    """The first ``tool`` found in the order of this module's docstring; None when there is none.

    A variable of step 1 is taken as written: when it names no executable file the tool is not found
    (:func:`not_found_reason` says why), never silently replaced by another copy found further on."""
    explicit = explicit_variable(tool)
    if explicit is not None:
        var, value = explicit
        return Tool(tool, value, var) if _executable(value) else None
    for path, via in candidates(tool):
        if _executable(path):
            return Tool(tool, path, via)
    return None


def not_found_reason(tool: str) -> str:
    """Why :func:`find_tool` found no ``tool``: a step-1 variable naming no executable file, or nowhere."""
    explicit = explicit_variable(tool)
    if explicit is not None:
        var, value = explicit
        return f"{var}={value} is not an executable file"
    return "not on PATH, in a CUDA toolkit or in NVIDIA's pip packages"


def which(name: str) -> str | None:
    """``name`` on the absolute entries of ``PATH`` (a host tool such as ``c++filt``); unlike
    :func:`shutil.which`, never in the working directory."""
    for entry in os.environ.get("PATH", "").split(os.pathsep):
        if entry and os.path.isabs(entry) and _executable(os.path.join(entry, name)):
            return os.path.join(entry, name)
    return None


def find_include_dir(header: str) -> Path | None:
    """The ``include`` directory holding ``header`` (e.g. ``cuda_pipeline.h``): first the toolkit of
    the nvcc :func:`find_tool` finds, then the roots of steps 3 to 5; None when none has it."""
    dirs: list[str] = []
    nvcc = find_tool("nvcc")
    if nvcc is not None:
        dirs.append(str(Path(nvcc.path).resolve().parent.parent))
    dirs += [root for root, via in roots() if via != "triton wheel"]
    for root in dirs:
        include = Path(root) / "include"
        if (include / header).is_file():
            return include
    return None


def tool_version(path: str) -> str | None:
    """The version a CUDA tool prints for ``--version``: ``13.0`` from nvcc, ptxas, cuobjdump and
    nvdisasm ("release 13.0"); from compute-sanitizer ``2025.3.1`` ("Version 2025.3.1") or
    ``2026.4.0.0`` ("Version 2026.4.0.0 (build 39022338) (public-release)"); None when it does not
    run or says neither. :func:`version_tuple` makes it comparable."""
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    text = proc.stdout + proc.stderr
    m = re.search(r"release\s+(\d[\d.]*)", text) or re.search(r"Version\s+(\d[\w.]*)", text)
    return m.group(1) if m else None


def version_tuple(version: str | None) -> tuple[int, ...] | None:
    """``"2026.4.0.0"`` -> ``(2026, 4)``: the leading numeric fields, trailing zeros dropped, so that
    ``2025.3.1 < 2026.4.0`` and ``2026.4.0 == 2026.4.0.0``; None for None or a version without a
    leading number."""
    if not version:
        return None
    m = re.match(r"\s*(\d+(?:\.\d+)*)", version)
    if m is None:
        return None
    parts = [int(p) for p in m.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


# ----------------------------------------------------------------------------- compiling


@dataclass(frozen=True)
class Compiled:
    """One compiled CUDA C++ source: the cubin, the compiler's log (``ptxas -v`` included) and which
    compiler made it (``nvcc`` or ``nvrtc``)."""

    cubin: bytes
    log: str
    compiler: str
    target: str


_CACHE: dict[tuple[Any, ...], Compiled] = {}
_CACHE_LOCK = threading.Lock()


def clear_cache() -> None:
    """Forget compiled results (tests use it to measure cold compiles)."""
    with _CACHE_LOCK:
        _CACHE.clear()


def read_source(source: str | os.PathLike[str]) -> tuple[str, str, Path | None]:
    """(text, display name, path or None). A str is a path if it names a .cu-like file."""
    if isinstance(source, os.PathLike) or (isinstance(source, str) and "\n" not in source
                                            and len(source) < 4096 and source.strip().endswith(
                                                (".cu", ".cuh", ".cpp", ".cc", ".cxx"))):
        path = Path(os.fspath(source))
        if not path.is_file():
            raise ToolkitError(f"CUDA source {str(path)!r} does not exist")
        try:
            return path.read_text(), str(path), path
        except (OSError, UnicodeDecodeError) as exc:
            raise ToolkitError(f"cannot read CUDA source {str(path)!r}: {exc}") from None
    if not isinstance(source, str):
        raise ToolkitError(f"CUDA source must be a path or source text, got {type(source).__name__}")
    if not source.strip():
        raise ToolkitError("CUDA source text is empty")
    return source, "<source text>", None


def target(arch: str) -> str:
    """The canonical name of a compile target; :class:`ArchError` for one pipecheck has no table for."""
    try:
        canonical = normalize_arch(str(arch))
    except ValueError as exc:
        raise ArchError(str(exc)) from None
    arch_spec(canonical)
    return canonical


def compile_flags(options: Sequence[str], include_dirs: Sequence[str],
           defines: Mapping[str, str | int | None]) -> list[str]:
    flags = [str(o) for o in options]
    flags += [f"-I{d}" for d in include_dirs]
    for k, v in defines.items():
        flags.append(f"-D{k}" if v is None or v == "" else f"-D{k}={v}")
    return flags


def nvcc_command(nvcc: str, source: str, out: str, target: str, flags: Sequence[str]) -> list[str]:
    """The nvcc command line that builds one cubin: ``-lineinfo`` (source lines for the SASS inspector
    and compute-sanitizer) and ``-Xptxas -v`` (the resource report) always, then ``flags``."""
    return [nvcc, "-cubin", f"-arch={target}", "-lineinfo", "-Xptxas", "-v", *flags, source, "-o", out]


def compile_cuda(source: str | os.PathLike[str], arch: str, *, options: Sequence[str] = (),
                 include_dirs: Sequence[str] = (),
                 defines: Mapping[str, str | int | None] | None = None) -> Compiled:
    """Compile CUDA C++ ``source`` (a .cu path or source text) to a cubin for ``arch``.

    nvcc (found by :func:`find_tool`) when there is one, else NVRTC through cuda-python. Cached per
    (source text, path, target, flags) for the life of the process. Raises :class:`CompileError` with
    the compiler's output and the target when it does not compile, :class:`ArchError` for an unknown
    architecture, :class:`ToolkitError` for a missing source or when no compiler is available.
    """
    text, shown, path = read_source(source)
    tgt = target(arch)
    flags = compile_flags(options, include_dirs, defines or {})
    key = (hashlib.sha256(text.encode()).hexdigest(), str(path) if path else None, tgt, tuple(flags))
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    nvcc = find_tool("nvcc")
    if nvcc is not None:
        result = _compile_nvcc(nvcc.path, text, shown, path, tgt, flags)
    else:
        result = _compile_nvrtc(text, shown, path, tgt, flags)
    with _CACHE_LOCK:
        _CACHE[key] = result
    return result


def _compile_nvcc(nvcc: str, text: str, shown: str, path: Path | None, tgt: str, flags: list[str]) -> Compiled:
    with tempfile.TemporaryDirectory(prefix="pipecheck-cubin-") as tmp:
        src = path if path is not None else Path(tmp) / "kernels.cu"
        if path is None:
            src.write_text(text)
        out = Path(tmp) / "out.cubin"
        cmd = nvcc_command(nvcc, str(src), str(out), tgt, flags)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CompileError(f"nvcc did not finish compiling {shown} for {tgt} within "
                               f"{COMPILE_TIMEOUT_S:.0f} s") from None
        except OSError as exc:
            raise CompileError(f"could not run nvcc ({nvcc}) for {shown}: {exc}") from None
        log = proc.stdout + proc.stderr
        if proc.returncode != 0 or not out.is_file():
            raise CompileError(f"nvcc failed to compile {shown} for {tgt} (exit {proc.returncode}):\n"
                               f"{trim_log(log)}")
        return Compiled(out.read_bytes(), log, "nvcc", tgt)


def trim_log(log: str, limit: int = 4000) -> str:
    """A compiler log for an error message: without ptxas's info lines, at most ``limit`` characters."""
    lines = [ln for ln in log.strip().splitlines() if not ln.startswith("ptxas info")]
    text = "\n".join(lines)
    return text if len(text) <= limit else text[:limit] + "\n[... compiler output truncated]"


def _nvrtc() -> Any:
    for mod in ("cuda.bindings.nvrtc", "cuda.nvrtc"):  # cuda-python >= 12.6, then older
        try:
            return importlib.import_module(mod)
        except ImportError:
            continue
    return None


def nvrtc_include_dirs() -> list[str]:
    """The toolkit include directories NVRTC needs and nvcc adds by itself: ``include`` and, where CUDA
    13 keeps libcu++ (``<cuda/pipeline>``, ``<cuda/std/...>``), ``include/cccl`` before it."""
    include = find_include_dir("cuda_pipeline.h")
    if include is None:
        return []
    return [*([str(include / "cccl")] if (include / "cccl").is_dir() else []), str(include)]


def _nvrtc_caches(nvrtc: Any) -> bool:
    """Whether this NVRTC has its own compile cache (12.9 and later) and so takes ``--no-cache``."""
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except Exception:  # an NVRTC that cannot say: the option would be refused by an old one
        return False
    return int(err) == 0 and (int(major), int(minor)) >= (12, 9)


def _compile_nvrtc(text: str, shown: str, path: Path | None, tgt: str, flags: list[str]) -> Compiled:
    nvrtc = _nvrtc()
    if nvrtc is None:
        raise ToolkitError(
            f"cannot compile {shown} for {tgt}: neither nvcc (CUDA toolkit; set CUDA_HOME or "
            "PIPECHECK_NVCC) nor NVRTC (pip install cuda-python) is available"
        )

    def check(result: Any, what: str) -> Any:
        err = result[0]
        if int(err) != 0:
            raise CompileError(f"NVRTC {what} failed for {shown} on {tgt}: {err}")
        return result[1] if len(result) == 2 else result[1:]

    # NVRTC 12.9 and later keep a cache of what they compiled (with a driver on the machine) and, on a hit,
    # return the cubin without running ptxas: the log then has no resource report. The report is why this
    # path exists, so the cache is off (``--no-cache``); this process's own cache (``compile_cuda``) still
    # saves the repeats. Measured: docs/validation/2026-11-27-h200x2-1401.md.
    opts = [f"--gpu-architecture={tgt}", "--generate-line-info", "-Xptxas=-v",
            *(["--no-cache"] if _nvrtc_caches(nvrtc) else []), *flags]
    if path is not None:
        opts.append(f"-I{path.parent}")
    opts += [f"-I{d}" for d in nvrtc_include_dirs()]
    prog = check(nvrtc.nvrtcCreateProgram(text.encode(), (path.name if path else "kernels.cu").encode(),
                                          0, [], []), "create")
    try:
        status = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])[0]
        # NVRTC writes into the buffer given: a bytearray, never a bytes object (``b" " * 1`` is CPython's
        # shared one-byte object, which a write would change for the whole process)
        size = check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        buf = bytearray(max(int(size), 1))
        check((nvrtc.nvrtcGetProgramLog(prog, buf)[0], None), "log")
        log = bytes(buf).rstrip(b"\x00 ").decode(errors="replace")
        if int(status) != 0:
            raise CompileError(f"NVRTC failed to compile {shown} for {tgt}:\n{trim_log(log)}")
        csize = check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = bytearray(max(int(csize), 1))
        check((nvrtc.nvrtcGetCUBIN(prog, cubin)[0], None), "cubin")
        return Compiled(bytes(cubin[:int(csize)]), log, "nvrtc", tgt)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


@functools.lru_cache(maxsize=16)
def cached_version(path: str) -> str | None:
    """:func:`tool_version`, asked once per path and process."""
    return tool_version(path)
