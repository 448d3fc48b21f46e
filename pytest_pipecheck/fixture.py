"""The ``pipecheck`` fixture: a test's entry point to every check.

It owns the test's resolved configuration, the tier (GPU or CPU, and why), a seed derived from
the run seed and the test's node id, and the list of check results that end up in the summary,
the JSON and the JUnit properties. The check methods are thin: each imports its module lazily,
so a test that only asks for occupancy never imports torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from .config import PipecheckConfig
from .device import TierInfo
from .results import CheckResult, PipecheckFailure, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from .model.spec import KernelSpec
    from .perf.baseline import EnvKey
    from .perf.stats import Samples

__all__ = ["Pipecheck", "derive_seed"]


def _given(**values: Any) -> dict[str, Any]:
    """The keywords a caller gave (not None): the checks keep their own defaults for the rest."""
    return {k: v for k, v in values.items() if v is not None}


def derive_seed(run_seed: int, nodeid: str) -> int:
    """A test's seed: stable for a given run seed and node id, independent of test order."""
    digest = hashlib.blake2b(f"{run_seed}:{nodeid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class Pipecheck:
    """Per-test handle returned by the ``pipecheck`` fixture."""

    def __init__(self, nodeid: str, config: PipecheckConfig, tier: TierInfo, run_seed: int) -> None:
        self.nodeid = nodeid
        self.config = config
        self.tier = tier
        self.run_seed = run_seed
        self.seed = derive_seed(run_seed, nodeid)
        self.random = random.Random(self.seed)
        self.results: list[CheckResult] = []
        # where relative paths in the configuration (baseline_dir) are resolved; the plugin sets
        # the pytest rootdir here
        self.rootdir: str = "."
        self._expecting = config.expect_failures
        #: (spec, shape) pairs already launched for the sanitizer (scope "launch": once per shape)
        self.sanitizer_launched: set[tuple[int, str]] = set()
        #: (id(spec), config) -> (spec, spec pinned to that config of its autotuned kernel)
        self._pinned_specs: dict[tuple[int, Any], tuple[KernelSpec, KernelSpec]] = {}

    # ------------------------------------------------------------------ basics
    @property
    def spec(self) -> Any:
        """The KernelSpec named by the test's ``pipecheck(spec=...)`` marker, or None."""
        return self.config.spec

    @property
    def sanitizer_launch_only(self) -> bool:
        """True in a sanitizer child of scope ``launch`` (the setting ``sanitizer_scope``): coverage, the
        tile probe and determinism launch the kernel once per shape for the tool and judge nothing; the
        normal run judges them."""
        import os

        from .sanitizer.runner import SCOPE_ENV, child_tool

        return child_tool() is not None and os.environ.get(SCOPE_ENV) == "launch"

    @property
    def has_gpu(self) -> bool:
        return self.tier.has_gpu

    @property
    def device(self) -> str:
        """``"cuda"`` on the GPU tier, ``"cpu"`` otherwise (the Triton interpreter tier)."""
        return "cuda" if self.tier.has_gpu else "cpu"

    @property
    def reproduce(self) -> str:
        """One command line that replays this test with the same seed."""
        return f"pytest '{self.nodeid}' --pipecheck-seed={self.run_seed}"

    def torch_generator(self, device: str | None = None, offset: int = 0) -> Any:
        """A ``torch.Generator`` seeded from this test's seed (plus ``offset``)."""
        import torch

        gen = torch.Generator(device=device or "cpu")
        gen.manual_seed((self.seed + offset) & (2**63 - 1))
        return gen

    def numpy_rng(self, offset: int = 0) -> Any:
        """A ``numpy.random.Generator`` seeded from this test's seed (plus ``offset``)."""
        import numpy as np

        return np.random.default_rng((self.seed + offset) & (2**63 - 1))

    def record(self, result: CheckResult) -> CheckResult:
        """Record a check's result for the summary and reports; returns it.

        Every result goes through :func:`pytest_pipecheck.contract.finalize`, as the sanitizer's
        verdicts do: the test's node id, the marker's kernel name, whether the failure was expected
        (a mutant caught) and, on the GPU tier, which GPU ran it (under xdist each worker has its own).
        A failing or erroring result fails its test even when the test body goes on (the plugin checks
        this when the test ends).
        """
        from .contract import finalize

        dev = self.tier.device
        result = finalize(result, nodeid=self.nodeid, kernel=self.config.kernel, expecting=bool(self._expecting),
                          gpu=f"{dev.name} (index {dev.index}, {dev.uuid})" if dev is not None else None)
        self.results.append(result)
        return result

    @contextlib.contextmanager
    def expecting_failures(self) -> Iterator[None]:
        """Inside this block, check failures are expected (a mutant being caught).

        They are still raised and recorded, but the summary counts them as *caught* rather than
        as failures of the code under test. A block in which no check failed raises
        :class:`PipecheckFailure` on exit, as ``pytest.raises`` does: a mutant that nothing caught
        must not pass. The marker keyword ``expect_failures=True`` does the same for a whole test.
        """
        __tracebackhide__ = True
        from .contract import unmet_expectation

        previous, self._expecting = self._expecting, True
        start = len(self.results)
        try:
            yield
        finally:
            self._expecting = previous
        unmet = unmet_expectation(self.results[start:], True, "an expecting_failures() block")
        if unmet:
            raise PipecheckFailure(unmet)

    def selected(self, check: str, kernel: str | None = None) -> CheckResult | None:
        """None when ``check`` is selected; otherwise the recorded skip saying why it is not.

        Every ``check_*`` method asks this first, so ``--pipecheck-checks`` (or ``checks=`` in the
        marker) deselects each check the same way, with the reason in the summary.
        """
        from .contract import deselection

        why = deselection(check, self.config)
        return None if why is None else self.skip_check(check, why, kernel=kernel)

    def skip_check(self, check: str, reason: str, kernel: str | None = None) -> CheckResult:
        """Record that ``check`` did not run, and why; the test itself goes on."""
        return self.record(CheckResult(check, Verdict.SKIP, reason, kernel=kernel, details={"reason": reason}))

    def require_gpu(self, check: str = "gpu", kernel: str | None = None, *, alone: bool = False) -> None:
        """Skip the whole test, with the reason, when no CUDA device is usable; with ``alone=True`` (a test
        that times kernels itself) also when other pytest-xdist workers share the GPU."""
        __tracebackhide__ = True
        if not self.tier.has_gpu:
            reason = f"{check} needs a CUDA GPU: {self.tier.reason}"
        elif alone and self.tier.timing_blocked:
            reason = f"{check} not timed: {self.tier.timing_blocked}"
        else:
            return
        self.skip_check(check, reason, kernel=kernel)
        pytest.skip(reason)

    def _for_config(self, spec: KernelSpec, kwargs: dict[str, Any]) -> KernelSpec:
        """``spec`` pinned to ``kwargs.pop("config")`` of its autotuned kernel (unchanged without one).

        A config that the kernel's ``early_config_prune`` removes at a launch's arguments is never run
        there by Triton: the test is skipped with that reason (recorded as an ``autotune`` skip)."""
        config = kwargs.pop("config", None)
        if config is None:
            return spec
        # one pinned spec per (spec, config) in a test: the sanitizer child's launch-once bookkeeping keys on it
        key = (id(spec), config if isinstance(config, (str, int)) else id(config))
        if key in self._pinned_specs:
            return self._pinned_specs[key][1]
        from .model import autotune

        def pruned(exc: Exception) -> None:
            __tracebackhide__ = True
            self.skip_check("autotune", str(exc), kernel=pinned.name)
            pytest.skip(f"pipecheck: {exc}")

        pinned: KernelSpec = autotune.spec_for(spec, config, on_pruned=pruned)
        self._pinned_specs[key] = (spec, pinned)  # the original is kept alive so its id is not reused
        return pinned

    # ------------------------------------------------------------------ checks
    # Each delegates to its module; keyword arguments are documented there.

    def shapes(self, spec: KernelSpec, level: str | None = None, **kwargs: Any) -> list[Any]:
        """Ragged and boundary shapes for ``spec`` (see :func:`pytest_pipecheck.model.shapes.generate`).

        A shape over the memory budget (``shape_budget_mib``, or ``max_bytes=``) is left out and recorded
        as a skipped ``shapes`` result naming the shape and what it would need.
        """
        from .model import shapes

        # a stages= override from the marker also moves the generated loop trip counts
        kwargs.setdefault("stages", self.config.stages)
        kwargs.setdefault("max_bytes", self.config.shape_budget_mib << 20)
        kept = shapes.generate(spec, level=level or self.config.shape_level, **kwargs)
        for case in kept.dropped:
            self.skip_check("shapes", case.dropped or "", kernel=getattr(spec, "name", None))
        return kept

    def check_coverage(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> CheckResult:
        """Poisoned outputs, guard bands and comparison against the reference at one shape."""
        __tracebackhide__ = True
        return self._array_check("coverage", spec, shape, kwargs)

    def check_tile_probe(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> CheckResult:
        """Run once per loop tile with inputs zero elsewhere; each tile must count exactly once."""
        __tracebackhide__ = True
        return self._array_check("tile_probe", spec, shape, kwargs)

    def check_determinism(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> CheckResult:
        """Repeated runs on the same inputs must be bitwise equal."""
        __tracebackhide__ = True
        return self._array_check("determinism", spec, shape, kwargs)

    def check_kernel(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> list[CheckResult]:
        """Every selected correctness check for ``spec`` at ``shape``: the results of those that ran.

        ``values="negative"`` (any pattern of :mod:`pytest_pipecheck.model.values`) sets the input values;
        ``layout="a-transposed"`` (any layout of :mod:`pytest_pipecheck.model.layouts`) places the tensors.
        ``config="BLOCK_M64-BLOCK_N32-w4-s3"`` (an id, index or config of the spec's ``autotune`` kernel; every
        check method takes it) pins that config (:mod:`pytest_pipecheck.model.autotune`): the verdicts name it.

        A deselected check is recorded as skipped (the summary says why) but not returned.
        """
        __tracebackhide__ = True
        spec = self._for_config(spec, kwargs)
        deselected = [check for check in ("coverage", "tile_probe", "determinism")
                      if self.selected(check, kernel=getattr(spec, "name", None)) is not None]
        from .checks import coverage

        if len(deselected) == 3:
            self._launch_in_sanitizer_child(spec, shape, "coverage", kwargs)
        return coverage.check_all(self, spec, shape, **kwargs)

    def _array_check(self, check: str, spec: KernelSpec, shape: Any, kwargs: dict[str, Any]) -> CheckResult:
        """Correctness check ``check`` of :mod:`.checks.coverage` (its function ``check_<check>``), or the
        skip recorded when it is deselected (the kernel still launches once in a sanitizer child)."""
        __tracebackhide__ = True
        spec = self._for_config(spec, kwargs)
        skipped = self.selected(check, kernel=getattr(spec, "name", None))
        if skipped is not None:
            self._launch_in_sanitizer_child(spec, shape, check, kwargs)
            return skipped
        from .checks import coverage

        result: CheckResult = getattr(coverage, f"check_{check}")(self, spec, shape, **kwargs)
        return result

    def _launch_in_sanitizer_child(self, spec: KernelSpec, shape: Any, check: str, kwargs: dict[str, Any]) -> None:
        """In a sanitizer child, a deselected correctness check still launches its kernel once (the tool
        must see it); elsewhere nothing."""
        from .sanitizer.runner import child_tool

        if child_tool() is not None:
            from .checks import coverage

            coverage.launch_for_sanitizer(self, spec, shape, check, **kwargs)

    def check_occupancy(
        self,
        target: object = None,
        *,
        threads: int | None = None,
        registers: int | None = None,
        static_smem: int = 0,
        dynamic_smem: int | None = None,
        arch: str | Sequence[str] | None = None,
        min_blocks: int | None = None,
        kernel: str | None = None,
        opt_in: bool = True,
        barriers: int | None = None,
        args: Sequence[Any] | Mapping[str, Any] | None = None,
        options: Sequence[str] | None = None,
        include_dirs: Sequence[str] | None = None,
        defines: Mapping[str, str | int | None] | None = None,
        num_warps: int | None = None,
        num_stages: int | None = None,
        **constexprs: Any,
    ) -> CheckResult:
        """Assert a kernel reaches the blocks/SM floor on every target architecture.

        ``target``: :class:`~pytest_pipecheck.resources.cubin.KernelResources`, a dict of them per
        architecture, a Triton kernel (with ``args``, ``num_warps``, ``num_stages`` and its constexprs),
        a .cu path (with ``kernel``, ``options``, ``include_dirs``, ``defines``), or None with
        ``threads`` and ``registers``. See :func:`pytest_pipecheck.checks.occupancy_check.check_occupancy`.
        """
        __tracebackhide__ = True
        skipped = self.selected("occupancy", kernel=kernel)
        if skipped is not None:
            return skipped
        from .checks import occupancy_check

        given = _given(args=args, options=options, include_dirs=include_dirs, defines=defines,
                       num_warps=num_warps, num_stages=num_stages)
        return occupancy_check.check_occupancy(
            self, target, threads=threads, registers=registers, static_smem=static_smem,
            dynamic_smem=dynamic_smem, arch=arch, min_blocks=min_blocks, kernel=kernel, opt_in=opt_in,
            barriers=barriers, **given, **constexprs)

    def check_sass(
        self,
        target: object,
        *,
        expect: str | Mapping[str, Any] | Sequence[str | Mapping[str, Any]],
        arch: str | Sequence[str] | None = None,
        kernel: str | None = None,
        args: Sequence[Any] | None = None,
        options: Sequence[str] | None = None,
        include_dirs: Sequence[str] | None = None,
        defines: Mapping[str, str | int | None] | None = None,
        **triton_options: Any,
    ) -> CheckResult:
        """Assert what the compiled code contains (async copies, overlap, MMA kind, no spills).

        ``target``: cubin bytes, a .cubin or .cu path (``options``, ``include_dirs``, ``defines``
        compile it), a ``@triton.jit`` function (with ``args`` and Triton's compile options) or a
        compiled Triton kernel. See :func:`pytest_pipecheck.checks.inspect_check.check_sass`.
        """
        __tracebackhide__ = True
        skipped = self.selected("inspect", kernel=kernel)
        if skipped is not None:
            return skipped
        from .checks import inspect_check

        given = _given(args=args, options=options, include_dirs=include_dirs, defines=defines)
        return inspect_check.check_sass(self, target, expect=expect, arch=arch, kernel=kernel, **given,
                                        **triton_options)

    def check_perf(
        self,
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
        anchor: str | None = "auto",
        n_samples: int | None = None,
        warmup_s: float | None = None,
        max_time_s: float | None = None,
        n_inputs: int | None = None,
        reps: int | None = None,
        settle_s: float | None = None,
    ) -> CheckResult:
        """Time a kernel on the device and gate it against its stored baseline.

        ``n_samples`` ... ``settle_s`` go to :func:`pytest_pipecheck.perf.timing.measure` (its defaults
        where not given). See :func:`pytest_pipecheck.perf.gate.check_perf` for the rest.
        """
        __tracebackhide__ = True
        from .perf import gate  # applies the selection itself: a deselected check must still free `benchmark`

        timing = _given(n_samples=n_samples, warmup_s=warmup_s, max_time_s=max_time_s, n_inputs=n_inputs,
                        reps=reps, settle_s=settle_s)
        return gate.check_perf(self, fn, flops=flops, bytes=bytes, case=case, samples=samples,
                               hot_cache=hot_cache, graph=graph, dtype=dtype, kernel=kernel,
                               benchmark=benchmark, env=env, anchor=anchor, **timing)

    def check_stage_sweep(self, run: Callable[[int], Any], stages: Iterable[int], *, chosen: int | None = None,
                          max_loss: float = 0.05, kernel: str | None = None, flops: float | None = None,
                          load_only: Any = None, compute_only: Any = None, tiles: int | None = None,
                          resources: Any = None, arch: str | None = None, timer: Callable[..., Any] | None = None,
                          **timing: Any) -> CheckResult:
        """Time ``run(s)`` at each stage count; fail when ``chosen`` is more than ``max_loss`` slower than the best.

        See :func:`pytest_pipecheck.checks.stage_sweep.check_stage_sweep` for the prediction
        (``load_only``, ``compute_only``, ``tiles``), blocks/SM per stage count (``resources``,
        ``arch``), ``timer`` (replaces the device timing, for tests) and the timing keywords.
        """
        __tracebackhide__ = True
        from .checks import stage_sweep  # applies the selection itself (with its stage list in the details)

        return stage_sweep.check_stage_sweep(self, run, stages, chosen=chosen, max_loss=max_loss, kernel=kernel,
                                             flops=flops, load_only=load_only, compute_only=compute_only,
                                             tiles=tiles, resources=resources, arch=arch, timer=timer, **timing)
