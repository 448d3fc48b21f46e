"""Device-side timing of a kernel launch, and the GPU's measured ceilings.

What the host clock sees is launch overhead and queueing, so every time here is taken with CUDA
events on the device, as Triton's ``do_bench`` does. One sample is::

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

**Anchoring** (``anchor=``): the time of a compute-bound kernel follows the SM clock, which moves
with the GPU's power and thermal state (boost right after idle, lower under sustained load), so two
runs of the same code can differ by far more than the gate's threshold. An :class:`Anchor` is a
fixed workload of the same kind (a bf16/fp16 matmul of a fixed shape, or a device copy of a fixed
size) sized to a duration comparable to the kernel's; it is timed right after every kernel sample,
with its own flush, so sample i of both runs at the same clock::

    [sleep] [flush] event kernel event  [sleep] [flush] event anchor event   (x n_samples)

The gate then compares kernel/anchor ratios (:mod:`.stats`). :func:`choose_anchor` picks the kind
from the declared FLOPs and bytes: arithmetic intensity at or above the ridge point of the measured
ceilings (matrix rate / copy bandwidth) is compute-bound (matmul anchor), below it memory-bound
(copy anchor). ``settle_s`` runs the anchor (or the kernel) without a break for that long before the
first sample, so the clocks leave the after-idle boost before timing starts.

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

__all__ = ["ANCHOR_KINDS", "Anchor", "Ceilings", "Sampler", "choose_anchor", "current_ceilings", "measure",
           "measure_ceilings", "roofline", "size_anchor"]

# The number of samples the gate is designed around (docs/perf-gate.md): with 100 per side the
# rank test's own noise is far below the 3% practical threshold.
DEFAULT_SAMPLES = 100
_MIN_SAMPLE_US = 200.0  # hot mode: enough launches per sample that event resolution (~0.5 us) is noise
# How long check_perf keeps the GPU busy before its first sample (see docs/perf-gate.md, "settle").
DEFAULT_SETTLE_S = 0.5

ANCHOR_KINDS = ("matmul", "copy")
_ANCHOR_MN = 2048  # matmul anchor: (2048 x K) @ (K x 2048), K from the ladder below
_ANCHOR_K_LADDER = tuple(2**j for j in range(8, 16))  # 256 .. 32768
_ANCHOR_COPY_LADDER = tuple(2**j for j in range(20, 30))  # copy anchor source size: 1 MiB .. 512 MiB
_ANCHOR_MATMUL_EFFICIENCY = 0.75  # for sizing only: what a 2048^2 x K cuBLAS matmul reaches of the peak


def _torch_cuda() -> Any:
    try:
        import torch
    except ImportError:
        raise PipecheckError("perf timing needs torch (pip install torch); it is not installed") from None
    if not torch.cuda.is_available():
        raise PipecheckError("perf timing needs a CUDA device, and torch.cuda.is_available() is False")
    return torch


def run_once_for_sanitizer(fn: Callable[..., Any]) -> None:
    """Launch ``fn`` once (index 0 if it takes an input index) and wait for the device, so that the
    sanitizer sees the kernel and its findings land inside this test's markers."""
    fn(0) if _takes_index(fn) else fn()
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:
            cupy.cuda.Device().synchronize()
        except Exception:  # no CUDA context from CuPy in this process: nothing of it to wait for
            pass


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


def _run_for(call: Callable[[], Any], seconds: float, torch: Any, min_calls: int = 3) -> int:
    """Call ``call`` back to back for ``seconds`` (bounded queue); returns the number of calls."""
    t0 = time.perf_counter()
    calls = 0
    while calls < min_calls or time.perf_counter() - t0 < seconds:
        call()
        calls += 1
        if calls % 8 == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return calls


def _probe(call: Callable[[], Any], torch: Any, probe: int = 5) -> tuple[float, float]:
    """(device us, host enqueue us) of one call, from ``probe`` back-to-back calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    h0 = time.perf_counter()
    start.record()
    for _ in range(probe):
        call()
    end.record()
    host_us = (time.perf_counter() - h0) * 1e6 / probe
    end.synchronize()
    return max(start.elapsed_time(end) * 1000.0 / probe, 1e-3), host_us


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
    anchor: Anchor | str | None = None,
    ceilings: Ceilings | None = None,
    anchor_dtype: str = "bf16",
    settle_s: float = 0.0,
) -> Samples:
    """Time ``fn`` (one kernel launch, or ``fn(i)`` for input set i) on the current CUDA device.

    Returns :class:`Samples` of per-launch times in microseconds, with ``meta`` recording the mode.
    ``anchor`` (an :class:`Anchor`, or ``"matmul"`` / ``"copy"`` to size one from the kernel's
    probed time and ``ceilings``) is timed after every kernel sample, under the same clock, and its
    times are returned as the samples' ``anchor_us``. ``settle_s`` keeps the GPU busy (with the
    anchor, else the kernel) for that long before the first sample. Stops early, keeping what it
    has, if ``max_time_s`` runs out (at least 10 samples are always taken). Raises
    :class:`PipecheckError` without torch or CUDA, for invalid arguments, or when graph capture of
    ``fn`` fails.
    """
    if n_samples < 2:
        raise PipecheckError(f"check_perf: n_samples={n_samples} must be >= 2")
    sampler = Sampler(fn, warmup_s=warmup_s, hot_cache=hot_cache, graph=graph, n_inputs=n_inputs, reps=reps,
                      anchor=anchor, ceilings=ceilings, anchor_dtype=anchor_dtype, settle_s=settle_s)
    sampler.settle(settle_s)
    sampler.arm()
    torch = sampler.torch

    def events() -> list[Any]:
        return [torch.cuda.Event(enable_timing=True) for _ in range(n_samples)]

    anchored = sampler.anchor_call is not None
    starts, ends = events(), events()
    a_starts, a_ends = (events(), events()) if anchored else ([], [])
    taken = 0
    deadline = time.perf_counter() + max_time_s
    for i in range(n_samples):
        if sampler.hot_cache and i == 0:
            sampler.warm_inputs()  # the inputs are in L2 when timing starts
        sampler.record(starts[i], ends[i], a_starts[i] if anchored else None, a_ends[i] if anchored else None)
        taken += 1
        if i % 16 == 15:
            # Bound the queue (and the time) without syncing every sample.
            (a_ends if anchored else ends)[i].synchronize()
            if time.perf_counter() > deadline and taken >= 10:
                break
    torch.cuda.synchronize()
    times = [starts[i].elapsed_time(ends[i]) * 1000.0 / sampler.reps for i in range(taken)]
    anchor_times = ([a_starts[i].elapsed_time(a_ends[i]) * 1000.0 / sampler.anchor_reps for i in range(taken)]
                    if anchored else None)
    return sampler.samples(times, anchor_times, n_samples)


class Sampler:
    """One kernel (and its anchor) made ready to time, one sample at a time: :func:`measure`'s machinery.

    Construction validates the arguments, warms ``fn`` up for ``warmup_s``, probes one launch's device and
    host time and, with ``anchor``, builds, warms up and probes the anchor; :meth:`settle` keeps the GPU
    busy; :meth:`arm` fixes the launches per sample, the L2 flush buffer, the CUDA graph and the sleep that
    covers the host's enqueue. Then :meth:`record` enqueues one sample between two events (what
    :func:`measure` does n times, synchronizing every 16), and :meth:`one` takes one sample and waits for
    it: what ``--pipecheck-compare`` uses to time the head and REV in turns (:mod:`.compare`), where the
    other process runs between two samples.
    """

    def __init__(self, fn: Callable[..., Any], *, warmup_s: float = 0.2, hot_cache: bool = False,
                 graph: bool = False, n_inputs: int | None = None, reps: int | None = None,
                 anchor: Anchor | str | None = None, ceilings: Ceilings | None = None, anchor_dtype: str = "bf16",
                 settle_s: float = 0.0) -> None:
        torch = self.torch = _torch_cuda()
        if n_inputs is not None and n_inputs < 1:
            raise PipecheckError(f"check_perf: n_inputs={n_inputs} must be >= 1")
        if reps is not None and reps < 1:
            raise PipecheckError(f"check_perf: reps={reps} must be >= 1")
        if not (settle_s >= 0.0 and math.isfinite(settle_s)):
            raise PipecheckError(f"check_perf: settle_s={settle_s!r} must be a finite number >= 0")
        if isinstance(anchor, str) and ceilings is None:
            raise PipecheckError(f"measure(anchor={anchor!r}): sizing an anchor needs the measured ceilings")
        indexed = n_inputs is not None
        if indexed and not _takes_index(fn):
            raise PipecheckError("check_perf: n_inputs is given, so the callable must take the input-set index")
        k = self.n_inputs = n_inputs or 1
        counter = [0]

        def call() -> None:
            if indexed:
                fn(counter[0] % k)
                counter[0] += 1
            else:
                fn()

        self.call = call
        self.hot_cache = hot_cache
        self.graph = graph
        self.warmup_s = warmup_s
        self.settle_s = 0.0
        self.settle_calls = 0
        self.device = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(self.device)
        self.l2 = int(getattr(props, "L2_cache_size", 0) or 0) or 128 * 2**20
        self.stream = torch.cuda.current_stream()

        # Warm-up by time: the first calls compile, autotune and ramp the clocks up.
        self.warmup_calls = _run_for(call, warmup_s, torch)

        # Estimate one launch's device time and host enqueue time.
        self.est_us, self.host_us = _probe(call, torch)

        self.anchor_def: Anchor | None
        if isinstance(anchor, str):
            assert ceilings is not None
            self.anchor_def = size_anchor(anchor, self.est_us * (k if not hot_cache else 1), ceilings, anchor_dtype)
        else:
            self.anchor_def = anchor
        self.anchor_call: Callable[[], Any] | None = None
        self.anchor_reps = 1
        self.anchor_host_us = 0.0
        if self.anchor_def is not None:
            self.anchor_call = self.anchor_def.build(torch)
            _run_for(self.anchor_call, min(warmup_s, 0.05), torch)
            anchor_est_us, self.anchor_host_us = _probe(self.anchor_call, torch)
            if hot_cache:
                self.anchor_reps = max(1, math.ceil(_MIN_SAMPLE_US / anchor_est_us))
            self.anchor_host_us *= self.anchor_reps
        self._reps_asked = reps
        self.reps = 1
        self.flush: Any = None
        self.body: Callable[[], Any] = call
        self.sleep: Callable[[int], Any] | None = None
        self.sleep_cycles = self.anchor_sleep_cycles = 0

    def settle(self, seconds: float) -> int:
        """A steady load before the first sample, so the clocks leave the after-idle boost (the anchor
        when there is one, else the kernel); returns the calls made."""
        calls = _run_for(self.anchor_call or self.call, seconds, self.torch, min_calls=0) if seconds > 0 else 0
        self.settle_s += seconds
        self.settle_calls += calls
        return calls

    def arm(self) -> None:
        """Fix how a sample is taken: launches per sample, the flush, the CUDA graph, the covering sleep."""
        torch = self.torch
        k = self.n_inputs
        reps = self._reps_asked
        if reps is None:
            reps = max(1, math.ceil(_MIN_SAMPLE_US / self.est_us)) if self.hot_cache else k
        self.reps = reps
        self.flush = (None if self.hot_cache
                      else torch.empty(max(2 * self.l2, 8 * 2**20) // 4, dtype=torch.int32, device=self.device))
        call = self.call
        host_us = self.host_us

        if self.graph:
            def launches() -> None:
                for _ in range(reps):
                    call()

            side = torch.cuda.Stream()
            side.wait_stream(self.stream)
            try:
                with torch.cuda.stream(side):
                    launches()
                self.stream.wait_stream(side)
                cuda_graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(cuda_graph):
                    launches()
            except Exception as exc:  # capture fails for host syncs, allocations, CPU tensors...
                raise PipecheckError(f"check_perf(graph=True): CUDA graph capture of the callable failed: {exc}") from None
            self.body = cuda_graph.replay
            host_us = 15.0  # one graph launch
        else:
            def body() -> None:
                for _ in range(reps):
                    call()

            self.body = body
            host_us *= reps

        self.sleep = getattr(torch.cuda, "_sleep", None)
        if self.sleep is not None:
            # Cover the host's enqueue of flush + events + body, with margin for Python jitter.
            self.sleep_cycles = int((2.0 * host_us + 20.0) * _sleep_cycles_per_us(self.device))
            self.anchor_sleep_cycles = int((2.0 * self.anchor_host_us + 20.0) * _sleep_cycles_per_us(self.device))

    def _anchor_body(self) -> None:
        assert self.anchor_call is not None
        for _ in range(self.anchor_reps):
            self.anchor_call()

    def warm_inputs(self) -> None:
        """Hot mode: one untimed run of the sample's launches (and the anchor's), so their data is in L2."""
        self.body()
        if self.anchor_call is not None:
            self._anchor_body()

    def _timed(self, start: Any, end: Any, what: Callable[[], Any], cycles: int) -> None:
        if self.sleep is not None and cycles:
            self.sleep(cycles)
        if self.flush is not None:
            self.flush.zero_()
        start.record()
        what()
        end.record()

    def record(self, start: Any, end: Any, anchor_start: Any = None, anchor_end: Any = None) -> None:
        """Enqueue one sample between ``start`` and ``end`` and, with an anchor, the anchor's right after it
        (the same clock, power and thermal state) between ``anchor_start`` and ``anchor_end``."""
        self._timed(start, end, self.body, self.sleep_cycles)
        if self.anchor_call is not None:
            self._timed(anchor_start, anchor_end, self._anchor_body, self.anchor_sleep_cycles)

    def one(self) -> tuple[float, float | None]:
        """Take one sample now and wait for it: (kernel us per launch, anchor us or None).

        In hot mode the inputs are warmed first, every time: the process timed in turn with this one
        ran in between and left its own data in L2."""
        torch = self.torch
        if self.hot_cache:
            self.warm_inputs()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a_start = a_end = None
        if self.anchor_call is not None:
            a_start, a_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.record(start, end, a_start, a_end)
        (a_end if a_end is not None else end).synchronize()
        kernel_us = start.elapsed_time(end) * 1000.0 / self.reps
        anchor_us = a_start.elapsed_time(a_end) * 1000.0 / self.anchor_reps if a_start is not None else None
        return kernel_us, anchor_us

    def meta(self, requested: int) -> dict[str, Any]:
        """How the samples were taken (the ``meta`` of :class:`Samples`)."""
        meta: dict[str, Any] = {
            "mode": "hot" if self.hot_cache else "cold",
            "reps": self.reps,
            "graph": self.graph,
            "n_inputs": self.n_inputs,
            "flush_bytes": 0 if self.flush is None else self.flush.numel() * 4,
            "l2_bytes": self.l2,
            "warmup_s": self.warmup_s,
            "warmup_calls": self.warmup_calls,
            "settle_s": self.settle_s,
            "settle_calls": self.settle_calls,
            "sleep_cycles": self.sleep_cycles,
            "requested_samples": requested,
        }
        if self.anchor_def is not None:
            meta["anchor"] = self.anchor_def.label
            meta["anchor_reps"] = self.anchor_reps
        return meta

    def samples(self, times: list[float], anchor_times: list[float] | None, requested: int) -> Samples:
        """The times taken, as :class:`Samples` with this sampler's ``meta`` and anchor."""
        return Samples(tuple(times), self.meta(requested), None if anchor_times is None else tuple(anchor_times),
                       None if self.anchor_def is None else self.anchor_def.definition())


# --------------------------------------------------------------------------- anchors


@dataclass(frozen=True)
class Anchor:
    """A fixed reference workload timed interleaved with the kernel: what the clock does to both.

    ``kind="matmul"``: ``torch.matmul`` of (m x k) by (k x n) in ``dtype`` (compute-bound).
    ``kind="copy"``: a device-to-device copy of ``nbytes`` (memory-bound). The definition is stored
    with a baseline; a candidate is timed with the baseline's anchor so the ratios are comparable.
    """

    kind: str
    dtype: str = "bf16"
    m: int = 0
    n: int = 0
    k: int = 0
    nbytes: int = 0

    def __post_init__(self) -> None:
        if self.kind not in ANCHOR_KINDS:
            raise PipecheckError(f"anchor kind {self.kind!r} is not one of {ANCHOR_KINDS}")
        if self.kind == "matmul":
            if self.dtype not in ("bf16", "fp16") or min(self.m, self.n, self.k) < 1:
                raise PipecheckError(f"matmul anchor needs dtype bf16/fp16 and positive m, n, k: {self!r}")
        elif self.nbytes < 1:
            raise PipecheckError(f"copy anchor needs nbytes > 0: {self!r}")

    @property
    def label(self) -> str:
        if self.kind == "matmul":
            return f"{self.dtype} matmul {self.m}x{self.n}x{self.k}"
        mib = self.nbytes / 2**20
        return f"copy {mib:g} MiB" if mib >= 1 else f"copy {self.nbytes} B"

    def definition(self) -> dict[str, Any]:
        """The JSON definition stored in a baseline (``label`` is presentation only)."""
        if self.kind == "matmul":
            return {"kind": "matmul", "dtype": self.dtype, "m": self.m, "n": self.n, "k": self.k,
                    "op": "torch.matmul", "label": self.label}
        return {"kind": "copy", "nbytes": self.nbytes, "op": "torch.Tensor.copy_", "label": self.label}

    @classmethod
    def from_definition(cls, data: Any) -> Anchor:
        """Inverse of :meth:`definition`; raises :class:`PipecheckError` for a definition it cannot run."""
        if not isinstance(data, dict) or data.get("kind") not in ANCHOR_KINDS:
            raise PipecheckError(f"unknown anchor definition {data!r}")
        try:
            if data["kind"] == "matmul":
                return cls("matmul", dtype=str(data["dtype"]), m=int(data["m"]), n=int(data["n"]), k=int(data["k"]))
            return cls("copy", nbytes=int(data["nbytes"]))
        except (KeyError, TypeError, ValueError):
            raise PipecheckError(f"anchor definition {data!r} is incomplete") from None

    def estimate_us(self, ceilings: Ceilings) -> float:
        """Expected duration from the measured ceilings (for sizing only)."""
        if self.kind == "matmul":
            rate = ceilings.matmul_flops.get(self.dtype) or max(ceilings.matmul_flops.values())
            return 2.0 * self.m * self.n * self.k / (rate * _ANCHOR_MATMUL_EFFICIENCY) * 1e6
        return 2.0 * self.nbytes / ceilings.copy_bytes_per_s * 1e6

    def build(self, torch: Any) -> Callable[[], Any]:
        """Allocate the inputs on the current device and return the launch."""
        if self.kind == "matmul":
            dt = torch.bfloat16 if self.dtype == "bf16" else torch.float16
            gen = torch.Generator(device="cuda").manual_seed(0)
            a = torch.randn(self.m, self.k, device="cuda", dtype=dt, generator=gen)
            b = torch.randn(self.k, self.n, device="cuda", dtype=dt, generator=gen)
            c = torch.empty(self.m, self.n, device="cuda", dtype=dt)
            return lambda: torch.matmul(a, b, out=c)
        src = torch.ones(self.nbytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)


def size_anchor(kind: str, target_us: float, ceilings: Ceilings, dtype: str = "bf16") -> Anchor:
    """The anchor of ``kind`` from a fixed ladder of sizes whose expected duration is nearest ``target_us``.

    A ladder (K doubling for the matmul, bytes doubling for the copy) keeps definitions few and stable:
    reruns of one kernel pick the same anchor, and the candidate reuses the baseline's anyway.
    """
    target = max(float(target_us), 1.0)
    if kind == "matmul":
        dt = dtype if dtype in ("bf16", "fp16") else "bf16"
        options = [Anchor("matmul", dtype=dt, m=_ANCHOR_MN, n=_ANCHOR_MN, k=k) for k in _ANCHOR_K_LADDER]
    elif kind == "copy":
        options = [Anchor("copy", nbytes=b) for b in _ANCHOR_COPY_LADDER]
    else:
        raise PipecheckError(f"check_perf: anchor={kind!r} must be 'matmul', 'copy' or None")
    return min(options, key=lambda a: abs(math.log(a.estimate_us(ceilings) / target)))


def choose_anchor(flops: float | None, nbytes: float | None, ceilings: Ceilings | None,
                  dtype: str = "fp16") -> tuple[str | None, str]:
    """The anchor kind for a kernel from its declared counts, and why, as a phrase for the report.

    Both counts: arithmetic intensity ``flops / bytes`` against the ridge point of the measured
    ceilings (matrix rate of ``dtype`` / copy bandwidth): at or above it compute-bound (``"matmul"``),
    below memory-bound (``"copy"``). Only FLOPs: matmul; only bytes: copy; neither: None (no basis
    to choose; the timing is not anchored and the reason says how to anchor it).
    """
    if flops is None and nbytes is None:
        return None, "not anchored: declare flops= and/or bytes= (or pass anchor='matmul' or 'copy')"
    if nbytes is None:
        return "matmul", "flops declared without bytes: compute-bound"
    if flops is None:
        return "copy", "bytes declared without flops: memory-bound"
    intensity = flops / nbytes
    if ceilings is None:
        raise PipecheckError("choose_anchor: both counts are declared, so the measured ceilings are needed")
    rate = ceilings.matmul_flops.get(dtype) or max(ceilings.matmul_flops.values())
    ridge = rate / ceilings.copy_bytes_per_s
    if intensity >= ridge:
        return "matmul", f"arithmetic intensity {intensity:.3g} FLOP/B >= ridge point {ridge:.3g}: compute-bound"
    return "copy", f"arithmetic intensity {intensity:.3g} FLOP/B < ridge point {ridge:.3g}: memory-bound"


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


def current_ceilings() -> Ceilings:
    """:func:`measure_ceilings` of the current CUDA device (measured once per process and device)."""
    torch = _torch_cuda()
    return measure_ceilings(torch.cuda.current_device())


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
