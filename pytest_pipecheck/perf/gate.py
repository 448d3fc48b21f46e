"""``pipecheck.check_perf``: time a kernel, compare it with its baseline, fail a regression.

The flow of one call:

1. validate the arguments (a declared FLOP or byte count must be a positive number);
2. on the CPU tier, without injected samples, record ``perf`` as skipped with the reason and return:
   the test still passes or fails on its other checks;
3. time the kernel on the device (:mod:`.timing`), or take the ``samples=`` given;
4. look up the baseline for (this GPU and software stack, the test's node id, the case id). A
   missing baseline is a skip with the reason; a baseline of another environment is never used;
5. compare (:func:`.stats.compare`) and record the result; a regression raises
   :class:`PipecheckFailure` with the numbers;
6. with ``--pipecheck-baseline-save``, store the new samples as the baseline. Saving is accepting:
   a run that saves reports the change but does not fail on it.

When the test also requests pytest-benchmark's ``benchmark`` fixture and passes it as
``benchmark=``, the device samples are handed to it, so ``--benchmark-json``, ``--benchmark-save``
and ``pytest-benchmark compare`` carry GPU times instead of host times.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..results import CheckResult, PipecheckError, PipecheckFailure, Verdict
from .baseline import BaselineError, BaselineStore, EnvKey
from .stats import Samples, StatsError, compare

if TYPE_CHECKING:  # pragma: no cover
    from ..fixture import Pipecheck

__all__ = ["check_perf", "environment_key"]

_TIMING_KEYWORDS = ("n_samples", "warmup_s", "max_time_s", "n_inputs", "reps")


def _positive(name: str, value: Any, nodeid: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PipecheckError(f"check_perf({name}={value!r}) in {nodeid}: must be a number")
    if not math.isfinite(value) or value <= 0:
        raise PipecheckError(
            f"check_perf({name}={value!r}) in {nodeid}: a declared {'FLOP' if name == 'flops' else 'byte'} "
            "count must be > 0 (leave it out if unknown)"
        )
    return float(value)


def environment_key(pc: Pipecheck) -> EnvKey:
    """The key that decides which baselines this run may compare with (see :mod:`.baseline`).

    On the GPU tier the SM count and CUDA runtime come from torch (the GPU is already in use for
    timing); the rest from the tier detected at start-up.
    """
    device = pc.tier.device
    backends = pc.tier.backends
    values: dict[str, Any] = {
        "gpu": device.name if device else None,
        "compute_capability": device.compute_capability if device else None,
        "driver": device.driver if device else None,
        "sm_count": device.sm_count if device else None,
        "torch": backends.get("torch"),
        "triton": backends.get("triton"),
        "cupy": backends.get("cupy"),
        "cuda": None,
    }
    if pc.tier.has_gpu:
        try:
            import torch

            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            values["sm_count"] = props.multi_processor_count
            values["cuda"] = torch.version.cuda
            values["gpu"] = values["gpu"] or props.name
            values["compute_capability"] = values["compute_capability"] or f"{props.major}.{props.minor}"
        except Exception:  # torch missing or broken: the key is still usable, only less precise
            pass
    return EnvKey(values)


def _baseline_dir(pc: Pipecheck) -> tuple[str | None, str]:
    directory = pc.config.baseline_dir
    source = pc.config.sources.get("baseline_dir", "default")
    where = f"baseline_dir from the {source}" if source != "default" else "the default baseline_dir"
    if directory is None:
        return None, where
    if not os.path.isabs(directory):
        root = getattr(pc, "rootdir", None) or os.getcwd()
        directory = os.path.join(str(root), directory)
    return directory, where


def _feed_benchmark(benchmark: Any, samples: Samples, extra: Mapping[str, Any]) -> None:
    """Hand the device samples to pytest-benchmark's fixture, in its unit (seconds).

    ``pedantic`` on a no-op registers the benchmark through the public API (group, name, params,
    storage); its single host timing is then replaced by the device samples. The timer name in the
    stored options says where the numbers came from.
    """
    if getattr(benchmark, "disabled", False):
        return
    try:
        from pytest_benchmark.stats import Stats
    except ImportError:  # pragma: no cover - a dependency of pytest-pipecheck
        raise PipecheckError("check_perf(benchmark=...): pytest-benchmark is not installed") from None
    try:
        benchmark.pedantic(lambda: None, rounds=1, iterations=1, warmup_rounds=0)
    except Exception as exc:  # FixtureAlreadyUsed and friends
        raise PipecheckError(f"check_perf(benchmark=...): cannot use the benchmark fixture: {exc}") from None
    stats = Stats()
    for t in samples.times_us:
        stats.update(t * 1e-6)
    benchmark.stats.stats = stats
    benchmark.stats.options["timer"] = "pipecheck.cuda_events"
    benchmark.extra_info.update(extra)


def _skip(pc: Pipecheck, reason: str, benchmark: Any, kernel: str | None, case: str,
          summary: str | None = None, details: Mapping[str, Any] | None = None) -> CheckResult:
    if benchmark is not None and getattr(benchmark, "stats", None) is None:
        # Nothing was timed: disable the fixture and use it once, so pytest-benchmark neither stores a
        # host timing of a no-op nor warns that the fixture was never used.
        benchmark.disabled = True
        try:
            benchmark.pedantic(lambda: None)
        except Exception:  # already used by the test: then it has its own numbers
            pass
    info = {"reason": reason, "case": case, **(details or {})}
    return pc.record(CheckResult("perf", Verdict.SKIP, summary or reason, kernel=kernel, details=info))


def check_perf(
    pc: Pipecheck,
    fn: Callable[..., Any] | None = None,
    *,
    flops: float | None = None,
    bytes: float | None = None,  # shadows the builtin: the public keyword the docs use
    case: str | None = None,
    samples: Samples | Sequence[float] | None = None,
    hot_cache: bool = False,
    graph: bool = False,
    dtype: str = "fp16",
    kernel: str | None = None,
    benchmark: Any = None,
    env: EnvKey | Mapping[str, Any] | None = None,
    **timing_kw: Any,
) -> CheckResult:
    """Time ``fn`` on the GPU and gate it against the stored baseline of this test and ``case``.

    ``flops`` / ``bytes`` (per launch) give throughput and the fraction of the measured roofline;
    ``dtype`` picks the matrix ceiling. ``samples`` injects precomputed per-launch times (us) instead
    of timing, and ``env`` an environment key (both for tests and offline use). Other keywords go to
    :func:`.timing.measure` (n_samples, warmup_s, max_time_s, n_inputs, reps).

    Returns the recorded :class:`CheckResult` (pass, or skip with the reason). Raises
    :class:`PipecheckFailure` on a regression, :class:`PipecheckError` for bad arguments and unusable
    baseline files or directories.
    """
    __tracebackhide__ = True
    try:
        return _check_perf(pc, fn, flops=flops, nbytes=bytes, case=case, samples=samples, hot_cache=hot_cache,
                           graph=graph, dtype=dtype, kernel=kernel, benchmark=benchmark, env=env,
                           timing_kw=timing_kw)
    except PipecheckFailure as exc:
        raise PipecheckFailure(str(exc), exc.result) from None
    except PipecheckError as exc:
        # Re-raised from here so pytest shows the test's line and the message, not plugin frames.
        raise type(exc)(str(exc)) from None


def _check_perf(pc: Pipecheck, fn: Callable[..., Any] | None, *, flops: Any, nbytes: Any, case: str | None,
                samples: Samples | Sequence[float] | None, hot_cache: bool, graph: bool, dtype: str,
                kernel: str | None, benchmark: Any, env: EnvKey | Mapping[str, Any] | None,
                timing_kw: dict[str, Any]) -> CheckResult:
    __tracebackhide__ = True
    nodeid = pc.nodeid
    flops_f = _positive("flops", flops, nodeid)
    bytes_f = _positive("bytes", nbytes, nodeid)
    unknown = sorted(set(timing_kw) - set(_TIMING_KEYWORDS))
    if unknown:
        raise PipecheckError(
            f"check_perf in {nodeid}: unknown keyword {unknown[0]!r} (timing keywords: {', '.join(_TIMING_KEYWORDS)})"
        )
    if case is not None and not isinstance(case, str):
        raise PipecheckError(f"check_perf(case={case!r}) in {nodeid}: case must be a string")
    case_id = case or "default"
    for r in pc.results:
        if r.check == "perf" and r.details.get("case") == case_id:
            raise PipecheckError(
                f"check_perf called twice with case={case_id!r} in {nodeid}: give each call its own case= "
                "so each has its own baseline"
            )
    if fn is None and samples is None:
        raise PipecheckError(f"check_perf in {nodeid}: pass the callable to time (or samples=)")
    if fn is not None and not callable(fn):
        raise PipecheckError(f"check_perf in {nodeid}: {fn!r} is not callable")

    if not pc.config.wants("perf"):
        return _skip(pc, "perf is not among the selected checks (--pipecheck-checks)", benchmark, kernel, case_id)

    ceilings = None
    if samples is not None:
        try:
            measured = samples if isinstance(samples, Samples) else Samples.of(samples, "samples=")
        except StatsError as exc:
            raise PipecheckError(f"check_perf({exc}) in {nodeid}") from None
    else:
        if not pc.tier.has_gpu:
            return _skip(pc, f"perf needs a CUDA GPU: {pc.tier.reason}", benchmark, kernel, case_id)
        from . import timing

        assert fn is not None
        measured = timing.measure(fn, hot_cache=hot_cache, graph=graph, **timing_kw)
        if flops_f is not None or bytes_f is not None:
            import torch

            ceilings = timing.measure_ceilings(torch.cuda.current_device())

    key = env if isinstance(env, EnvKey) else EnvKey(dict(env)) if env is not None else environment_key(pc)

    details: dict[str, Any] = {
        "case": case_id,
        "median_us": measured.median,
        "q1_us": measured.q1,
        "q3_us": measured.q3,
        "n": measured.n,
        "timing": dict(measured.meta),
        "env": dict(key.values),
        "threshold": pc.config.perf_threshold,
        "alpha": pc.config.perf_alpha,
    }
    throughput = ""
    if flops_f is not None:
        details["tflops"] = flops_f / (measured.median * 1e-6) / 1e12
        throughput = f"{details['tflops']:.1f} TFLOP/s"
    if bytes_f is not None:
        details["gbps"] = bytes_f / (measured.median * 1e-6) / 1e9
        throughput = (throughput + ", " if throughput else "") + f"{details['gbps']:.0f} GB/s"
    roof = ""
    if ceilings is not None:
        from .timing import roofline

        fraction = roofline(ceilings, measured.median, flops=flops_f, nbytes=bytes_f, dtype=dtype)
        details["ceilings"] = ceilings.to_json()
        if fraction is not None:
            details["roofline_fraction"] = fraction[0]
            roof = f"; {fraction[0]:.2f} of {fraction[1]}"
    if throughput:
        roof = f"; {throughput}{roof}"

    entry = measured.to_json()
    entry.update({k: v for k, v in (("flops", flops_f), ("bytes", bytes_f)) if v is not None})
    if benchmark is not None:
        _feed_benchmark(benchmark, measured, {"pipecheck_case": case_id, "pipecheck_unit": "device time (events)",
                                              **{k: v for k, v in details.items() if k in ("tflops", "gbps")}})

    directory, where = _baseline_dir(pc)
    save = pc.config.baseline_save
    if directory is None:
        return _skip(pc, "baselines are off (baseline_dir is none)", benchmark, kernel, case_id,
                     summary=f"{measured.median:.1f} us{roof}; baselines are off (baseline_dir is none)",
                     details=details)
    store = BaselineStore(directory, where)
    try:
        found = store.lookup(key, nodeid, case_id)
    except BaselineError as exc:
        pc.record(CheckResult("perf", Verdict.ERROR, str(exc), kernel=kernel, details=details))
        raise

    saved = ""
    if save:
        path = store.save(key, nodeid, case_id, entry)
        details["saved_to"] = path
        saved = f"; saved as the new baseline ({os.path.basename(path)})"

    if found.samples is None:
        details["reason"] = found.reason
        if save:
            return pc.record(CheckResult("perf", Verdict.PASS, f"{measured.median:.1f} us{roof}{saved}",
                                         kernel=kernel, details=details))
        return _skip(pc, found.reason, benchmark, kernel, case_id,
                     summary=f"{measured.median:.1f} us{roof}; {found.reason}", details=details)

    try:
        result = compare(found.samples, measured, threshold=pc.config.perf_threshold, alpha=pc.config.perf_alpha,
                         ci=True, seed=pc.seed)
    except StatsError as exc:
        raise PipecheckError(f"check_perf in {nodeid} [case {case_id}]: {exc}") from None
    details.update(result.to_json())
    details["baseline_file"] = found.path
    summary = f"{result.describe()}{roof}{saved}"
    if result.regressed and not save:
        record = pc.record(CheckResult("perf", Verdict.FAIL, "regression: " + summary, kernel=kernel, details=details))
        raise PipecheckFailure(
            f"perf regression in {nodeid} [case {case_id}]: {summary}\n"
            f"  gate: median slower by more than {pc.config.perf_threshold:.1%} and one-sided Mann-Whitney "
            f"p < {pc.config.perf_alpha:g} ({result.n_candidate} samples vs {result.n_baseline})\n"
            f"  baseline: {found.path}\n"
            f"  if the slowdown is intended, accept it with --pipecheck-baseline-save",
            record,
        )
    return pc.record(CheckResult("perf", Verdict.PASS, summary, kernel=kernel, details=details))
