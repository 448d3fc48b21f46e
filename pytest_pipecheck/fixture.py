"""The ``pipecheck`` fixture: a test's entry point to every check.

:class:`Pipecheck` is the test's :class:`~pytest_pipecheck.checks.context.CheckContext` (its node id,
resolved configuration, tier, seed and results) with one method per check. Each method runs its check
through :func:`~pytest_pipecheck.checks.context.run_check`, the one path that applies selection, the
sanitizer child's policy and the traceback rules; the check's module is imported only when it is called,
so a test that only asks for occupancy never imports torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import pytest

from .checks.context import CheckContext, derive_seed, records_errors, run_check
from .results import CheckResult, PipecheckFailure

if TYPE_CHECKING:  # pragma: no cover
    from .model.spec import KernelSpec
    from .perf.baseline import EnvKey
    from .perf.stats import Samples

__all__ = ["Pipecheck", "derive_seed"]


def _given(**values: Any) -> dict[str, Any]:
    """The keywords a caller gave (not None): the checks keep their own defaults for the rest."""
    return {k: v for k, v in values.items() if v is not None}


def _case_keywords(shape: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with the value pattern and layout a generated case carries (:class:`~pytest_pipecheck.model.
    cases.Case`, the ``shape`` of a test that does not take ``values`` or ``layout``) where the call gives none."""
    for key, attribute in (("values", "pattern"), ("layout", "layout")):
        carried = getattr(shape, attribute, None)
        if carried is not None and kwargs.get(key) is None:
            kwargs[key] = carried
    return kwargs


class Pipecheck(CheckContext):
    """Per-test handle returned by the ``pipecheck`` fixture: the test's check context and the checks."""

    @contextlib.contextmanager
    def expecting_failures(self) -> Iterator[None]:
        """Inside this block, check failures are expected (a mutant being caught).

        They are still raised and recorded, but the summary counts them as *caught* rather than
        as failures of the code under test. A block in which no check failed raises
        :class:`PipecheckFailure` on exit, as ``pytest.raises`` does: a mutant that nothing caught
        must not pass. The marker keyword ``expect_failures=True`` does the same for a whole test, and
        there a caught failure that ends the test's body does not fail the test
        (:func:`pytest_pipecheck.verdicts.caught_ending`).
        """
        __tracebackhide__ = True
        from .contract import unmet_expectation

        previous, self.expecting = self.expecting, True
        start = len(self.results)
        try:
            yield
        finally:
            self.expecting = previous
        unmet = unmet_expectation(self.results[start:], True, "an expecting_failures() block")
        if unmet:
            raise PipecheckFailure(unmet)

    def require_gpu(self, check: str = "gpu", kernel: str | None = None, *, alone: bool = False) -> None:
        """Skip the whole test, with the reason, when no CUDA device is usable. With ``alone=True`` (a test that
        times kernels itself) first have the GPU alone: this process's sanitizer children ended, and the other
        pytest-xdist workers on its GPU done with their tests (a held test stops here and runs again at the end
        of its worker's tests); skipped, with the reason, where that cannot be had."""
        __tracebackhide__ = True
        if not self.tier.has_gpu:
            reason = f"{check} needs a CUDA GPU: {self.tier.reason}"
        elif alone and self.tier.timing_blocked:
            reason = f"{check} not timed: {self.tier.timing_blocked}"
        else:
            return
        self.skip_check(check, reason, kernel=kernel)
        pytest.skip(reason)

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

    # ------------------------------------------------------------------ checks
    # Each runs its module's check through run_check; keyword arguments are documented there.

    #: the hooks of the test's plugins and conftest files (``item.ihook``), set by the fixture: where
    #: :meth:`check` finds the checks registered from outside pipecheck
    _hook: Any = None

    def check(self, name: str, *args: Any, **kwargs: Any) -> CheckResult:
        """Run the check ``name`` that a plugin or ``conftest.py`` registered through the hook
        ``pytest_pipecheck_checks`` (:mod:`pytest_pipecheck.outside`): ``run(ctx, *args, **kwargs)`` under the
        rules every check shares. Its result is recorded; a FAIL raises PipecheckFailure."""
        __tracebackhide__ = True
        from . import outside

        registered = outside.collect(self._hook) if self._hook is not None else {}
        if name not in registered:
            from .results import PipecheckError

            known = ", ".join(sorted(registered)) or "none is registered for this test"
            raise PipecheckError(f"pipecheck.check({name!r}): no check of that name is registered through "
                                 f"pytest_pipecheck_checks (known: {known}); pipecheck's own checks have methods "
                                 "of their own (check_coverage, check_tile_probe, ...)")
        found = registered[name]

        def body(ctx: CheckContext, *a: Any, **k: Any) -> CheckResult:
            __tracebackhide__ = True
            return outside.run(ctx, found, *a, **k)

        return run_check(self, name, body, *args, in_child=found.in_child, kind=found.kind, **kwargs)

    @records_errors("coverage")
    def check_coverage(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> CheckResult:
        """Poisoned outputs, guard bands and comparison against the reference at one shape."""
        __tracebackhide__ = True
        from .checks import coverage, launch

        if getattr(shape, "extent", False):
            return self._extent(spec, shape, kwargs)
        return run_check(self, "coverage", coverage.check_coverage, self.pinned(spec, kwargs.pop("config", None)),
                         shape, in_child=launch.launch_for_sanitizer, **_case_keywords(shape, kwargs))

    @records_errors("tile_probe")
    def check_tile_probe(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> CheckResult:
        """Run once per loop tile with inputs zero elsewhere; each tile must count exactly once."""
        __tracebackhide__ = True
        from .checks import tile_probe

        return self._at_generated_shape("tile_probe", "the tile probe", tile_probe.check_tile_probe, spec, shape,
                                        kwargs)

    @records_errors("determinism")
    def check_determinism(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> CheckResult:
        """Repeated runs on the same inputs must be bitwise equal."""
        __tracebackhide__ = True
        from .checks import determinism

        return self._at_generated_shape("determinism", "determinism", determinism.check_determinism, spec, shape,
                                        kwargs)

    def _at_generated_shape(self, name: str, what: str, fn: Callable[..., CheckResult], spec: KernelSpec,
                            shape: Any, kwargs: dict[str, Any]) -> CheckResult:
        """Run ``fn`` (check ``name``) at a generated shape, launching for the sanitizer in its child; the
        extent case is coverage's, so there it is recorded as skipped (``what`` runs at the generated shapes)."""
        __tracebackhide__ = True
        from .checks import launch

        if getattr(shape, "extent", False):
            return self.skip_check(name, f"the extent case is judged by coverage; {what} runs at the generated "
                                   "shapes", kernel=getattr(spec, "name", None))
        return run_check(self, name, fn, self.pinned(spec, kwargs.pop("config", None)), shape,
                         in_child=launch.launch_for_sanitizer, **_case_keywords(shape, kwargs))

    @records_errors("coverage")  # its argument checks come before the three checks'
    def check_kernel(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> list[CheckResult]:
        """Every selected correctness check for ``spec`` at ``shape``: the results of those that ran.

        ``values="negative"`` (any pattern of :mod:`pytest_pipecheck.model.values`) sets the input values;
        ``layout="a-transposed"`` (any layout of :mod:`pytest_pipecheck.model.layouts`) places the tensors.
        ``config="BLOCK_M64-BLOCK_N32-w4-s3"`` (an id, index or config of the spec's ``autotune`` kernel; every
        check method takes it) pins that config (:mod:`pytest_pipecheck.model.autotune`): the verdicts name it.

        A deselected check is recorded as skipped (the summary says why) but not returned.
        """
        __tracebackhide__ = True
        from .checks import correctness

        if getattr(shape, "extent", False):
            return [self._extent(spec, shape, kwargs)]
        return correctness.check_all(self, self.pinned(spec, kwargs.pop("config", None)), shape,
                                     **_case_keywords(shape, kwargs))

    def _extent(self, spec: KernelSpec, shape: Any, kwargs: dict[str, Any]) -> CheckResult:
        """The ``extent`` case of a spec's generated cases: one program's reach, and coverage where it ends."""
        __tracebackhide__ = True
        from .checks import extent

        return run_check(self, extent.CHECK, extent.check_extent, self.pinned(spec, kwargs.pop("config", None)),
                         shape)

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
        from .checks import occupancy_check

        return run_check(self, "occupancy", occupancy_check.check_occupancy, target, threads=threads,
                         registers=registers, static_smem=static_smem, dynamic_smem=dynamic_smem, arch=arch,
                         min_blocks=min_blocks, kernel=kernel, opt_in=opt_in, barriers=barriers,
                         **_given(args=args, options=options, include_dirs=include_dirs, defines=defines,
                                  num_warps=num_warps, num_stages=num_stages), **constexprs)

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
        from .checks import inspect_check

        return run_check(self, "inspect", inspect_check.check_sass, target, expect=expect, arch=arch, kernel=kernel,
                         **_given(args=args, options=options, include_dirs=include_dirs, defines=defines),
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
        from .perf import gate

        return run_check(self, "perf", gate.check_perf, fn, in_child=gate.in_sanitizer_child, skip=gate.skip,
                         flops=flops, bytes=bytes, case=case, samples=samples, hot_cache=hot_cache, graph=graph,
                         dtype=dtype, kernel=kernel, benchmark=benchmark, env=env, anchor=anchor,
                         **_given(n_samples=n_samples, warmup_s=warmup_s, max_time_s=max_time_s, n_inputs=n_inputs,
                                  reps=reps, settle_s=settle_s))

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
        from .checks import stage_sweep

        return run_check(self, stage_sweep.CHECK, stage_sweep.check_stage_sweep, run, stages, skip=stage_sweep.skip,
                         chosen=chosen, max_loss=max_loss, kernel=kernel, flops=flops, load_only=load_only,
                         compute_only=compute_only, tiles=tiles, resources=resources, arch=arch, timer=timer,
                         **timing)
