"""Launchers for the CUDA pipelining ladder (k1..k6): compile with NVRTC through CuPy, validate, launch.

Every kernel computes ``C = A @ B`` with A (M, K) fp16, B (K, N) fp16 and C (M, N) fp32, all 2-D with
unit column stride; rows may be padded (the leading dimensions are read from the strides), which
is how pipecheck's coverage check hands over guarded views. CuPy arrays and CUDA torch tensors are
both accepted (torch tensors are wrapped zero-copy and launched on torch's current stream).

CuPy and torch are imported inside the functions that need them, so importing this module (and
collecting the tests next to it) works on a machine without a GPU.
"""

from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_pipecheck.results import PipecheckError

__all__ = [
    "CUDA_DIR",
    "KERNELS",
    "SANITIZER_EXCLUSIONS",
    "CudaCompileError",
    "CudaKernel",
    "CudaLaunchError",
    "check_shared_memory",
    "compile_options",
    "dynamic_smem",
    "gemm",
    "include_dirs",
    "kernel_source",
    "prebuild",
    "prebuild_many",
    "sanitizer_exclusions",
    "source_stages",
]

CUDA_DIR = Path(__file__).resolve().parent
_STAGES_RE = re.compile(r"^\s*#define\s+PIPECHECK_STAGES\s+(\d+)", re.MULTILINE)


class CudaCompileError(PipecheckError):
    """A ladder kernel (or mutant) did not compile; the message holds the compiler log and target."""


class CudaLaunchError(PipecheckError):
    """Bad arguments to a ladder launcher; the message says what the kernel needs."""


@dataclass(frozen=True)
class CudaKernel:
    """One rung of the ladder: its file, entry point, build macros, block shape and shared-memory footprint."""

    name: str            # short name used in specs, mutants and reports
    file: str            # .cu file in this directory
    entry: str           # extern "C" kernel name
    threads: int         # threads per block
    bm: int              # block tile rows (M)
    bn: int              # block tile columns (N)
    stage_bytes: int     # dynamic shared memory per pipeline stage (0: static smem only)
    extra_smem: int = 0  # dynamic shared memory on top of the stages (k6's C staging tile)
    persistent: bool = False  # grid = min(#tiles, blocks_per_sm * #SMs), blocks loop over tiles
    blocks_per_sm: int = 2    # persistent kernels: resident blocks per SM the grid is sized for
    min_stages: int = 1
    max_stages: int = 4
    # -D macros this kernel is always built with, as (name, value) pairs (value None: a bare -Dname);
    # a tuple so the dataclass stays hashable. Two kernels may share a file and differ only here.
    defines: tuple[tuple[str, Any], ...] = ()
    # stage count when the caller gives none; None: the source's own #define PIPECHECK_STAGES (a build
    # whose defines pick another branch of the file sets this, and the launcher then passes it as -D)
    default_stages: int | None = None
    description: str = ""

    @property
    def path(self) -> Path:
        return CUDA_DIR / self.file

    @property
    def define_map(self) -> dict[str, Any]:
        """The build macros as a dict (for compile_options and compile_resources)."""
        return dict(self.defines)


BK = 32
_STAGE_128x128 = (128 * (BK + 8) + BK * (128 + 8)) * 2  # 18944: A (128, 40) + B (32, 136) halves
_STAGE_128x256 = (128 * (BK + 8) + BK * (256 + 8)) * 2  # 27136: A (128, 40) + B (32, 264) halves
_STAGE_256x128 = (256 * (BK + 8) + BK * (128 + 8)) * 2  # 29184: A (256, 40) + B (32, 136) halves
_C_STAGING_256x64 = 256 * (64 + 4) * 4                  # 69632: k6's fp32 C staging buffer (256, 68)

KERNELS: dict[str, CudaKernel] = {
    k.name: k
    for k in (
        CudaKernel("k1_sync_tiled", "k1_sync_tiled.cu", "gemm_k1_sync_tiled", 128, 128, 128, 0,
                   min_stages=1, max_stages=1, description="load / sync / compute / sync (baseline)"),
        CudaKernel("k2_register_prefetch", "k2_register_prefetch.cu", "gemm_k2_register_prefetch", 128, 128,
                   128, 0, min_stages=2, max_stages=2,
                   description="LDG-to-register prefetch, double-buffered smem"),
        CudaKernel("k3_cp_async", "k3_cp_async_multistage.cu", "gemm_k3_cp_async", 128, 128, 128,
                   _STAGE_128x128, min_stages=1, max_stages=4,
                   description="cp.async multi-stage ring (cuda_pipeline.h)"),
        CudaKernel("k3_cp_async_wide", "k3_cp_async_multistage.cu", "gemm_k3_cp_async", 256, 128, 256,
                   _STAGE_128x256, min_stages=2, max_stages=6,
                   defines=(("PIPECHECK_K3_WIDE", 1), ("PIPECHECK_XTILE", 1), ("PIPECHECK_XTILE_SPLIT", 1)),
                   default_stages=4,
                   description="cp.async multi-stage ring, 128 x 256 tile, 8 warps, 1 block/SM"),
        CudaKernel("k4_cuda_pipeline", "k4_cuda_pipeline_block.cu", "gemm_k4_cuda_pipeline", 128, 128, 128,
                   _STAGE_128x128, min_stages=2, max_stages=4,
                   description="block-scoped cuda::pipeline + cuda::memcpy_async"),
        CudaKernel("k5_warp_specialized", "k5_warp_specialized.cu", "gemm_k5_warp_specialized", 160, 128,
                   128, _STAGE_128x128, min_stages=2, max_stages=4,
                   description="1 producer + 4 consumer warps, partitioned cuda::pipeline"),
        CudaKernel("k6_loader_compute_storer", "k6_loader_compute_storer.cu",
                   "gemm_k6_loader_compute_storer", 320, 256, 128, _STAGE_256x128,
                   extra_smem=_C_STAGING_256x64, persistent=True, blocks_per_sm=1, min_stages=2, max_stages=4,
                   description="persistent loader / compute / storer warps, 256 x 128 tile, 1 block/SM"),
    )
}


#: Reviewed sanitizer exclusions for compute-sanitizer before 2026.4.0: kernel -> {tool: reason}.
_EXCLUSIONS_BEFORE_2026_4: dict[str, dict[str, str]] = {
    name: {"synccheck": (
        "synccheck excluded for compute-sanitizer {version} (reviewed false positive; none from 2026.4.0: "
        "pip install 'nvidia-cuda-sanitizer-api==13.5.25', or pip install -e '.[sanitizer]' in a clone of "
        "pytest-pipecheck): it reports 'Barrier error detected. Missing wait.' at the "
        "mbarrier arrive inside cuda::pipeline::producer_commit for every cuda::pipeline kernel, a 20-line "
        "textbook pipeline included, and stops the kernel there (unspecified launch failure), so no filter "
        "of its records can rescue the run (H200 2026-11-22, H100 2026-11-25: docs/validation/); racecheck "
        "runs and is clean")}
    for name in ("k4_cuda_pipeline", "k5_warp_specialized", "k6_loader_compute_storer")
}


def sanitizer_exclusions(version: tuple[int, ...] | str | None = "discover") -> dict[str, dict[str, str]]:
    """The reviewed exclusions for the compute-sanitizer of ``version`` (by default the one pipecheck
    finds): none from 2026.4.0 on, the version the cuda::pipeline kernels were measured clean with under
    every tool (docs/validation/2026-11-25-h100.md); older and unknown versions keep the exclusions."""
    from pytest_pipecheck.sanitizer.known import PINNED_VERSION

    label = "of unknown version"
    if version == "discover":
        from pytest_pipecheck.sanitizer.locate import find_compute_sanitizer

        found = find_compute_sanitizer()
        version = found.version_tuple if found is not None else None
        label = found.version if found is not None and version is not None else label
    elif version is not None:
        label = ".".join(map(str, version))
    if isinstance(version, tuple) and version >= PINNED_VERSION:
        return {}
    return {k: {t: r.format(version=label) for t, r in v.items()} for k, v in _EXCLUSIONS_BEFORE_2026_4.items()}


#: The exclusions for the compute-sanitizer this process finds. Tests run these kernels under every other
#: default tool, record the exclusion as a skipped check with its reason (so the summary shows it).
SANITIZER_EXCLUSIONS: dict[str, dict[str, str]] = sanitizer_exclusions()


def kernel_source(kernel: CudaKernel | str) -> str:
    """The .cu text of a ladder kernel (read once per file and process: launches are timed)."""
    return _read_source(_kernel(kernel).path)


@functools.cache
def _read_source(path: Path) -> str:
    return path.read_text()


def source_stages(source: str, kernel: CudaKernel) -> int:
    """The stage count ``kernel`` runs ``source`` with when no stage count is given.

    ``kernel.default_stages`` when set (the launcher then passes it as -D), otherwise the source's first
    ``#define PIPECHECK_STAGES`` (``kernel.min_stages`` if it has none).
    """
    if kernel.default_stages is not None:
        return kernel.default_stages
    m = _STAGES_RE.search(source)
    if m:
        return int(m.group(1))
    return kernel.min_stages


def dynamic_smem(kernel: CudaKernel | str, stages: int, defines: Mapping[str, Any] | None = None) -> int:
    """Dynamic shared memory (bytes) the launch must request for ``stages`` pipeline stages.

    ``defines``: the build's -D macros (the kernel's own are added); PIPECHECK_SUBTILES=n (k3) puts n
    K tiles in every stage, so a stage is n times ``stage_bytes``.
    """
    k = _kernel(kernel)
    if k.stage_bytes == 0:
        return 0
    sub = int({**k.define_map, **(defines or {})}.get("PIPECHECK_SUBTILES", 1))
    return stages * sub * k.stage_bytes + k.extra_smem


def check_shared_memory(kernel: CudaKernel | str, stages: int, static_smem: int, limit: int, arch: str,
                        label: str | None = None, defines: Mapping[str, Any] | None = None) -> int:
    """Bytes of shared memory a block of ``kernel`` needs at ``stages`` (dynamic + ``static_smem``).

    Raises :class:`CudaLaunchError` naming the kernel, the bytes needed and the device's opt-in limit
    per block (``limit``) when they do not fit, with the largest stage count that would.
    """
    k = _kernel(kernel)
    label = label or k.name
    dynamic = dynamic_smem(k, stages, defines)
    need = dynamic + static_smem
    if need <= limit:
        return need
    fits = [s for s in range(k.min_stages, stages) if dynamic_smem(k, s, defines) + static_smem <= limit]
    hint = f"; stages={fits[-1]} fits" if fits and k.stage_bytes else ""
    raise CudaLaunchError(f"{label}: needs {need} bytes of shared memory per block ({dynamic} dynamic for "
                          f"{stages} stages + {static_smem} static), more than this device's limit of "
                          f"{limit} bytes per block ({arch}, opt-in maximum){hint}")


@functools.lru_cache(maxsize=1)
def _include_dirs() -> tuple[str, ...]:
    return tuple(_find_include_dirs())


def include_dirs() -> list[str]:
    """Include directories for NVRTC (see :func:`_find_include_dirs`), looked up once per process."""
    return list(_include_dirs())


def _find_include_dirs() -> list[str]:
    """Include directories for NVRTC: this directory, CuPy's bundled CCCL, the CUDA toolkit's headers.

    CuPy's CCCL comes first so <cuda/pipeline> resolves to one consistent libcudacxx; the toolkit
    include directory supplies cuda_pipeline.h when NVRTC does not have it built in.
    """
    dirs = [str(CUDA_DIR)]
    try:
        import cupy

        cccl = Path(cupy.__file__).resolve().parent / "_core" / "include" / "cupy" / "_cccl"
        for sub in ("libcudacxx", "cub", "thrust"):
            d = cccl / sub
            if d.is_dir():
                dirs.append(str(d))
    except ImportError:
        pass
    from pytest_pipecheck.toolkit import find_include_dir

    include = find_include_dir("cuda_pipeline.h")
    if include is not None:
        dirs.append(str(include))
    return dirs


def compile_options(defines: Mapping[str, Any] | None = None) -> tuple[str, ...]:
    """NVRTC options (CuPy adds -arch=sm_XX of the current device itself)."""
    opts = ["-std=c++17", "--generate-line-info"]
    opts += [f"-I{d}" for d in include_dirs()]
    for key, value in sorted((defines or {}).items()):
        opts.append(f"-D{key}" if value is None or value == "" else f"-D{key}={value}")
    return tuple(opts)


_MODULES: dict[tuple[str, tuple[str, ...], int], Any] = {}


def _device_arch() -> tuple[int, str]:
    import cupy

    dev = cupy.cuda.Device()
    return int(dev.id), f"sm_{dev.compute_capability}"


def _module_key(source: str, entry: str, defines: Mapping[str, Any], dev_id: int) -> tuple[str, tuple[str, ...], int]:
    """The key of one build in :data:`_MODULES`: its source, options and entry, and the device."""
    return hashlib.sha256(source.encode()).hexdigest(), (*compile_options(defines), entry), dev_id


#: builds compiling on threads of :func:`prebuild_in_background`, by their key in :data:`_MODULES`
_BUILDING: dict[tuple[str, tuple[str, ...], int], concurrent.futures.Future[Any]] = {}


def _function(source: str, entry: str, defines: Mapping[str, Any], label: str) -> Any:
    dev_id, _ = _device_arch()
    key = _module_key(source, entry, defines, dev_id)
    fn = _MODULES.get(key)
    if fn is not None:
        return fn
    building = _BUILDING.get(key)
    if building is not None:
        try:
            return building.result()  # compiling in the background: wait for it rather than compile it again
        except Exception:
            pass  # it did not compile there: compile here, so that this launch raises the compiler's message
    return _build(source, entry, defines, label, dev_id, key)


def _build(source: str, entry: str, defines: Mapping[str, Any], label: str, dev_id: int,
           key: tuple[str, tuple[str, ...], int]) -> Any:
    import cupy

    options = compile_options(defines)
    arch = f"sm_{cupy.cuda.Device(dev_id).compute_capability}"
    try:
        module = cupy.RawModule(code=source, options=options, backend="nvrtc")
        fn = module.get_function(entry)
    except cupy.cuda.compiler.CompileException as exc:
        raise CudaCompileError(f"{label}: NVRTC failed for {arch} with options {' '.join(options)}:\n"
                               f"{exc.get_message() if hasattr(exc, 'get_message') else exc}") from None
    _MODULES[key] = fn
    return fn


def _kernel(kernel: CudaKernel | str) -> CudaKernel:
    if isinstance(kernel, CudaKernel):
        return kernel
    try:
        return KERNELS[kernel]
    except KeyError:
        raise CudaLaunchError(f"unknown CUDA ladder kernel {kernel!r} (known: {', '.join(KERNELS)})") from None


def _as_cupy(name: str, x: Any, label: str) -> tuple[Any, bool]:
    """(cupy array, came_from_torch)."""
    import cupy

    if isinstance(x, cupy.ndarray):
        return x, False
    mod = type(x).__module__
    if mod.startswith("torch"):
        if not getattr(x, "is_cuda", False):
            raise CudaLaunchError(f"{label}: {name} is a CPU torch tensor; the kernel needs a CUDA tensor")
        return cupy.asarray(x), True
    raise CudaLaunchError(f"{label}: {name} must be a CuPy array or a CUDA torch tensor, got {type(x).__name__}")


def _leading_dim(name: str, x: Any, dtype: str, label: str) -> int:
    import numpy as np

    if x.ndim != 2:
        raise CudaLaunchError(f"{label}: {name} must be 2-D, got shape {tuple(x.shape)}")
    if x.dtype != np.dtype(dtype):
        raise CudaLaunchError(f"{label}: {name} must be {dtype}, got {x.dtype}")
    item = x.dtype.itemsize
    rows, cols = x.shape
    s0, s1 = x.strides
    if cols > 1 and s1 != item:
        raise CudaLaunchError(f"{label}: {name} needs unit column stride (row-major rows may be padded), "
                              f"got strides {x.strides} bytes for {dtype}")
    if s0 % item or (rows > 1 and s0 < cols * item):
        raise CudaLaunchError(f"{label}: {name} row stride {s0} bytes is not a whole number of {dtype} "
                              f"elements >= {cols} columns")
    ld = s0 // item if rows > 1 else max(cols, 1)
    if ld >= 2**31:
        raise CudaLaunchError(f"{label}: {name} leading dimension {ld} does not fit in int32")
    return int(ld)


def _launch_defines(k: CudaKernel, source: str, stages: int | None, defines: Mapping[str, Any] | None,
                    label: str) -> tuple[dict[str, Any], int]:
    """(-D macros, stage count) of a launch: the kernel's own defines, the caller's, and the stage count
    (``stages``, else the kernel's ``default_stages``, else the source's own)."""
    defs = {**k.define_map, **(defines or {})}
    if stages is not None:
        if isinstance(stages, bool) or not isinstance(stages, int) or not k.min_stages <= stages <= k.max_stages:
            raise CudaLaunchError(f"{label}: stages={stages!r} is not supported; this kernel takes "
                                  f"{k.min_stages}..{k.max_stages}")
        if k.stage_bytes == 0 and stages != k.min_stages:
            raise CudaLaunchError(f"{label}: the stage count is fixed at {k.min_stages}")
        if k.stage_bytes:
            defs["PIPECHECK_STAGES"] = stages
    elif k.default_stages is not None and k.stage_bytes and "PIPECHECK_STAGES" not in defs:
        defs["PIPECHECK_STAGES"] = k.default_stages
    return defs, int(defs.get("PIPECHECK_STAGES", source_stages(source, k)))


_PREPARED: dict[tuple[int, int, int], tuple[int, int]] = {}


def _prepare(k: CudaKernel, fn: Any, stages: int, label: str,
             defines: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """(dynamic shared memory, SM count) of launching ``fn`` with ``stages`` on the current device.

    The device checks (sm_80+, shared memory within the opt-in limit) and the function attribute for
    more than 48 KB of dynamic shared memory happen once per (function, stage count, device), not on
    every launch: each is a driver call, and timed launches must not carry them (a launch timed between
    CUDA events absorbs any host work done before it while the GPU idles).
    """
    import cupy

    dev = cupy.cuda.Device()
    key = (id(fn), stages, int(dev.id))
    hit = _PREPARED.get(key)
    if hit is not None:
        return hit
    cc = str(dev.compute_capability)
    if int(cc) // 10 < 8:
        raise CudaLaunchError(f"{label}: needs sm_80 or newer (cp.async, mma.sync m16n8k16), this GPU is sm_{cc}")
    runtime = cupy.cuda.runtime
    limit = int(runtime.deviceGetAttribute(runtime.cudaDevAttrMaxSharedMemoryPerBlockOptin, int(dev.id)))
    check_shared_memory(k, stages, int(fn.shared_size_bytes), limit, f"sm_{cc}", label, defines)
    smem = dynamic_smem(k, stages, defines)
    if smem > 48 * 1024:
        fn.max_dynamic_shared_size_bytes = smem
    sms = int(runtime.deviceGetAttribute(runtime.cudaDevAttrMultiProcessorCount, int(dev.id)))
    _PREPARED[key] = (smem, sms)
    return smem, sms


def prebuild(kernel: CudaKernel | str, builds: Iterable[tuple[int | None, Mapping[str, Any] | None]],
             threads: int = 8) -> int:
    """Compile the builds of ``kernel`` that later launches will use, side by side on up to ``threads`` threads;
    each build is ``(stages, defines)`` as :func:`gemm` takes them. Returns how many were compiled here (not
    already in this process).

    A launch compiles its build when it first needs it, so a sweep over stage counts and macros compiles one
    build after another; NVRTC runs without Python's lock, so they can compile at once instead. A build that
    does not compile raises here as its launch would (:class:`CudaCompileError`)."""
    return prebuild_many([(kernel, stages, defines) for stages, defines in builds], threads)


def _wanted(builds: Iterable[tuple[CudaKernel | str, int | None, Mapping[str, Any] | None]], dev_id: int
            ) -> dict[tuple[str, tuple[str, ...], int], tuple[CudaKernel, str, dict[str, Any]]]:
    """The builds of ``builds`` that this process has not compiled yet, by their key, each once."""
    wanted: dict[tuple[str, tuple[str, ...], int], tuple[CudaKernel, str, dict[str, Any]]] = {}
    for kernel, stages, defines in builds:
        k = _kernel(kernel)
        src = kernel_source(k)
        defs, _ = _launch_defines(k, src, stages, defines, k.name)
        key = _module_key(src, k.entry, defs, dev_id)
        if key not in _MODULES:
            wanted[key] = (k, src, defs)
    return wanted


def prebuild_many(builds: Iterable[tuple[CudaKernel | str, int | None, Mapping[str, Any] | None]],
                  threads: int = 8, *, raise_errors: bool = True) -> int:
    """:func:`prebuild` for builds of several kernels: ``(kernel, stages, defines)`` each, side by side on up
    to ``threads`` threads. Returns how many compiled here. With ``raise_errors=False`` a build that does not
    compile is left out (its launch compiles it again and raises the compiler's message in its own test)."""
    import cupy

    dev_id, _ = _device_arch()
    wanted = _wanted(builds, dev_id)

    def build(k: CudaKernel, src: str, defs: dict[str, Any]) -> None:
        with cupy.cuda.Device(dev_id):
            _function(src, k.entry, defs, k.name)

    compiled = 0
    with concurrent.futures.ThreadPoolExecutor(max(1, min(threads, len(wanted) or 1))) as pool:
        for done in [pool.submit(build, *job) for job in wanted.values()]:
            try:
                done.result()
                compiled += 1
            except CudaCompileError:
                if raise_errors:
                    raise
    return compiled


def prebuild_in_background(builds: Iterable[tuple[CudaKernel | str, int | None, Mapping[str, Any] | None]],
                           threads: int = 8) -> list[concurrent.futures.Future[Any]]:
    """Start compiling ``builds`` (as :func:`prebuild_many` takes them) on up to ``threads`` threads and return at
    once: the tests launch the builds ready while the others compile. A launch whose build is still compiling
    waits for it, rather than compiling it again; one whose build failed here compiles it again itself and
    raises the compiler's message in its own test. Returns the builds' futures (each ends with the compiled
    function, or the compile error)."""
    import cupy

    dev_id, _ = _device_arch()
    wanted = {key: job for key, job in _wanted(builds, dev_id).items() if key not in _BUILDING}
    if not wanted:
        return []

    def build(key: tuple[str, tuple[str, ...], int], k: CudaKernel, src: str, defs: dict[str, Any]) -> Any:
        with cupy.cuda.Device(dev_id):
            return _build(src, k.entry, defs, k.name, dev_id, key)

    pool = concurrent.futures.ThreadPoolExecutor(max(1, min(threads, len(wanted))), thread_name_prefix="cuda-build")
    futures = []
    for key, job in wanted.items():
        _BUILDING[key] = future = pool.submit(build, key, *job)
        futures.append(future)
    pool.shutdown(wait=False)  # its threads end with the last build
    return futures


def gemm(kernel: CudaKernel | str, a: Any, b: Any, c: Any, *, stages: int | None = None,
         source: str | None = None, defines: Mapping[str, Any] | None = None, entry: str | None = None,
         label: str | None = None) -> Any:
    """Launch ladder kernel ``kernel``: ``c[:] = a @ b`` in place; returns ``c``.

    ``stages`` overrides the compile-time stage count (PIPECHECK_STAGES); ``source`` / ``entry`` run a
    modified source (the mutants do this); ``defines`` adds -D macros (e.g. PIPECHECK_LOAD_ONLY) to the
    kernel's own (``CudaKernel.defines``). Raises :class:`CudaLaunchError` for bad arguments (shape,
    dtype, strides, device, stage count) and when the block needs more shared memory than the device
    allows, and :class:`CudaCompileError` with the NVRTC log when the source does not compile.
    """
    import numpy as np

    k = _kernel(kernel)
    label = label or k.name
    src = source if source is not None else kernel_source(k)
    defs, eff_stages = _launch_defines(k, src, stages, defines, label)

    a_, a_torch = _as_cupy("A", a, label)
    b_, _ = _as_cupy("B", b, label)
    c_, _ = _as_cupy("C", c, label)
    lda = _leading_dim("A", a_, "float16", label)
    ldb = _leading_dim("B", b_, "float16", label)
    ldc = _leading_dim("C", c_, "float32", label)
    M, K = a_.shape
    K2, N = b_.shape
    if K != K2 or tuple(c_.shape) != (M, N):
        raise CudaLaunchError(f"{label}: shapes do not chain: A {tuple(a_.shape)} @ B {tuple(b_.shape)} -> "
                              f"C must be ({M}, {N}), got {tuple(c_.shape)}")
    if min(M, N, K) < 1:
        raise CudaLaunchError(f"{label}: M, N, K must be >= 1, got M={M} N={N} K={K}")
    devices = {a_.device.id, b_.device.id, c_.device.id}
    if len(devices) != 1:
        raise CudaLaunchError(f"{label}: A, B and C must be on one device, got devices {sorted(devices)}")

    import cupy

    with cupy.cuda.Device(devices.pop()):
        fn = _function(src, entry or k.entry, defs, label)
        smem, sms = _prepare(k, fn, eff_stages, label, defs)
        tiles_m = -(-M // k.bm)
        tiles_n = -(-N // k.bn)
        if k.persistent:
            grid: tuple[int, int, int] = (min(tiles_m * tiles_n, k.blocks_per_sm * sms), 1, 1)
        else:
            if tiles_m > 65535:
                raise CudaLaunchError(f"{label}: M={M} needs {tiles_m} row blocks, more than gridDim.y allows")
            grid = (tiles_n, tiles_m, 1)
        args = (a_, b_, c_, np.int32(M), np.int32(N), np.int32(K), np.int32(lda), np.int32(ldb), np.int32(ldc))
        if a_torch:
            import torch

            stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
            with stream:
                fn(grid, (k.threads, 1, 1), args, shared_mem=smem)
        else:
            fn(grid, (k.threads, 1, 1), args, shared_mem=smem)
    return c
