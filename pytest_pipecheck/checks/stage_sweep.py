"""``pipecheck.check_stage_sweep``: time a kernel at each pipeline depth and check the chosen one.

A kernel's stage count is a tuning choice that goes stale: a new GPU, compiler or tile size moves
the fastest depth, and one stage too many can cross the shared-memory cliff (fewer blocks per SM)
or not fit at all. The sweep times the kernel at every stage count given and fails when the
kernel's configured count (``chosen=``) is slower than the fastest by more than ``max_loss``.

The flow of one call:

1. validate the arguments (one-line :class:`PipecheckError` naming the argument);
2. on the CPU tier, without an injected ``timer=``, record the check as skipped with the reason;
3. for each stage count ``s``: time ``run(s)`` on the device with :func:`..perf.timing.measure`
   (the first calls of its warm-up compile the kernel, its settle time steadies the clock). A launch
   that fails because the configuration does not fit (Triton's ``OutOfResources``, a CUDA launch
   error about resources or shared memory) makes that row "does not fit: ..." instead of an error;
   any other exception is recorded as an ``error`` result, with the rows so far, and propagates;
4. optionally predict each stage count's time with :mod:`..perf.cost_model` from the load-only and
   compute-only variants (``load_only=``, ``compute_only=``, ``tiles=``), and its blocks/SM from
   its resources (``resources=``) on ``arch``;
5. the verdict: with ``chosen``, fail when its median is slower than the fastest stage count's
   median by more than ``max_loss`` (or when the chosen count does not fit); without it, pass and
   record. A sweep where no stage count fits fails.

The result's check name is ``perf:stage_sweep``: it is a timing check, selected with ``perf`` in
``--pipecheck-checks``. Its details carry ``stage_sweep`` (one row per stage count: ``stages``,
``measured_us``, ``q1_us``, ``q3_us``, ``n``, ``predicted_us``, ``blocks_per_sm``, ``tflops``,
``note``), ``best_stages``, ``chosen``, ``loss`` and ``max_loss``; the HTML report draws them.

Stage counts are timed one after another, not interleaved, and not anchored: each gets the same
warm-up and settle, but the clock may still move a little between them. Keep ``max_loss`` above
the run-to-run noise of the kernel (a few percent for a GEMM of a few hundred microseconds).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..results import CheckResult, PipecheckError, PipecheckFailure, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from ..perf.stats import Samples
    from .context import CheckContext

__all__ = ["CHECK", "TIMING_KEYWORDS", "check_stage_sweep", "does_not_fit", "skip", "sweep_table"]

CHECK = "perf:stage_sweep"
# keywords passed on to perf.timing.measure (n_inputs is not: run takes the stage count only)
TIMING_KEYWORDS = ("n_samples", "warmup_s", "max_time_s", "reps", "settle_s", "hot_cache", "graph")

Timer = Callable[..., Any]

# CUDA's words for a launch that asks for more than a block may have (driver, runtime, torch, cupy)
_NO_FIT = re.compile(
    r"out of resource|too many resources requested|CUDA_ERROR_OUT_OF_RESOURCES|cudaErrorLaunchOutOfResources"
    r"|shared memory.{0,80}(exceed|too (large|much|many)|limit|insufficient|not enough)"
    r"|(exceed|too (large|much)|insufficient|not enough).{0,80}shared memory",
    re.IGNORECASE | re.DOTALL,
)


# ----------------------------------------------------------------------------- small helpers


def _where(ctx: CheckContext) -> str:
    return f" in {ctx.nodeid}" if ctx.nodeid else ""


def _format_us(us: float) -> str:
    """Times as the failure message shows them: 0.262 ms from 100 us on, else microseconds."""
    return f"{us / 1000.0:.3f} ms" if us >= 100.0 else f"{us:.2f} us"


def _percent(fraction: float) -> str:
    value = fraction * 100.0
    return f"{value:.0f}%" if abs(value) >= 10.0 else f"{value:.1f}%"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def does_not_fit(exc: BaseException) -> str | None:
    """Why a launch failed for lack of resources ("out of shared memory: needs 256 KB, ..."), or None.

    Recognises Triton's ``OutOfResources`` (any Triton module; it carries ``required``, ``limit``
    and ``name``) and CUDA errors whose message says the launch asked for too many resources or
    too much shared memory. Anything else is not a fit problem: None.
    """
    from ..occupancy import format_bytes

    cls = type(exc)
    if cls.__name__ == "OutOfResources" and (cls.__module__ or "").startswith("triton"):
        resource = getattr(exc, "name", None) or "shared memory"
        required = getattr(exc, "required", None)
        limit = getattr(exc, "limit", None)
        parts = [f"out of {resource}"]
        if isinstance(required, int) and not isinstance(required, bool):
            parts.append(f"needs {format_bytes(required) if 'memory' in str(resource) else required}")
        if isinstance(limit, int) and not isinstance(limit, bool):
            parts.append(f"the limit is {format_bytes(limit) if 'memory' in str(resource) else limit}")
        return ", ".join(parts)
    text = str(exc)
    if _NO_FIT.search(text):
        return f"{cls.__name__}: {_first_line(exc)}"
    return None


# ----------------------------------------------------------------------------- argument checks


def _stage_list(stages: Any, where: str) -> list[int]:
    if isinstance(stages, (str, bytes)) or not isinstance(stages, Iterable):
        raise PipecheckError(f"check_stage_sweep(stages={stages!r}){where}: give a list of stage counts")
    out: list[int] = []
    for s in stages:
        if isinstance(s, bool) or not isinstance(s, int):
            raise PipecheckError(f"check_stage_sweep(stages=...){where}: stage count {s!r} is not an integer")
        if s < 1:
            raise PipecheckError(f"check_stage_sweep(stages=...){where}: stage count {s} must be >= 1")
        if s in out:
            raise PipecheckError(f"check_stage_sweep(stages=...){where}: stage count {s} is given twice")
        out.append(s)
    if not out:
        raise PipecheckError(f"check_stage_sweep(stages=[]){where}: give at least one stage count")
    return out


def _number(name: str, value: Any, where: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PipecheckError(f"check_stage_sweep({name}={value!r}){where}: must be a finite number")
    if value < 0 or (positive and value == 0):
        raise PipecheckError(f"check_stage_sweep({name}={value!r}){where}: must be {'> 0' if positive else '>= 0'}")
    return float(value)


def _variant(name: str, value: Any, stage_list: list[int], where: str) -> Callable[[int], Any] | dict[int, float]:
    """A variant's launch callable, or its measured times per stage count (us)."""
    if callable(value):
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, us in value.items():
            if key not in stage_list:
                raise PipecheckError(f"check_stage_sweep({name}=...){where}: stage count {key!r} is not in stages")
            out[int(key)] = _number(f"{name}[{key}]", us, where, positive=True)
        return out
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        us = _number(name, value, where, positive=True)
        return dict.fromkeys(stage_list, us)
    raise PipecheckError(f"check_stage_sweep({name}={value!r}){where}: give a callable taking the stage count, "
                         "a time in us, or a mapping {stages: us}")


def _arch(ctx: CheckContext, arch: Any, where: str) -> str:
    from ..arch import base_arch

    if arch is None:
        device = ctx.tier.device
        if device is not None:
            arch = device.arch
        elif ctx.config.arch:
            arch = ctx.config.arch[0]
        else:
            raise PipecheckError(f"check_stage_sweep(resources=...){where}: give arch= (no GPU, no configured arch)")
    if not isinstance(arch, str):
        raise PipecheckError(f"check_stage_sweep(arch={arch!r}){where}: give one architecture such as 'sm_90'")
    try:
        return base_arch(arch)
    except PipecheckError as exc:
        raise PipecheckError(f"check_stage_sweep(arch={arch!r}){where}: {exc}") from None


def _occupancy_of(res: Any, arch: str, stages: int, where: str) -> dict[str, Any]:
    """Blocks/SM (and what limits it) of one stage count's resources on ``arch``."""
    from ..occupancy import occupancy
    from ..resources.cubin import KernelResources

    what = f"check_stage_sweep(resources[{stages}]=...){where}"
    threads: Any
    registers: Any
    if isinstance(res, KernelResources):
        threads = res.threads
        if threads is None:
            raise PipecheckError(f"{what}: the block size of {res.name!r} is not known; give a mapping with threads")
        registers, static, dynamic = res.registers, res.static_smem, res.dynamic_smem
        barriers = 1 if res.barriers is None else res.barriers
    elif isinstance(res, Mapping):
        known = {"threads", "num_warps", "registers", "shared", "smem", "dynamic_smem", "static_smem", "barriers"}
        unknown = sorted(set(res) - known)
        if unknown:
            raise PipecheckError(f"{what}: unknown key {unknown[0]!r} (keys: {', '.join(sorted(known))})")
        threads = res.get("threads")
        if threads is None and res.get("num_warps") is not None:
            threads = res["num_warps"] * 32
        registers = res.get("registers")
        if threads is None or registers is None:
            raise PipecheckError(f"{what}: needs threads (or num_warps) and registers")
        dynamic = res.get("dynamic_smem", res.get("shared", res.get("smem", 0)))
        static = res.get("static_smem", 0)
        barriers = res.get("barriers", 1)
    else:
        raise PipecheckError(f"{what}: give KernelResources or a mapping with threads, registers and shared, "
                             f"got {type(res).__name__}")
    try:
        occ = occupancy(arch, threads, registers, static, dynamic, barriers=barriers)
    except PipecheckError as exc:
        raise PipecheckError(f"{what}: {exc}") from None
    return {"blocks_per_sm": occ.blocks_per_sm, "smem_bytes": occ.smem, "registers": int(registers),
            "threads": int(threads), "limiter": occ.limiter or None}


def _samples(got: Any, stages: int, what: str, where: str) -> Samples:
    from ..perf.stats import Samples, StatsError

    if isinstance(got, Samples):
        return got
    try:
        return Samples.of(got, f"timer for {what}stages={stages}")
    except (StatsError, TypeError) as exc:
        raise PipecheckError(f"check_stage_sweep{where}: {exc}") from None


# ----------------------------------------------------------------------------- the table


def sweep_table(rows: list[dict[str, Any]], chosen: int | None, best: int | None) -> str:
    """The rows as the failure message shows them: one line per stage count."""
    # the optional columns, shown when any row has a value: key, heading, width, how a value reads
    optional: list[tuple[str, str, int, Callable[[Any], str]]] = [
        ("predicted_us", "predicted", 10, _format_us),
        ("blocks_per_sm", "blocks/SM", 9, str),
        ("tflops", "TFLOP/s", 8, lambda t: f"{t:.1f}"),
    ]
    columns = [c for c in optional if any(r.get(c[0]) is not None for r in rows)]
    head = f"{'stages':>6} {'median':>10} {'q1 - q3 (us)':>17}"
    head += "".join(f" {heading:>{width}}" for _, heading, width, _ in columns)
    lines = [head + "  note"]
    for r in rows:
        m = r.get("measured_us")
        line = f"{r['stages']:>6} {_format_us(m) if m is not None else '-':>10} "
        spread = f"{r['q1_us']:.1f} - {r['q3_us']:.1f}" if m is not None else "-"
        line += f"{spread:>17}"
        for key, _, width, fmt in columns:
            v = r.get(key)
            line += f" {fmt(v) if v is not None else '-':>{width}}"
        marks = [x for x, on in (("best", r["stages"] == best), ("chosen", r["stages"] == chosen)) if on]
        note = ", ".join([*marks, *([r["note"]] if r.get("note") else [])])
        lines.append((line + "  " + note).rstrip())
    return "\n".join(lines)


# ----------------------------------------------------------------------------- the check


def check_stage_sweep(
    ctx: CheckContext,
    run: Callable[[int], Any],
    stages: Iterable[int],
    *,
    kernel: str | None = None,
    flops: float | None = None,
    chosen: int | None = None,
    max_loss: float = 0.05,
    load_only: Any = None,
    compute_only: Any = None,
    tiles: int | None = None,
    resources: Any = None,
    arch: str | None = None,
    timer: Timer | None = None,
    **timing_kw: Any,
) -> CheckResult:
    """Time ``run(s)`` for every stage count ``s`` in ``stages``; fail when ``chosen`` loses too much.

    ``run(s)`` launches the kernel once with ``s`` stages (its first calls compile it, inside the
    timing's warm-up). ``chosen`` is the kernel's configured stage count: the check fails when its
    median time is more than ``max_loss`` (a fraction, 0.05 = 5%) above the fastest stage count's,
    or when it does not fit. ``flops`` (per launch) adds TFLOP/s to each row.

    Prediction (optional, all three together): ``load_only`` and ``compute_only`` are the load-only
    and compute-only variants of the kernel, each a callable taking the stage count (timed like the
    kernel) or measured total times in us (one number, or a mapping ``{stages: us}``); ``tiles`` is
    the loop's tile count per block. Each row's ``predicted_us`` is
    :func:`..perf.cost_model.predict_from_variants`'s pipelined time.

    Occupancy (optional): ``resources`` is a mapping ``{stages: KernelResources or {"threads",
    "registers", "shared"}}`` or a callable taking the stage count (called after that count was
    timed, so it may read the compiled kernel); each row gets ``blocks_per_sm`` on ``arch`` (default:
    the GPU's architecture, else the first configured target).

    ``timer`` replaces :func:`..perf.timing.measure` (same call: ``timer(fn, **timing_kw)``,
    returning :class:`~..perf.stats.Samples` or times in us); with it the check also runs on the CPU
    tier. Other keywords go to the timer: n_samples, warmup_s, max_time_s, reps, settle_s (default
    0.5 s, as check_perf), hot_cache, graph.

    Returns the recorded :class:`CheckResult` (pass, or skip with the reason). Raises
    :class:`PipecheckFailure` when the chosen stage count loses more than ``max_loss`` or does not
    fit, or nothing fits; :class:`PipecheckError` for bad arguments. An exception from ``run`` that
    is not a does-not-fit launch failure is recorded as an error and propagates.
    """
    __tracebackhide__ = True
    try:
        return _check_stage_sweep(ctx, run, stages, kernel=kernel, flops=flops, chosen=chosen, max_loss=max_loss,
                                  load_only=load_only, compute_only=compute_only, tiles=tiles,
                                  resources=resources, arch=arch, timer=timer, timing_kw=timing_kw)
    except PipecheckFailure as exc:
        raise PipecheckFailure(str(exc), exc.result) from None
    except PipecheckError as exc:
        # re-raised from here so pytest shows the test's line and the message, not plugin frames
        raise type(exc)(str(exc)) from None


@dataclass
class _Sweep:
    """A sweep's arguments, checked: what :func:`_rows` times and :func:`_verdict` judges."""

    run: Callable[[int], Any]
    stages: list[int]
    max_loss: float
    flops: float | None
    chosen: int | None
    tiles: int  # the loop's tiles per block, for the cost-model prediction (0: no prediction)
    load_only: Callable[[int], Any] | dict[int, float] | None
    compute_only: Callable[[int], Any] | dict[int, float] | None
    resources: Any
    arch: str | None  # the architecture blocks/SM are read for (None: no resources given)
    name: str | None
    timing_kw: dict[str, Any]
    where: str

    @property
    def base(self) -> dict[str, Any]:
        """What every result of the sweep carries in its details."""
        return {"max_loss": self.max_loss, "chosen": self.chosen, "arch": self.arch, "tiles": self.tiles or None}


def _checked(ctx: CheckContext, run: Any, stages: Any, *, kernel: str | None, flops: Any, chosen: Any,
             max_loss: Any, load_only: Any, compute_only: Any, tiles: Any, resources: Any, arch: Any,
             timer: Timer | None, timing_kw: dict[str, Any]) -> _Sweep:
    """The sweep's arguments checked; PipecheckError naming the argument and the test for a bad one."""
    where = _where(ctx)
    if not callable(run):
        raise PipecheckError(f"check_stage_sweep(run={run!r}){where}: run must be a callable taking the stage count")
    stage_list = _stage_list(stages, where)
    loss_limit = _number("max_loss", max_loss, where, positive=False)
    flops_f = None if flops is None else _number("flops", flops, where, positive=True)
    if chosen is not None:
        if isinstance(chosen, bool) or not isinstance(chosen, int):
            raise PipecheckError(f"check_stage_sweep(chosen={chosen!r}){where}: must be a stage count (an integer)")
        if chosen not in stage_list:
            raise PipecheckError(f"check_stage_sweep(chosen={chosen}){where}: not among stages "
                                 f"{', '.join(map(str, stage_list))}")
    given = {"load_only": load_only is not None, "compute_only": compute_only is not None, "tiles": tiles is not None}
    if any(given.values()) and not all(given.values()):
        missing = [k for k, v in given.items() if not v]
        raise PipecheckError(f"check_stage_sweep{where}: the cost-model prediction needs load_only, compute_only and "
                             f"tiles together; {', '.join(missing)} missing")
    load_v = compute_v = None
    n_tiles = 0
    if all(given.values()):
        if isinstance(tiles, bool) or not isinstance(tiles, int) or tiles < 1:
            raise PipecheckError(f"check_stage_sweep(tiles={tiles!r}){where}: must be an integer >= 1 "
                                 "(the loop's tiles per block)")
        n_tiles = tiles
        load_v = _variant("load_only", load_only, stage_list, where)
        compute_v = _variant("compute_only", compute_only, stage_list, where)
    if resources is not None:
        if isinstance(resources, Mapping):
            for key in resources:
                if key not in stage_list:
                    raise PipecheckError(f"check_stage_sweep(resources=...){where}: stage count {key!r} is not "
                                         "in stages")
        elif not callable(resources):
            raise PipecheckError(f"check_stage_sweep(resources={resources!r}){where}: give a mapping "
                                 "{stages: resources} or a callable taking the stage count")
    occ_arch = _arch(ctx, arch, where) if resources is not None else None
    unknown = sorted(set(timing_kw) - set(TIMING_KEYWORDS))
    if unknown:
        raise PipecheckError(f"check_stage_sweep{where}: unknown keyword {unknown[0]!r} (timing keywords: "
                             f"{', '.join(TIMING_KEYWORDS)})")
    if timer is not None and not callable(timer):
        raise PipecheckError(f"check_stage_sweep(timer={timer!r}){where}: must be a callable like perf.timing.measure")
    if kernel is not None and not isinstance(kernel, str):
        raise PipecheckError(f"check_stage_sweep(kernel={kernel!r}){where}: must be a string")
    return _Sweep(run, stage_list, loss_limit, flops_f, chosen, n_tiles, load_v, compute_v, resources, occ_arch,
                  kernel or ctx.config.kernel, timing_kw, where)


def _timer(ctx: CheckContext, sweep: _Sweep, timer: Timer | None) -> Timer | str:
    """The timer to use: the one given, else the device's (:func:`pytest_pipecheck.perf.timing.measure`);
    or why the sweep cannot be timed here (no GPU, a GPU shared by xdist workers)."""
    if timer is not None:
        return timer
    if not ctx.tier.has_gpu:
        return f"stage sweep needs a CUDA GPU: {ctx.tier.reason}"
    if ctx.tier.timing_blocked:
        return f"stage sweep not timed: {ctx.tier.timing_blocked}"
    from ..perf import timing

    sweep.timing_kw.setdefault("settle_s", timing.DEFAULT_SETTLE_S)
    return timing.measure


def _timed(ctx: CheckContext, sweep: _Sweep, timer: Timer, rows: list[dict[str, Any]], fn: Callable[[], Any],
           s: int, what: str = "") -> Samples | str:
    """Samples of ``fn``, or the reason it does not fit; any other failure is recorded as an error result of
    the sweep (with the rows timed so far) and raised."""
    try:
        got = timer(fn, **sweep.timing_kw)
    except PipecheckError:
        raise
    except Exception as exc:
        reason = does_not_fit(exc)
        if reason is not None:
            return reason
        summary = f"{what}stages={s}: {type(exc).__name__}: {_first_line(exc)}"
        ctx.record(CheckResult(CHECK, Verdict.ERROR, summary, kernel=sweep.name,
                               details={**sweep.base, "stage_sweep": rows, "error": summary}))
        raise
    return _samples(got, s, what, sweep.where)


def _row(ctx: CheckContext, sweep: _Sweep, timer: Timer, rows: list[dict[str, Any]], s: int,
         meta: dict[str, Any]) -> dict[str, Any]:
    """One stage count's row: its time (or why it does not fit), its throughput, the cost model's prediction
    from the load-only and compute-only variants, and its blocks/SM; ``meta`` gets the first timing's."""
    row: dict[str, Any] = {"stages": s, "measured_us": None, "q1_us": None, "q3_us": None, "n": 0,
                           "predicted_us": None, "blocks_per_sm": None, "tflops": None, "note": ""}
    notes: list[str] = []
    got = _timed(ctx, sweep, timer, rows, functools.partial(sweep.run, s), s)
    fits = not isinstance(got, str)
    if isinstance(got, str):
        notes.append(f"does not fit: {got}")
    else:
        row.update(measured_us=got.median, q1_us=got.q1, q3_us=got.q3, n=got.n)
        if sweep.flops is not None:
            row["tflops"] = sweep.flops / (got.median * 1e-6) / 1e12
        if not meta:
            meta.update(got.meta)
    if fits and sweep.load_only is not None and sweep.compute_only is not None:
        _predict(ctx, sweep, timer, rows, s, row, notes)
    if sweep.resources is not None and sweep.arch is not None:
        res = None
        if isinstance(sweep.resources, Mapping):
            res = sweep.resources.get(s)
        elif fits:
            try:
                res = sweep.resources(s)
            except PipecheckError as exc:  # resources that cannot be read: say so in the row
                notes.append(f"blocks/SM unknown: {exc}")
        if res is not None:
            row.update(_occupancy_of(res, sweep.arch, s, sweep.where))
    row["note"] = "; ".join(notes)
    return row


def _predict(ctx: CheckContext, sweep: _Sweep, timer: Timer, rows: list[dict[str, Any]], s: int,
             row: dict[str, Any], notes: list[str]) -> None:
    """The cost model's prediction for stage count ``s`` from its load-only and compute-only times."""
    variant_us: dict[str, float | None] = {}
    for label, v in (("load_only", sweep.load_only), ("compute_only", sweep.compute_only)):
        if isinstance(v, dict):
            variant_us[label] = v.get(s)
            continue
        assert v is not None
        vs = _timed(ctx, sweep, timer, rows, functools.partial(v, s), s, f"{label} ")
        if isinstance(vs, str):
            notes.append(f"{label} variant does not fit: {vs}")
            variant_us[label] = None
        else:
            variant_us[label] = vs.median
    lo, co = variant_us["load_only"], variant_us["compute_only"]
    row["load_only_us"], row["compute_only_us"] = lo, co
    if lo is not None and co is not None:
        from ..perf.cost_model import predict_from_variants

        pred = predict_from_variants(lo, co, sweep.tiles, s)
        row["predicted_us"] = pred.pipelined
        row["bound"] = pred.bound
    elif not notes:
        notes.append("no prediction: no variant time for this stage count")


def _check_stage_sweep(ctx: CheckContext, run: Any, stages: Any, *, kernel: str | None, flops: Any, chosen: Any,
                       max_loss: Any, load_only: Any, compute_only: Any, tiles: Any, resources: Any, arch: Any,
                       timer: Timer | None, timing_kw: dict[str, Any]) -> CheckResult:
    __tracebackhide__ = True
    sweep = _checked(ctx, run, stages, kernel=kernel, flops=flops, chosen=chosen, max_loss=max_loss,
                     load_only=load_only, compute_only=compute_only, tiles=tiles, resources=resources, arch=arch,
                     timer=timer, timing_kw=timing_kw)
    chosen_timer = _timer(ctx, sweep, timer)
    if isinstance(chosen_timer, str):
        return ctx.record(CheckResult(CHECK, Verdict.SKIP, chosen_timer, kernel=sweep.name,
                                      details={"reason": chosen_timer, "stages": sweep.stages, "chosen": sweep.chosen}))
    rows: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    for s in sweep.stages:
        rows.append(_row(ctx, sweep, chosen_timer, rows, s, meta))
    return _verdict(ctx, rows, sweep.name, sweep.chosen, sweep.max_loss, sweep.base, meta, sweep.flops)


def _verdict(ctx: CheckContext, rows: list[dict[str, Any]], name: str | None, chosen: int | None, max_loss: float,
             base: dict[str, Any], meta: dict[str, Any], flops: float | None) -> CheckResult:
    __tracebackhide__ = True
    who = f"kernel {name!r}" if name else f"the kernel{_where(ctx)}"
    measured = [r for r in rows if r["measured_us"] is not None]
    no_fit = [r["stages"] for r in rows if r["measured_us"] is None]
    best = min(measured, key=lambda r: r["measured_us"]) if measured else None
    best_stages = best["stages"] if best is not None else None
    chosen_row = next((r for r in rows if r["stages"] == chosen), None)
    loss = None
    if best is not None and chosen_row is not None and chosen_row["measured_us"] is not None:
        loss = chosen_row["measured_us"] / best["measured_us"] - 1.0
    details: dict[str, Any] = {**base, "stage_sweep": rows, "best_stages": best_stages, "loss": loss,
                               "does_not_fit": no_fit, "timing": meta}
    if flops is not None:
        details["flops"] = flops
    table = sweep_table(rows, chosen, best_stages)
    fit_text = ""
    if no_fit:
        fit_text = f"; stages {', '.join(map(str, no_fit))} {'does' if len(no_fit) == 1 else 'do'} not fit"

    def failure(summary: str, message: str) -> PipecheckFailure:
        result = ctx.record(CheckResult(CHECK, Verdict.FAIL, summary, kernel=name, details=details))
        return PipecheckFailure(f"pipecheck stage sweep of {who}: {message}\n{table}", result)

    if best is None:
        raise failure(f"no stage count fits ({', '.join(map(str, no_fit))})",
                      f"no stage count of {', '.join(map(str, no_fit))} fits on this GPU")
    tf = f", {best['tflops']:.0f} TFLOP/s" if best.get("tflops") is not None else ""
    best_text = f"best {best_stages} stages ({_format_us(best['measured_us'])}{tf})"
    if chosen_row is not None and chosen_row["measured_us"] is None:
        raise failure(f"chosen {chosen} stages does not fit; {best_text}",
                      f"stages={chosen} (the chosen) {chosen_row['note']}; the fastest that fits is "
                      f"stages={best_stages} ({_format_us(best['measured_us'])})")
    if chosen_row is not None and loss is not None and loss > max_loss:
        c_us, b_us = chosen_row["measured_us"], best["measured_us"]
        raise failure(f"chosen {chosen} stages {_percent(loss)} slower than best {best_stages} "
                      f"({_format_us(c_us)} vs {_format_us(b_us)})",
                      f"stages={chosen} is {_percent(loss)} slower than stages={best_stages} (the best): "
                      f"{_format_us(c_us)} vs {_format_us(b_us)}; allowed {_percent(max_loss)} (max_loss)")
    summary = best_text
    if chosen is not None:
        summary += f", chosen {chosen}" + (f" (+{_percent(loss)}, max {_percent(max_loss)})" if loss else "")
    return ctx.record(CheckResult(CHECK, Verdict.PASS, summary + fit_text, kernel=name, details=details))


def skip(ctx: CheckContext, check: str, reason: str, run: Any = None, stages: Any = (), *, chosen: Any = None,
         kernel: str | None = None, **_ignored: Any) -> CheckResult:
    """Record that the sweep did not run (deselected, or in a sanitizer child: every stage count timed at
    full size under the tool would take minutes and time the tool), with its stage list."""
    try:
        stage_list = [int(s) for s in stages]
    except (TypeError, ValueError):
        stage_list = []
    return ctx.record(CheckResult(check, Verdict.SKIP, reason, kernel=kernel or ctx.config.kernel,
                                  details={"reason": reason, "stages": stage_list, "chosen": chosen}))
