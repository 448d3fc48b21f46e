"""Canary kernels: one tiny kernel per tool with a known bug that the tool must report.

The child runs the canary for its tool after its last test (synccheck and memcheck errors leave the
CUDA context dead, so nothing may run after them) between ``PIPECHECK-BEGIN/END`` lines named
``pipecheck-canary::<tool>``; the parent trusts a clean verdict only when the canary's finding was
printed there.

Route chosen: CuPy ``RawKernel`` (NVRTC, no host compiler, no build step), with CuPy's memory pool
disabled so memcheck sees the real allocation bounds. Without CuPy the canary reports
``unavailable`` and clean verdicts of that tool become errors (inconclusive), never passes.
"""

from __future__ import annotations

from .. import envvars

__all__ = ["CANARY_SOURCE", "run_canary"]

CANARY_SOURCE = r"""
// racecheck: every thread writes its smem slot and reads a slot of another warp, no __syncthreads
extern "C" __global__ void pipecheck_canary_race(float* out) {
    __shared__ float tile[256];
    int t = threadIdx.x;
    tile[t] = (float)t;
    out[t] = tile[(t + 32) % 256];
}
// synccheck: a barrier reached by only half a warp
extern "C" __global__ void pipecheck_canary_divergent_barrier(float* out) {
    if (threadIdx.x < 16) {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}
// memcheck: writes out[n .. n+31] of an n-element array
extern "C" __global__ void pipecheck_canary_oob(float* out, int n) {
    out[n + threadIdx.x] = 1.0f;
}
// initcheck: reads an array nobody wrote
extern "C" __global__ void pipecheck_canary_uninit(const float* in, float* out) {
    out[threadIdx.x] = in[threadIdx.x] + 1.0f;
}
"""


def run_canary(tool: str) -> tuple[str, str]:
    """Launch ``tool``'s buggy canary kernel and synchronize. Returns (outcome, message).

    ``outcome`` is ``passed`` when the kernel was launched (whatever the device then reported),
    ``unavailable`` when it could not be (no CuPy, compile failure), with the reason in ``message``.
    """
    if envvars.value("PIPECHECK_CANARY_DRYRUN"):
        # used by pipecheck's own CPU tests: a fake compute-sanitizer prints the canary finding
        return "passed", "dry run"
    try:
        import cupy as cp
    except Exception as exc:  # ImportError, or a broken CUDA install raising at import
        return "unavailable", f"cupy is not importable ({type(exc).__name__}: {exc}); install cupy-cuda13x"
    try:
        cp.cuda.set_allocator(None)
        module = cp.RawModule(code=CANARY_SOURCE, options=("--generate-line-info",))
        if tool == "racecheck":
            out = cp.zeros(256, dtype=cp.float32)
            module.get_function("pipecheck_canary_race")((1,), (256,), (out,))
        elif tool == "synccheck":
            out = cp.zeros(32, dtype=cp.float32)
            module.get_function("pipecheck_canary_divergent_barrier")((1,), (32,), (out,))
        elif tool == "memcheck":
            out = cp.zeros(4, dtype=cp.float32)
            module.get_function("pipecheck_canary_oob")((1,), (32,), (out, cp.int32(4)))
        elif tool == "initcheck":
            src = cp.empty(32, dtype=cp.float32)
            out = cp.zeros(32, dtype=cp.float32)
            module.get_function("pipecheck_canary_uninit")((1,), (32,), (src, out))
        else:
            return "unavailable", f"no canary for tool {tool!r}"
    except Exception as exc:
        return "unavailable", f"the canary kernel could not be launched: {type(exc).__name__}: {exc}"
    try:
        cp.cuda.runtime.deviceSynchronize()
    except Exception:
        # expected for synccheck and memcheck: the sanitizer aborts the faulty kernel
        pass
    return "passed", ""
