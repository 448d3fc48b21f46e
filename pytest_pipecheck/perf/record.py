"""How a perf check records what it did not gate, and what both of its gates read: the environment key
a stored baseline is looked up by, the baseline directory, pytest-benchmark's fixture fed with device
samples. Shared by the stored-baseline gate (:mod:`.gate`) and compare mode (:mod:`.compare`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..results import CheckResult, PipecheckError, Verdict
from .baseline import EnvKey
from .stats import Samples

if TYPE_CHECKING:  # pragma: no cover
    from ..checks.context import CheckContext

__all__ = ["environment_key"]


def environment_key(ctx: CheckContext) -> EnvKey:
    """The key that decides which baselines this run may compare with (see :mod:`.baseline`).

    On the GPU tier the SM count and CUDA runtime come from torch (the GPU is already in use for
    timing); the rest from the tier detected at start-up.
    """
    device = ctx.tier.device
    backends = ctx.tier.backends
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
    if ctx.tier.has_gpu:
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


def _baseline_dir(ctx: CheckContext) -> tuple[str | None, str]:
    directory = ctx.config.baseline_dir
    source = ctx.config.sources.get("baseline_dir", "default")
    where = f"baseline_dir from the {source}" if source != "default" else "the default baseline_dir"
    if directory is None:
        return None, where
    if not os.path.isabs(directory):
        root = getattr(ctx, "rootdir", None) or os.getcwd()
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


def _skip(ctx: CheckContext, reason: str, benchmark: Any, kernel: str | None, case: str,
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
    return ctx.record(CheckResult("perf", Verdict.SKIP, summary or reason, kernel=kernel, details=info))
