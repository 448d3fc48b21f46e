"""What synccheck reports for the cuda::pipeline kernels (k4, k5, k6), and whether it is theirs.

    python3 scripts/gpu/pipeline_synccheck_probe.py OUTDIR

compute-sanitizer 2025.3.1's synccheck reports "Barrier error detected. Missing wait." at the mbarrier
arrive inside cuda::pipeline::producer_commit for k4, k5 and k6. One child process per row launches a
kernel once under ``compute-sanitizer --tool synccheck`` (racecheck for the last rows) and checks the
result against float64, built three ways: through the launcher (CuPy's bundled libcu++), with the CUDA
toolkit's libcu++, and as compute_80 PTX (libcu++'s sm_80 code path, JIT-compiled); plus a 20-line
textbook block-scoped pipeline (acquire, memcpy_async, commit, wait, release) built the same three
ways; plus compute-sanitizer's own suppression workflow (save k4's records with --xml --save, run again
with them as --suppressions). The raw output of every child is kept. Writes OUTDIR.md and OUTDIR.json.
(A closing __syncthreads in k4..k6 makes no difference:
docs/validation/2026-11-22-h200-0453/pipeline_synccheck_probe-0453-closing-barrier.md.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import sys
import cupy
import reference_kernels.cuda.launch as L
from reference_kernels.cuda.launch import KERNELS, gemm, kernel_source
cupy.cuda.set_allocator(None)
name, M, N, K, prefix, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
from pytest_pipecheck.toolkit import nvrtc_include_dirs
toolkit = [str(L.CUDA_DIR), *nvrtc_include_dirs()]
if mode == "toolkit-cccl":  # the CUDA toolkit's libcu++ instead of the one bundled with CuPy
    L._find_include_dirs = lambda: list(toolkit)
    L._include_dirs.cache_clear()
if name == "minimal":
    # the smallest textbook use of a block-scoped cuda::pipeline: 2 stages of 4 floats per thread
    src = MINIMAL
    opts = ("-std=c++17", "--generate-line-info", *("-I" + d for d in (toolkit if mode == "toolkit-cccl" else L.include_dirs())))
    if mode == "compute_80":
        opts = (*opts, "--gpu-architecture=compute_80")
    fn = cupy.RawModule(code=src, options=opts, backend="nvrtc").get_function("minimal_pipeline")
    x = cupy.arange(128 * 4 * 8, dtype=cupy.float32)
    y = cupy.zeros_like(x)
    fn((1,), (128,), (x, y, cupy.int32(8)))
    cupy.cuda.Device().synchronize()
    bad = int(cupy.count_nonzero(y != x))
    print(f"probe-result mismatches={bad}", flush=True)
    sys.exit(0 if bad == 0 else 3)
k = KERNELS[name]
if mode == "compute_80":
    real = L.compile_options
    L.compile_options = lambda defines=None: (*real(defines), "--gpu-architecture=compute_80")
source = prefix.replace("\\n", "\n") + kernel_source(k)
rng = cupy.random.default_rng(0)
a = rng.integers(-3, 4, size=(M, K)).astype(cupy.float16)
b = rng.integers(-3, 4, size=(K, N)).astype(cupy.float16)
c = cupy.full((M, N), cupy.nan, dtype=cupy.float32)
gemm(name, a, b, c, source=source, entry=k.entry, label=name + " probe")
cupy.cuda.Device().synchronize()
want = a.astype(cupy.float64) @ b.astype(cupy.float64)
bad = int(cupy.count_nonzero(~(c == want)))
print(f"probe-result mismatches={bad}", flush=True)
sys.exit(0 if bad == 0 else 3)
"""

MINIMAL = r"""
#include <cooperative_groups.h>
#include <cuda/pipeline>
// y = x, staged through shared memory by a 2-stage block-scoped pipeline, every thread producer and
// consumer: acquire, memcpy_async, commit / wait, read, release -- nothing else
extern "C" __global__ void minimal_pipeline(const float* x, float* y, int chunks) {
  constexpr int STAGES = 2;
  __shared__ alignas(16) float buf[STAGES][128 * 4];
  __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> state;
  auto block = cooperative_groups::this_thread_block();
  auto pipe = cuda::make_pipeline(block, &state);
  const int t = threadIdx.x;
  for (int fill = 0; fill < STAGES && fill < chunks; ++fill) {
    pipe.producer_acquire();
    cuda::memcpy_async(&buf[fill][t * 4], x + fill * 512 + t * 4, cuda::aligned_size_t<16>(16), pipe);
    pipe.producer_commit();
  }
  for (int i = 0; i < chunks; ++i) {
    pipe.consumer_wait();
    const float4 v = *reinterpret_cast<const float4*>(&buf[i % STAGES][t * 4]);
    pipe.consumer_release();
    *reinterpret_cast<float4*>(y + i * 512 + t * 4) = v;
    if (i + STAGES < chunks) {
      pipe.producer_acquire();
      cuda::memcpy_async(&buf[i % STAGES][t * 4], x + (i + STAGES) * 512 + t * 4, cuda::aligned_size_t<16>(16), pipe);
      pipe.producer_commit();
    }
  }
}
"""

KERNELS = ("k4_cuda_pipeline", "k5_warp_specialized", "k6_loader_compute_storer")
SHAPES = ((128, 128, 32), (129, 255, 300))
VARIANTS = {"as shipped": ""}
# how the child builds the kernel: CuPy's bundled libcu++ through the launcher (as the tests do), the
# CUDA toolkit's libcu++ instead, or PTX for compute_80 (libcu++'s sm_80 code path, JIT-compiled)
MODES = ("launcher", "toolkit-cccl", "compute_80")


def _sanitizer() -> str:
    from pytest_pipecheck.sanitizer.locate import find_compute_sanitizer

    found = find_compute_sanitizer()
    if found is None:
        raise SystemExit("compute-sanitizer not found")
    return str(getattr(found, "path", found))


def _run(tool: str, kernel: str, shape: tuple[int, int, int], variant: str, san: str,
         mode: str = "launcher", extra: tuple[str, ...] = ()) -> dict[str, object]:
    M, N, K = shape
    code = CHILD.replace("src = MINIMAL", "src = " + repr(MINIMAL))
    cmd = [san, "--tool", tool, "--error-exitcode", "86", "--print-limit", "20", "--show-backtrace", "device",
           *extra, sys.executable, "-c", code, kernel, str(M), str(N), str(K), VARIANTS[variant], mode]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out = None, f"TIMEOUT: {exc}"
    errors = [ln.strip("= ").strip() for ln in out.splitlines() if "error detected" in ln.lower()
              or "hazard detected" in ln.lower()]
    summary = next((ln.strip("= ").strip() for ln in out.splitlines() if "ERROR SUMMARY" in ln
                    or "RACECHECK SUMMARY" in ln), "no summary line")
    if extra:
        mode = f"{mode} {' '.join(extra[:1])}"
    return {"tool": tool, "kernel": kernel, "shape": f"{M}x{N}x{K}", "variant": variant, "mode": mode, "rc": rc,
            "seconds": round(time.time() - t0, 1), "summary": summary,
            "kinds": sorted(set(errors)), "correct": "probe-result mismatches=0" in out, "output": out[-12000:]}


def main(argv: list[str]) -> int:
    out = Path(argv[0] if argv else "pipeline_synccheck_probe")
    san = _sanitizer()
    jobs = [("synccheck", k, SHAPES[1], "as shipped", m) for k in KERNELS for m in MODES]
    jobs += [("synccheck", k, SHAPES[0], "as shipped", "launcher") for k in KERNELS]
    jobs += [("synccheck", "minimal", (0, 0, 0), "as shipped", m) for m in MODES]
    jobs += [("racecheck", k, SHAPES[1], "as shipped", "launcher") for k in KERNELS]
    t0 = time.time()
    # compute-sanitizer's own suppression workflow: save k4's synccheck records as XML, then run again
    # with that file as --suppressions: is the kernel then reported clean, and does it still compute right?
    saved = out.parent / f"{out.name}-k4-synccheck.xml"
    first = _run("synccheck", "k4_cuda_pipeline", SHAPES[0], "as shipped", san, "launcher",
                 ("--xml", "--save", str(saved)))
    with ThreadPoolExecutor(max_workers=8) as pool:
        rows = [first, *pool.map(lambda j: _run(j[0], j[1], j[2], j[3], san, j[4]), jobs)]
    if saved.is_file():
        rows.append(_run("synccheck", "k4_cuda_pipeline", SHAPES[1], "as shipped", san, "launcher",
                         ("--suppressions", str(saved))))
    env = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip()
    ver = subprocess.run([san, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1:]
    lines = [
        "# cuda::pipeline kernels under synccheck",
        "",
        f"GPU: {env}; {' '.join(ver)}; date {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; "
        f"total {time.time() - t0:.0f} s",
        f"command: `python3 scripts/gpu/pipeline_synccheck_probe.py {out}`; one child per row, "
        "`compute-sanitizer --tool T --error-exitcode 86 --show-backtrace device`",
        "",
        "| tool | kernel | shape | build | compiled with | exit | summary | reported | result exact |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        kinds = "; ".join(str(k) for k in r["kinds"]) or "-"  # type: ignore[union-attr]
        lines.append(f"| {r['tool']} | {r['kernel']} | {r['shape']} | {r['variant']} | {r['mode']} | {r['rc']} | "
                     f"{r['summary']} | {kinds} | {r['correct']} |")
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))
    # a sample of the raw output of the first failing child without the barrier
    for r in rows:
        if r["kernel"] == "minimal" and r["rc"] not in (0, None):
            print("\n--- raw output:", r["kernel"], r["shape"], "---\n", str(r["output"])[-4000:])
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
