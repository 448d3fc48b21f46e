"""The correctness checks of one case together: coverage, the tile probe and determinism.

* :func:`check_all` -- the checks above that ``ctx.config.checks`` selects, each through
  :func:`.context.run_check` (a deselected one is recorded as skipped and not returned); every failure is
  raised once, together.
* :func:`.coverage.check_coverage` -- poisoned, guarded outputs: every element written, guards and inputs
  untouched, every element within tolerance of the higher-precision reference.
* :func:`.tile_probe.check_tile_probe` -- one launch per tile of the loop dimension with the inputs zero
  outside it: each tile must count once.
* :func:`.determinism.check_determinism` -- repeated launches on the same inputs bitwise equal, unless the
  kernel declares ``deterministic=False``.

What they share: the inputs from the test's seed (``ctx.torch_generator()`` / ``ctx.numpy_rng()``), the
guarded allocations and the launch (:mod:`.launch`), the reference on its own copies of the inputs
(:mod:`.reference`) and the tolerance (:mod:`.output_tolerance`). Every check takes ``values=``, a value
pattern (:mod:`pytest_pipecheck.model.values`), and ``layout=`` (:mod:`pytest_pipecheck.model.layouts`);
a wrapper-form spec (``call=``) is launched through its call (:mod:`.wrapper`) under both. Each records one
CheckResult (``coverage``, ``tile_probe``, ``determinism``) on the fixture and raises PipecheckFailure on a
defect; a bad spec or input raises PipecheckError naming the spec (recorded as an ERROR where the check
could not reach a verdict).
"""

from __future__ import annotations

from typing import Any

from ..model.spec import KernelSpec
from ..results import CheckResult, PipecheckError, PipecheckFailure
from .context import CheckContext, run_check
from .coverage import check_coverage
from .determinism import check_determinism
from .launch import launch_for_sanitizer
from .tile_probe import check_tile_probe

__all__ = ["check_all"]


def check_all(ctx: CheckContext, spec: KernelSpec, shape: Any, **kwargs: Any) -> list[CheckResult]:
    """Run coverage, tile_probe and determinism (each through :func:`.context.run_check`: a deselected one
    is recorded as skipped and not returned); raise once with every failure.

    Keyword arguments go to the checks that accept them (``tolerance``, ``rtol``, ``atol`` to coverage
    and the tile probe; ``max_tiles`` to the tile probe; ``runs`` to determinism; ``values``, the value
    pattern, and ``layout`` to all three).
    """
    __tracebackhide__ = True
    spec.check_shape(shape)
    plan = (("coverage", check_coverage, ("tolerance", "rtol", "atol", "values", "layout")),
            ("tile_probe", check_tile_probe, ("max_tiles", "rtol", "atol", "tolerance", "values", "layout")),
            ("determinism", check_determinism, ("runs", "values", "layout")))
    known = {k for _, _, keys in plan for k in keys}
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        raise PipecheckError(f"spec {spec.name!r}: check_kernel got unknown keyword {unknown[0]!r} "
                             f"(known: {', '.join(sorted(known))})")
    from ..contract import deselection

    results: list[CheckResult] = []
    failures: list[PipecheckFailure] = []
    for name, fn, keys in plan:
        try:
            got = run_check(ctx, name, fn, spec, shape, in_child=launch_for_sanitizer,
                            **{k: v for k, v in kwargs.items() if k in keys})
            if deselection(name, ctx.config) is None:  # a deselected check is recorded, not returned
                results.append(got)
        except PipecheckFailure as exc:
            failures.append(exc)
            if exc.result is not None:
                results.append(exc.result)
    if failures:
        if len(failures) == 1:
            raise failures[0]
        # from the first: what caused it (an entry point's own exception) stays the chain's root
        raise PipecheckFailure("\n".join(str(f) for f in failures), failures[0].result) from failures[0]
    return results
