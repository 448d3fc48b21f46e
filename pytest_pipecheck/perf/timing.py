"""Device-side timing of a kernel launch, and the GPU's measured ceilings.

What the host clock sees is launch overhead and queueing, so every time here is taken with CUDA
events on the device (STYLE.md habit 10). One sample is::

    [sleep]  [L2 flush]  event  launch x reps  event

* ``sleep`` (``torch.cuda._sleep``) keeps the GPU busy while the host enqueues the flush, the events
  and the launch, so the interval between the events never contains time the GPU spent waiting for
  the host;
* the flush writes a buffer twice the size of the device's L2 (size read from the device), so every
  sample starts cold, as a kernel in a real model usually does. ``hot_cache=True`` skips it and warms
  the inputs instead, for kernels whose data lives in L2 in production;
* ``reps`` launches per sample amortise event resolution. In cold mode, a callable taking an index
  (``n_inputs=k``) is called on input set ``i % k``, so the k launches of one sample each read
  different, cold data (input rotation); otherwise reps is 1;
* ``graph=True`` captures the reps launches in a CUDA graph and replays it, which removes per-launch
  CPU overhead for kernels of a few microseconds.

Warm-up runs for a fixed time (compilation, autotuning, clock ramp-up), not a fixed count.
torch is imported inside the functions.
"""

from __future__ import annotations

import functools
import inspect
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..results import PipecheckError
from .stats import Samples

__all__ = ["Ceilings", "measure", "measure_ceilings", "roofline"]

# The number of samples the gate is designed around (docs/perf-gate.md): with 100 per side the
# rank test's own noise is far below the 3% practical threshold.
DEFAULT_SAMPLES = 100
_MIN_SAMPLE_US = 200.0  # hot mode: enough launches per sample that event resolution (~0.5 us) is noise


def _torch_cuda() -> Any:
    try:
        import torch
    except ImportError:
        raise PipecheckError("perf timing needs torch (pip install torch); it is not installed") from None
    if not torch.cuda.is_available():
        raise PipecheckError("perf timing needs a CUDA device, and torch.cuda.is_available() is False")
    return torch


def _takes_index(fn: Callable[..., Any]) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    params = [p for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]
    return len(params) >= 1


@functools.lru_cache(maxsize=8)
def _sleep_cycles_per_us(device_index: int) -> float:
    """Calibrate ``torch.cuda._sleep`` (it counts clock cycles, and clocks differ by GPU)."""
    torch = _torch_cuda()
    cycles = 1_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)  # first call pays for module loading
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    us = start.elapsed_time(end) * 1000.0
    return cycles / us if us > 0 else 1000.0


def measure(
    fn: Callable[..., Any],
    *,
    n_samples: int = DEFAULT_SAMPLES,
    warmup_s: float = 0.2,
    max_time_s: float = 30.0,
    hot_cache: bool = False,
    graph: bool = False,
    n_inputs: int | None = None,
    reps: int | None = None,
) -> Samples:
    """Time ``fn`` (one kernel launch, or ``fn(i)`` for input set i) on the current CUDA device.

    Returns :class:`Samples` of per-launch times in microseconds, with ``meta`` recording the mode.
    Stops early, keeping what it has, if ``max_time_s`` runs out (at least 10 samples are always
    taken). Raises :class:`PipecheckError` without torch or CUDA, for invalid arguments, or when graph
    capture of ``fn`` fails.
    """
    torch = _torch_cuda()
    if n_samples < 2:
        raise PipecheckError(f"check_perf: n_samples={n_samples} must be >= 2")
    if n_inputs is not None and n_inputs < 1:
        raise PipecheckError(f"check_perf: n_inputs={n_inputs} must be >= 1")
    if reps is not None and reps < 1:
        raise PipecheckError(f"check_perf: reps={reps} must be >= 1")
    indexed = n_inputs is not None
    if indexed and not _takes_index(fn):
        raise PipecheckError("check_perf: n_inputs is given, so the callable must take the input-set index")
    k = n_inputs or 1
    counter = [0]

    def call() -> None:
        if indexed:
            fn(counter[0] % k)
            counter[0] += 1
        else:
            fn()

    device = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(device)
    l2 = int(getattr(props, "L2_cache_size", 0) or 0) or 128 * 2**20
    stream = torch.cuda.current_stream()

    # Warm-up by time: the first calls compile, autotune and ramp the clocks up.
    t0 = time.perf_counter()
    calls = 0
    while calls < 3 or time.perf_counter() - t0 < warmup_s:
        call()
        calls += 1
        if calls % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()

    # Estimate one launch's device time and host enqueue time.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    probe = 5
    h0 = time.perf_counter()
    start.record()
    for _ in range(probe):
        call()
    end.record()
    host_us = (time.perf_counter() - h0) * 1e6 / probe
    end.synchronize()
    est_us = max(start.elapsed_time(end) * 1000.0 / probe, 1e-3)

    if reps is None:
        reps = max(1, math.ceil(_MIN_SAMPLE_US / est_us)) if hot_cache else k
    flush = None if hot_cache else torch.empty(max(2 * l2, 8 * 2**20) // 4, dtype=torch.int32, device=device)

    body: Callable[[], Any]
    if graph:
        def launches() -> None:
            for _ in range(reps):
                call()

        side = torch.cuda.Stream()
        side.wait_stream(stream)
        try:
            with torch.cuda.stream(side):
                launches()
            stream.wait_stream(side)
            cuda_graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(cuda_graph):
                launches()
        except Exception as exc:  # capture fails for host syncs, allocations, CPU tensors...
            raise PipecheckError(f"check_perf(graph=True): CUDA graph capture of the callable failed: {exc}") from None
        body = cuda_graph.replay
        host_us = 15.0  # one graph launch
    else:
        def body() -> None:
            for _ in range(reps):
                call()

        host_us *= reps

    sleep: Callable[[int], Any] | None = getattr(torch.cuda, "_sleep", None)
    sleep_cycles = 0
    if sleep is not None:
        # Cover the host's enqueue of flush + events + body, with margin for Python jitter.
        sleep_cycles = int((2.0 * host_us + 20.0) * _sleep_cycles_per_us(device))

    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_samples)]
    taken = 0
    deadline = time.perf_counter() + max_time_s
    for i in range(n_samples):
        if hot_cache and i == 0:
            body()  # the inputs are in L2 when timing starts
        if sleep is not None and sleep_cycles:
            sleep(sleep_cycles)
        if flush is not None:
            flush.zero_()
        starts[i].record()
        body()
        ends[i].record()
        taken += 1
        if i % 16 == 15:
            # Bound the queue (and the time) without syncing every sample.
            ends[i].synchronize()
            if time.perf_counter() > deadline and taken >= 10:
                break
    torch.cuda.synchronize()
    times = [starts[i].elapsed_time(ends[i]) * 1000.0 / reps for i in range(taken)]
    meta = {
        "mode": "hot" if hot_cache else "cold",
        "reps": reps,
        "graph": graph,
        "n_inputs": k,
        "flush_bytes": 0 if flush is None else flush.numel() * 4,
        "l2_bytes": l2,
        "warmup_s": warmup_s,
        "warmup_calls": calls,
        "sleep_cycles": sleep_cycles,
        "requested_samples": n_samples,
    }
    return Samples(tuple(times), meta)


# --------------------------------------------------------------------------- ceilings


@dataclass(frozen=True)
class Ceilings:
    """The GPU's measured ceilings: dense matrix rate per dtype (FLOP/s) and copy bandwidth (B/s)."""

    matmul_flops: dict[str, float]
    copy_bytes_per_s: float
    device: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"matmul_tflops": {k: v / 1e12 for k, v in self.matmul_flops.items()},
                "copy_gbps": self.copy_bytes_per_s / 1e9, "device": self.device}


def roofline(ceilings: Ceilings, median_us: float, *, flops: float | None, nbytes: float | None,
             dtype: str = "fp16") -> tuple[float, str] | None:
    """Fraction of the measured roofline a kernel reached, and what bounds it.

    The roofline time is ``max(flops / matrix rate, bytes / copy bandwidth)``; the fraction is that time
    over the measured median (1.0 = at the ceiling). Returns None when neither count is given. Raises
    :class:`PipecheckError` for a dtype without a measured matrix rate.
    """
    if flops is None and nbytes is None:
        return None
    bound_s = 0.0
    limit = ""
    if flops is not None:
        if dtype not in ceilings.matmul_flops:
            raise PipecheckError(
                f"check_perf: dtype={dtype!r} has no measured matrix rate; known: {sorted(ceilings.matmul_flops)}"
            )
        bound_s = flops / ceilings.matmul_flops[dtype]
        limit = f"measured {dtype} matmul peak"
    if nbytes is not None:
        mem_s = nbytes / ceilings.copy_bytes_per_s
        if mem_s > bound_s:
            bound_s, limit = mem_s, "measured copy bandwidth"
    return bound_s / (median_us * 1e-6), limit


@functools.lru_cache(maxsize=8)
def measure_ceilings(device_index: int = 0) -> Ceilings:
    """Measure the matrix rate (fp16, bf16; torch.matmul at 8192^3) and device-to-device copy bandwidth.

    Measured once per process and device: a datasheet peak is not what this GPU, at its clocks and
    power limit, can reach. The best of several timed repetitions is the ceiling.
    """
    torch = _torch_cuda()
    with torch.cuda.device(device_index):
        def best_us(fn: Callable[[], Any], reps: int = 10) -> float:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            times = []
            for _ in range(reps):
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                times.append(s.elapsed_time(e) * 1000.0)
            return min(times)

        def matmul_rate(dt: Any, n: int = 8192) -> float:
            a = torch.randn(n, n, device="cuda", dtype=dt)
            b = torch.randn(n, n, device="cuda", dtype=dt)
            c = torch.empty(n, n, device="cuda", dtype=dt)
            us = best_us(lambda: torch.matmul(a, b, out=c))
            return 2.0 * n**3 / (us * 1e-6)

        def copy_rate(nbytes: int = 2**30) -> float:
            src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            us = best_us(lambda: dst.copy_(src))
            return 2.0 * nbytes / (us * 1e-6)  # read + write

        rates = {"fp16": matmul_rate(torch.float16), "bf16": matmul_rate(torch.bfloat16)}
        bw = copy_rate()
        torch.cuda.empty_cache()  # the 2 GiB of buffers above go back to the driver
        return Ceilings(rates, bw, torch.cuda.get_device_name(device_index))
