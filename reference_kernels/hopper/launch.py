"""Compile, load and launch the Hopper TMA + WGMMA GEMM (tma_wgmma_gemm.cu) from Python.

``gemm(a, b, c)`` computes ``c = a @ b.T`` for CUDA torch tensors: ``a`` (M, K) and ``b`` (N, K) in
bf16 or fp16, ``c`` (M, N) fp32. Rows may be padded (leading dimensions come from the strides), which
is how pipecheck's coverage check hands over its guarded views.

How it gets onto the GPU, and why this way:

* **Compile**: pipecheck's one CUDA compiler (:func:`pytest_pipecheck.toolkit.compile_cuda`: nvcc
  ``-cubin -arch=sm_90a``, or NVRTC through cuda-python without nvcc) to a cubin cached on disk by the
  hash of the source, the macros and the compiler (wgmma and setmaxnreg exist only on the
  arch-specific sm_90a target; CuPy's RawModule picks ``-arch`` from the device itself, sm_90, which
  rejects them).
* **Tensor maps**: ``cuda.bindings.driver.cuTensorMapEncodeTiled``, 2-D, box (64, rows), 128-byte
  swizzle (the layout the kernel's WGMMA descriptors assume), out-of-bounds fill with zeros.
* **Launch**: ``cuModuleLoadData`` + ``cuLaunchKernel`` with a ``void*[]`` built with ctypes; the two
  128-byte CUtensorMap values are passed by value (each pointer in the array points at a copy of the
  128 bytes), which is what ``const __grid_constant__ TmaDescriptor`` parameters expect. It runs on
  torch's current stream in torch's (primary) context.

torch and cuda-python are imported inside the functions that need them, so importing this module
works on a machine without a GPU. Every failure raises :class:`HopperCompileError` or
:class:`HopperLaunchError` with the reason; a kernel that may hang (the expect-tx mutant) must only be
launched in a child process with a timeout (see ``run_case.py``).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_pipecheck import toolkit
from pytest_pipecheck.results import PipecheckError

__all__ = [
    "ENTRY",
    "SOURCE",
    "HopperCompileError",
    "HopperLaunchError",
    "Variant",
    "compile_cubin",
    "gemm",
    "kernel_source",
    "prepare",
]

HOPPER_DIR = Path(__file__).resolve().parent
SOURCE = HOPPER_DIR / "tma_wgmma_gemm.cu"
ENTRY = "hopper_tma_wgmma_gemm"
BK = 64
ARCH = "sm_90a"


class HopperCompileError(PipecheckError):
    """The Hopper GEMM (or a mutant) did not compile; the message holds the command and its log."""


class HopperLaunchError(PipecheckError):
    """Bad arguments, an unsupported GPU, or a driver call that failed; the message says which."""


@dataclass(frozen=True)
class Variant:
    """One compile-time configuration of the kernel (the macros of tma_wgmma_gemm.cu)."""

    stages: int = 4
    consumers: int = 2
    bn: int = 128
    fp16: bool = False

    def __post_init__(self) -> None:
        if not 2 <= self.stages <= 6:
            raise HopperLaunchError(f"stages={self.stages}: the Hopper GEMM needs 2..6 stages "
                                    "(one WGMMA group stays in flight, so one stage would deadlock)")
        if self.consumers not in (1, 2):
            raise HopperLaunchError(f"consumers={self.consumers}: must be 1 or 2 consumer warpgroups")
        if self.bn not in (128, 256):
            raise HopperLaunchError(f"bn={self.bn}: must be 128 or 256 (wgmma m64n128k16 / m64n256k16)")
        if self.smem_bytes > 232448:
            raise HopperLaunchError(f"{self}: {self.smem_bytes} bytes of shared memory exceed the 227 KB "
                                    "(232448 B) a block may use on sm_90")

    @property
    def bm(self) -> int:
        return 64 * self.consumers

    @property
    def threads(self) -> int:
        return 128 * (self.consumers + 1)

    @property
    def stage_bytes(self) -> int:
        return (self.bm + self.bn) * BK * 2

    @property
    def smem_bytes(self) -> int:
        """Dynamic shared memory to request: the stage ring plus 1024 bytes to align it to 1024."""
        return self.stages * self.stage_bytes + 1024

    def defines(self) -> dict[str, str | None]:
        d: dict[str, str | None] = {"PIPECHECK_STAGES": str(self.stages),
                                    "PIPECHECK_CONSUMERS": str(self.consumers),
                                    "PIPECHECK_BN": str(self.bn)}
        if self.fp16:
            d["PIPECHECK_FP16"] = None
        return d

    def __str__(self) -> str:
        dtype = "fp16" if self.fp16 else "bf16"
        return f"{dtype} {self.bm}x{self.bn}x{BK} stages={self.stages} consumers={self.consumers}"


# ----------------------------------------------------------------------------- source and compile


def kernel_source(mutant: str | None = None) -> str:
    """The kernel's source text, with mutant ``mutant`` (reference_kernels.mutants.hopper) applied."""
    text = SOURCE.read_text()
    if mutant:
        from reference_kernels.mutants.hopper import apply_mutant

        try:
            text = apply_mutant(text, mutant)
        except ValueError as exc:
            raise HopperCompileError(str(exc)) from None
    return text


# nvcc options besides the target and the macros (the toolkit adds -lineinfo and ptxas -v itself)
OPTIONS = ("-std=c++17",)


def _cache_dir() -> Path | None:
    """Where built cubins are kept ($PIPECHECK_CACHE_DIR, else ~/.cache/pytest-pipecheck); None if unwritable."""
    root = os.environ.get("PIPECHECK_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "pytest-pipecheck")
    path = Path(root) / "hopper"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return path


def _compiler_id() -> str:
    """Which compiler :func:`pytest_pipecheck.toolkit.compile_cuda` will use, with its version."""
    nvcc = toolkit.find_tool("nvcc")
    if nvcc is None:
        return "nvrtc"
    return f"nvcc {nvcc.path} {toolkit.cached_version(nvcc.path)}"


def compile_cubin(source: str, variant: Variant, *, label: str = "hopper_tma_wgmma_gemm",
                  use_cache: bool = True) -> tuple[bytes, str]:
    """(cubin bytes, compiler log) for ``source`` built as ``variant`` for sm_90a.

    Compiled by :func:`pytest_pipecheck.toolkit.compile_cuda` (nvcc when it is found, else NVRTC), and
    kept on disk by the hash of the source, the macros and the compiler. Raises HopperCompileError with
    the compiler's output when compilation fails or no compiler is available.
    """
    defines = variant.defines()
    key = hashlib.sha256("\0".join([source, repr(sorted(defines.items())), _compiler_id()]).encode()).hexdigest()[:24]
    cache = _cache_dir() if use_cache else None
    cached = cache / f"{label}-{key}.cubin" if cache is not None else None
    if cached is not None and cached.is_file():
        return cached.read_bytes(), "(cached)"
    try:
        compiled = toolkit.compile_cuda(source, ARCH, options=OPTIONS, defines=defines)
    except toolkit.ToolkitError as exc:
        raise HopperCompileError(f"{label} ({variant}): {exc}") from None
    if cached is not None:
        try:  # write-then-rename, so a concurrent reader never sees half a cubin
            tmp_path = cached.with_suffix(f".{os.getpid()}.tmp")
            tmp_path.write_bytes(compiled.cubin)
            os.replace(tmp_path, cached)
        except OSError:
            pass  # an unwritable cache only costs a rebuild next time
    return compiled.cubin, compiled.log


# ----------------------------------------------------------------------------- driver


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # cuda-python < 12.6 layout
        except ImportError as exc:
            raise HopperLaunchError(f"the Hopper GEMM needs cuda-python (cuda.bindings.driver): {exc}") from None
    return driver


def _check(driver: Any, result: Any, what: str) -> Any:
    """Unpack a cuda-python result tuple; raise HopperLaunchError naming the call and the error."""
    if isinstance(result, tuple):
        err, rest = result[0], result[1:]
    else:
        err, rest = result, ()
    if err != driver.CUresult.CUDA_SUCCESS:
        try:
            name = driver.cuGetErrorName(err)[1].decode()
            text = driver.cuGetErrorString(err)[1].decode()
        except Exception:  # the error query itself failed: report the raw value
            name, text = str(err), ""
        raise HopperLaunchError(f"{what} failed: {name}: {text}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else rest


_TOUCHED: set[int] = set()


def _ensure_context(driver: Any, device_index: int) -> int:
    """Make torch's (primary) context of ``device_index`` current on this thread; return its handle."""
    import torch

    torch.cuda.set_device(device_index)
    if device_index not in _TOUCHED:
        torch.zeros(1, device=f"cuda:{device_index}")  # makes the runtime create and bind the context
        _check(driver, driver.cuInit(0), "cuInit")
        _TOUCHED.add(device_index)
    ctx = _check(driver, driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if ctx is None or int(ctx) == 0:
        dev = _check(driver, driver.cuDeviceGet(device_index), "cuDeviceGet")
        ctx = _check(driver, driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _check(driver, driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return int(ctx)


@dataclass
class _Loaded:
    module: Any
    function: Any
    variant: Variant
    log: str


_LOADED: dict[tuple[str, Variant, str, int], _Loaded] = {}


def load(variant: Variant, mutant: str | None = None, device_index: int = 0) -> _Loaded:
    """Compile (cached) and load the kernel for ``variant`` into torch's context; cached per context."""
    driver = _driver()
    ctx = _ensure_context(driver, device_index)
    source = kernel_source(mutant)
    key = (hashlib.sha256(source.encode()).hexdigest(), variant, mutant or "", ctx)
    hit = _LOADED.get(key)
    if hit is not None:
        return hit
    label = mutant or ENTRY
    cubin, log = compile_cubin(source, variant, label=label)
    image = ctypes.create_string_buffer(cubin, len(cubin))
    module = _check(driver, driver.cuModuleLoadData(ctypes.addressof(image)), f"cuModuleLoadData({label})")
    function = _check(driver, driver.cuModuleGetFunction(module, ENTRY.encode()), f"cuModuleGetFunction({ENTRY})")
    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    _check(driver, driver.cuFuncSetAttribute(function, attr, variant.smem_bytes),
           f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={variant.smem_bytes})")
    loaded = _Loaded(module, function, variant, log)
    _LOADED[key] = loaded
    return loaded


def _tensor_map(driver: Any, t: Any, rows: int, cols: int, box_rows: int, fp16: bool) -> bytes:
    """The 128-byte CUtensorMap of a row-major (rows, cols) 16-bit matrix, box (64, box_rows), 128B swizzle."""
    dtypes = driver.CUtensorMapDataType
    u32, u64 = driver.cuuint32_t, driver.cuuint64_t  # cuda-python takes these, not plain ints, in lists
    dtype = dtypes.CU_TENSOR_MAP_DATA_TYPE_FLOAT16 if fp16 else dtypes.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
    # a one-row matrix's stride is never used: give TMA any valid one (>= a row, multiple of 16 bytes)
    ld_bytes = int(t.stride(0)) * 2 if rows > 1 else -(-(cols * 2) // 16) * 16
    result = driver.cuTensorMapEncodeTiled(
        dtype, 2, int(t.data_ptr()),
        [u64(cols), u64(rows)],       # globalDim, innermost first: (K, rows)
        [u64(ld_bytes)],              # globalStrides of dims 1.. in bytes (multiple of 16)
        [u32(BK), u32(box_rows)],     # boxDim: 64 elements of K (128 bytes) x box_rows rows
        [u32(1), u32(1)],             # elementStrides
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        driver.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        driver.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,  # out of bounds -> zeros
    )
    tmap = _check(driver, result, f"cuTensorMapEncodeTiled(rows={rows}, cols={cols}, ld={ld_bytes} B, "
                                  f"box=({BK}, {box_rows}))")
    return ctypes.string_at(int(tmap.getPtr()), 128)


# ----------------------------------------------------------------------------- the launcher


def _validate(a: Any, b: Any, c: Any, variant: Variant | None) -> tuple[int, int, int, bool]:
    import torch

    for name, t in (("a", a), ("b", b), ("c", c)):
        if not isinstance(t, torch.Tensor):
            raise HopperLaunchError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_cuda:
            raise HopperLaunchError(f"{name} is on {t.device}; the Hopper GEMM needs CUDA tensors")
        if t.dim() != 2:
            raise HopperLaunchError(f"{name} must be 2-D, got shape {tuple(t.shape)}")
    if a.dtype not in (torch.bfloat16, torch.float16) or b.dtype != a.dtype:
        raise HopperLaunchError(f"a and b must both be bfloat16 or both float16, got {a.dtype} and {b.dtype}")
    if c.dtype != torch.float32:
        raise HopperLaunchError(f"c must be float32 (fp32 accumulation, stored as fp32), got {c.dtype}")
    if len({a.device, b.device, c.device}) != 1:
        raise HopperLaunchError(f"a, b, c must be on one device, got {a.device}, {b.device}, {c.device}")
    m, k = (int(x) for x in a.shape)
    n, kb = (int(x) for x in b.shape)
    if kb != k:
        raise HopperLaunchError(f"b must be (N, K) = (N, {k}) (C = A @ B.T), got shape {tuple(b.shape)}")
    if tuple(c.shape) != (m, n):
        raise HopperLaunchError(f"c must be (M, N) = ({m}, {n}), got shape {tuple(c.shape)}")
    if min(m, n, k) < 1:
        raise HopperLaunchError(f"M, N, K must be >= 1, got M={m} N={n} K={k}")
    if max(m, n) >= 2**31 or k >= 2**31:
        raise HopperLaunchError(f"M, N, K must be < 2**31, got M={m} N={n} K={k}")
    for name, t in (("a", a), ("b", b)):
        if t.shape[1] > 1 and t.stride(1) != 1:
            raise HopperLaunchError(f"{name} needs unit stride along K (TMA reads rows), got strides {t.stride()}")
        if t.shape[0] > 1 and (t.stride(0) * 2) % 16:
            raise HopperLaunchError(
                f"{name}'s row stride is {t.stride(0)} elements = {t.stride(0) * 2} bytes; TMA needs a multiple "
                f"of 16 bytes (8 elements): for a contiguous tensor K must be a multiple of 8 (K={k})")
        if t.shape[0] > 1 and t.stride(0) < t.shape[1]:
            raise HopperLaunchError(f"{name}'s rows overlap (row stride {t.stride(0)} < K={k})")
        if t.data_ptr() % 16:
            raise HopperLaunchError(f"{name}'s data pointer is not 16-byte aligned (TMA needs it)")
    if n > 1 and c.stride(1) != 1:
        raise HopperLaunchError(f"c needs unit column stride, got strides {c.stride()}")
    major, minor = torch.cuda.get_device_capability(a.device)
    if (major, minor) != (9, 0):
        raise HopperLaunchError(f"the Hopper GEMM runs on sm_90 (H100/H200) only, built for sm_90a; this GPU "
                                f"({torch.cuda.get_device_name(a.device)}) is sm_{major}{minor}")
    return m, n, k, a.dtype == torch.float16


def prepare(a: Any, b: Any, c: Any, *, stages: int | None = None, consumers: int = 2, bn: int = 128,
            mutant: str | None = None, variant: Variant | None = None) -> Any:
    """Validate, compile/load, encode the tensor maps once; return a zero-argument launch function.

    The returned callable launches ``c = a @ b.T`` on torch's current stream each time it is called
    (used by the benchmark so that timing excludes Python-side setup). Arguments as for :func:`gemm`.
    """
    import torch

    m, n, k, fp16 = _validate(a, b, c, variant)
    if variant is None:
        variant = Variant(stages=4 if stages is None else stages, consumers=consumers, bn=bn, fp16=fp16)
    elif stages is not None and stages != variant.stages:
        variant = Variant(stages=stages, consumers=variant.consumers, bn=variant.bn, fp16=variant.fp16)
    if variant.fp16 != fp16:
        raise HopperLaunchError(f"variant {variant} does not match the inputs' dtype {a.dtype}")
    driver = _driver()
    loaded = load(variant, mutant, a.device.index or 0)

    map_a = _tensor_map(driver, a, m, k, variant.bm, fp16)
    map_b = _tensor_map(driver, b, n, k, variant.bn, fp16)
    ldc = int(c.stride(0)) if m > 1 else n
    args = [
        (ctypes.c_ubyte * 128).from_buffer_copy(map_a),  # const __grid_constant__ TmaDescriptor tma_a
        (ctypes.c_ubyte * 128).from_buffer_copy(map_b),  # const __grid_constant__ TmaDescriptor tma_b
        ctypes.c_void_p(int(c.data_ptr())),              # float* c
        ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k),
        ctypes.c_longlong(ldc),                          # long long ldc
    ]
    params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(x) for x in args])
    grid_x = -(-n // variant.bn)
    grid_y = -(-m // variant.bm)
    if grid_y > 65535:
        raise HopperLaunchError(f"M={m} needs {grid_y} row blocks; the grid's y limit is 65535")
    what = (f"cuLaunchKernel({mutant or ENTRY}, {variant}, grid=({grid_x}, {grid_y}), block={variant.threads}, "
            f"smem={variant.smem_bytes})")
    device = a.device

    def launch() -> None:
        stream = driver.CUstream(int(torch.cuda.current_stream(device).cuda_stream))
        _check(driver, driver.cuLaunchKernel(loaded.function, grid_x, grid_y, 1, variant.threads, 1, 1,
                                             variant.smem_bytes, stream, ctypes.addressof(params), 0), what)

    # the launch must keep its parameter buffers and tensors alive as long as it can be called
    launch.keepalive = (a, b, c, args, params, loaded)  # type: ignore[attr-defined]
    return launch


def gemm(a: Any, b: Any, c: Any | None = None, *, stages: int | None = None, consumers: int = 2,
         bn: int = 128, mutant: str | None = None, variant: Variant | None = None) -> Any:
    """``c = a @ b.T`` on torch's current stream (asynchronous); returns ``c`` (allocated when None).

    ``a`` (M, K) and ``b`` (N, K) bf16 or fp16 CUDA tensors with unit stride along K and row strides a
    multiple of 8 elements (16 bytes); ``c`` (M, N) fp32 with unit column stride. ``variant`` (or
    ``stages``, ``consumers``, ``bn``) picks the compile-time configuration; ``mutant`` names a
    one-bug mutant from reference_kernels.mutants.hopper. Raises HopperLaunchError or
    HopperCompileError with the reason.
    """
    import torch

    if c is None:
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            raise HopperLaunchError("a and b must be torch tensors")
        c = torch.empty((a.shape[0], b.shape[0]), dtype=torch.float32, device=a.device)
    prepare(a, b, c, stages=stages, consumers=consumers, bn=bn, mutant=mutant, variant=variant)()
    return c
