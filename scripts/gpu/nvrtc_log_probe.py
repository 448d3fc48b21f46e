"""When does NVRTC leave its program log empty? A probe of the resource report pipecheck reads from it.

``pytest_pipecheck.resources.cubin`` reads registers, shared memory, spills and barriers from the ``ptxas -v``
lines NVRTC writes into its program log (``-Xptxas=-v``). Where that log is empty the resources come from the
cubin (``cuobjdump -res-usage``, no spill or barrier counts) and say so. On the GPU machine this probe found the
cause (docs/validation/2026-11-27-h200x2-1401.md): NVRTC 12.9 and later cache their compiles, and a cache hit
skips ptxas; only the first compile of a source on the machine had the report. pipecheck now compiles with
``--no-cache``, and the probe checks that every compile's log has the report. It compiles one small kernel
through pipecheck's NVRTC path in fresh processes, each after something else a test process does first, and
records for every compile the log's length, whether it has the report, and whether the report went to the
process's own stdout or stderr instead:

* ``fresh``: nothing before;
* ``after_cupy``: CuPy compiled a kernel through its NVRTC first;
* ``cupy_threads``: 8 threads compile distinct CuPy kernels while the probe compiles;
* ``after_torch``: torch created its CUDA context and ran a matrix product first;
* ``ladder_prebuild``: the CUDA reference kernels' background builds run while the probe compiles, and after;
* ``nvcc_first``: pipecheck compiled the same source through nvcc first (its in-process cache cleared after).

Each scenario runs ``--repeats`` times (default 3), each in its own process, three compiles per process. The
output folder gets ``nvrtc_log_probe.json`` and ``nvrtc_log_probe.md``; the script's exit code is 0 whatever
it finds (it measures; the tests judge).

    python3 scripts/gpu/nvrtc_log_probe.py OUTDIR [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

# the kernel tests/unit/test_resources_nvrtc.py compiles, kept the same on purpose: where NVRTC caches, a probe
# run on a machine is what a later run of that test meets there
SMALL = r"""
extern "C" __global__ void scale(float* x, float a, int n) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (i < n) x[i] = a * tile[255 - threadIdx.x];
}
"""

SCENARIOS = ("fresh", "after_cupy", "cupy_threads", "after_torch", "ladder_prebuild", "nvcc_first")
COMPILES = 3


def _loaded_nvrtc() -> list[str]:
    """The NVRTC libraries mapped into this process."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return sorted({line.split()[-1] for line in maps.splitlines() if "libnvrtc" in line and "/" in line})


class _Captured:
    """The process's own stdout and stderr (file descriptors 1 and 2) while a block runs, read back after."""

    def __enter__(self) -> _Captured:
        sys.stdout.flush()
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = [os.dup(1), os.dup(2)]
        os.dup2(self.file.fileno(), 1)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)
        self.file.seek(0)
        self.text = self.file.read().decode(errors="replace")
        self.file.close()


def _compile_once(arch: str) -> dict[str, Any]:
    from pytest_pipecheck import toolkit

    with _Captured() as out:
        compiled = toolkit._compile_nvrtc(SMALL, "<probe>", None, arch, [])
    return {"log_chars": len(compiled.log), "report_in_log": "ptxas info" in compiled.log,
            "report_on_stdio": "ptxas info" in out.text, "cubin_bytes": len(compiled.cubin)}


def _cupy_kernel(tag: int) -> None:
    import cupy

    code = f'extern "C" __global__ void k{tag}(float* x) {{ x[threadIdx.x] += {tag}.0f; }}'
    cupy.RawModule(code=code, backend="nvrtc").get_function(f"k{tag}")


def _scenario(name: str, arch: str) -> dict[str, Any]:
    """One scenario in this process: what runs first, then the probe's compiles."""
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    if name == "after_cupy":
        _cupy_kernel(os.getpid() % 100000)
    elif name == "after_torch":
        import torch

        a = torch.randn(512, 512, device="cuda")
        (a @ a).sum().item()
    elif name == "nvcc_first":
        from pytest_pipecheck import toolkit

        if toolkit.find_tool("nvcc") is not None:
            toolkit.compile_cuda(SMALL, arch)
        toolkit.clear_cache()
    threads: list[threading.Thread] = []
    futures: list[Any] = []
    if name == "cupy_threads":
        base = os.getpid() % 1000 * 100

        def compile_in_thread(tag: int) -> None:
            try:
                _cupy_kernel(tag)
            except Exception as exc:  # recorded: a scenario whose threads compiled nothing proves nothing
                before.append({"thread_error": f"{type(exc).__name__}: {str(exc)[:200]}"})

        threads = [threading.Thread(target=compile_in_thread, args=(base + i,)) for i in range(8)]
        for t in threads:
            t.start()
    elif name == "ladder_prebuild":
        from reference_kernels.cuda.launch import KERNELS, prebuild_in_background

        futures = prebuild_in_background([(k, None, None) for k in KERNELS])
    compiles = [_compile_once(arch) for _ in range(COMPILES)]
    for t in threads:
        t.join()
    for f in futures:
        try:
            f.result()
        except Exception as exc:  # a build that does not compile is the ladder's business, not the probe's
            before.append({"ladder_build_error": str(exc)[:200]})
    if name == "ladder_prebuild":
        after = [_compile_once(arch) for _ in range(COMPILES)]
    return {"scenario": name, "pid": os.getpid(), "nvrtc": _loaded_nvrtc(), "compiles": compiles,
            "compiles_after": after, "notes": before}


def _arch() -> str:
    """The GPU's target (CuPy says ``"90"`` for sm_90); sm_90 where no GPU answers (NVRTC needs none)."""
    try:
        import cupy

        return f"sm_{cupy.cuda.Device(0).compute_capability}"
    except Exception:
        return "sm_90"


def summarize(records: list[dict[str, Any]]) -> list[str]:
    """A markdown table: per scenario, the processes, the compiles with the report in the log, and those whose
    report went to stdout or stderr instead."""
    lines = ["| scenario | processes | compiles | report in the log | empty log | report on stdout/stderr | NVRTC |",
             "|---|---|---|---|---|---|---|"]
    for name in SCENARIOS:
        runs = [r for r in records if r.get("scenario") == name]
        if not runs:
            continue
        compiles = [c for r in runs for c in (r.get("compiles") or []) + (r.get("compiles_after") or [])]
        libs = sorted({lib for r in runs for lib in r.get("nvrtc") or []})
        failed = [r for r in runs if r.get("error") or any("thread_error" in n for n in r.get("notes") or [])]
        lines.append(f"| {name} | {len(runs)}{f' ({len(failed)} failed)' if failed else ''} | {len(compiles)} | "
                     f"{sum(1 for c in compiles if c.get('report_in_log'))} | "
                     f"{sum(1 for c in compiles if not c.get('log_chars'))} | "
                     f"{sum(1 for c in compiles if c.get('report_on_stdio'))} | {', '.join(libs) or '?'} |")
    return lines


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scenario", choices=SCENARIOS, help=argparse.SUPPRESS)  # one process's part
    args = ap.parse_args(argv)
    if args.scenario:
        print("NVRTC-PROBE " + json.dumps(_scenario(args.scenario, _arch())))
        return 0
    if not args.out:
        ap.error("OUTDIR is required")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    records: list[dict[str, Any]] = []
    for _ in range(args.repeats):
        for name in SCENARIOS:
            proc = subprocess.run([sys.executable, __file__, "--scenario", name], capture_output=True, text=True,
                                  env=env, cwd=root, timeout=300)
            found = [ln for ln in proc.stdout.splitlines() if ln.startswith("NVRTC-PROBE ")]
            if proc.returncode != 0 or not found:
                records.append({"scenario": name, "error": f"exit {proc.returncode}: {proc.stderr[-600:]}"})
            else:
                records.append(json.loads(found[-1][len("NVRTC-PROBE "):]))
    (out / "nvrtc_log_probe.json").write_text(json.dumps(records, indent=1))
    lines = ["# NVRTC's program log: does it carry the ptxas -v report?", "", *summarize(records)]
    (out / "nvrtc_log_probe.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
