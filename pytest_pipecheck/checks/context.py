"""What a check gets of its test (:class:`CheckContext`), and the one path every check takes (:func:`run_check`).

A check is a function ``check(ctx, ...)`` of a module of this package. It reads the test's settings, tier,
seed and role from ``ctx`` and records its result through ``ctx.record``; it never sees the fixture that
called it. :func:`run_check` applies, for every check the same way, what is not the check's own business:

* selection (``--pipecheck-checks``, ``checks=`` in the marker): a deselected check is recorded as skipped,
  with the reason;
* the sanitizer child's policy, from the check's row in :data:`pytest_pipecheck.contract.REGISTRY`: launch
  the kernel once for the tool and judge nothing (``launch``, ``once``), skip (``skip``) or run (``run``);
* in REV's process of ``--pipecheck-compare``, every check but perf is recorded as skipped unrun;
* the traceback rules: these frames are hidden, so a failure shows the test's own line and the message.

Finalization (the test's node id, kernel name, GPU, and whether a failure was expected) happens in
:meth:`CheckContext.record`, through :func:`pytest_pipecheck.contract.finalize`, for every result.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..children import NONE, Role
from ..config import PipecheckConfig
from ..contract import (
    CHILD_LAUNCH,
    CHILD_ONCE,
    CHILD_SKIP,
    deselection,
    expects_a_judged_failure,
    finalize,
    kind_of,
)
from ..device import TierInfo
from ..results import CheckResult, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from ..model.spec import KernelSpec

__all__ = ["CheckContext", "derive_seed", "run_check"]


def derive_seed(run_seed: int, nodeid: str) -> int:
    """A test's seed: stable for a given run seed and node id, independent of test order."""
    digest = hashlib.blake2b(f"{run_seed}:{nodeid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class CheckContext:
    """What a check needs of the test it runs in: node id, settings, tier, seed and random sources, role,
    where relative paths resolve, and the results recorded so far."""

    def __init__(self, nodeid: str, config: PipecheckConfig, tier: TierInfo, run_seed: int, *,
                 role: Role = NONE, results: list[CheckResult] | None = None, rootdir: str = ".") -> None:
        self.nodeid = nodeid
        self.config = config
        self.tier = tier
        #: what this process is for: in a sanitizer child the checks launch kernels for the tool
        self.role = role
        self.run_seed = run_seed
        self.seed = derive_seed(run_seed, nodeid)
        self.random = random.Random(self.seed)
        self.results: list[CheckResult] = [] if results is None else results
        #: where relative paths in the configuration (baseline_dir) are resolved: pytest's rootdir
        self.rootdir = rootdir
        #: whether failures recorded now are expected (a mutant being caught): the test's expect_failures,
        #: or True inside ``expecting_failures()``
        self.expecting: Any = config.expect_failures
        #: what was launched for the sanitizer in this test (scope ``launch``: once per shape, pattern, layout)
        self.launched: set[Any] = set()
        #: (id(spec), config) -> (spec, spec pinned to that config of its autotuned kernel)
        self._pinned: dict[tuple[int, Any], tuple[KernelSpec, KernelSpec]] = {}

    @property
    def spec(self) -> Any:
        """The KernelSpec named by the test's ``pipecheck(spec=...)`` marker, or None."""
        return self.config.spec

    @property
    def sanitizer_launch_only(self) -> bool:
        """True in a sanitizer child of scope ``launch`` (the setting ``sanitizer_scope``): coverage, the
        tile probe and determinism launch the kernel once per shape for the tool and judge nothing; the
        normal run judges them.

        Not while the test waits for a check to catch a bug (``expect_failures`` that names a judging check
        or says any, or inside ``expecting_failures()``): there the checks judge as in scope ``test``. A check
        that judges nothing never gives the failure such a test waits for; its body would fail on its own,
        and the runner would sanitize it again whole, after its part, in a child of its own (on the examples'
        mutants, 47 s after the rest of their part)."""
        return self.role.launch_only and not expects_a_judged_failure(self.expecting)

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

        Every result goes through :func:`pytest_pipecheck.contract.finalize`, as the sanitizer's verdicts
        do: the test's node id, the marker's kernel name, whether the failure was expected (a mutant
        caught) and, on the GPU tier, which GPU ran it. A failing or erroring result fails its test even
        when the test body goes on (:mod:`pytest_pipecheck.verdicts` checks this when the test ends).
        """
        dev = self.tier.device
        result = finalize(result, nodeid=self.nodeid, kernel=self.config.kernel, expecting=bool(self.expecting),
                          gpu=f"{dev.name} (index {dev.index}, {dev.uuid})" if dev is not None else None)
        self.results.append(result)
        return result

    def skip_check(self, check: str, reason: str, kernel: str | None = None) -> CheckResult:
        """Record that ``check`` did not run, and why; the test itself goes on."""
        return self.record(CheckResult(check, Verdict.SKIP, reason, kernel=kernel, details={"reason": reason}))

    def selected(self, check: str, kernel: str | None = None) -> CheckResult | None:
        """None when ``check`` is selected; otherwise the recorded skip saying why it is not."""
        why = deselection(check, self.config)
        return None if why is None else self.skip_check(check, why, kernel=kernel)

    def pinned(self, spec: KernelSpec, config: Any) -> KernelSpec:
        """``spec`` pinned to ``config`` of its autotuned kernel (unchanged for None).

        A config that the kernel's ``early_config_prune`` removes at a launch's arguments is never run
        there by Triton: the test is skipped with that reason (recorded as an ``autotune`` skip)."""
        if config is None:
            return spec
        # one pinned spec per (spec, config) in a test: the sanitizer child's launch-once bookkeeping keys on it
        key = (id(spec), config if isinstance(config, (str, int)) else id(config))
        if key in self._pinned:
            return self._pinned[key][1]
        import pytest

        from ..model import autotune

        def pruned(exc: Exception) -> None:
            __tracebackhide__ = True
            self.skip_check("autotune", str(exc), kernel=pinned.name)
            pytest.skip(f"pipecheck: {exc}")

        pinned: KernelSpec = autotune.spec_for(spec, config, on_pruned=pruned)
        self._pinned[key] = (spec, pinned)  # the original is kept alive so its id is not reused
        return pinned


#: how a check records that it did not run: ``skip(ctx, check, reason, *args, **kwargs)``
Skipper = Callable[..., CheckResult]


def _plain_skip(ctx: CheckContext, check: str, reason: str, *args: Any, **kwargs: Any) -> CheckResult:
    spec = args[0] if args else None
    kernel = kwargs.get("kernel") or getattr(spec, "name", None)
    return ctx.skip_check(check, reason, kernel=kernel if isinstance(kernel, str) else None)


def run_check(ctx: CheckContext, check: str, fn: Callable[..., Any], *args: Any,
              in_child: Callable[..., Any] | None = None, skip: Skipper | None = None, **kwargs: Any) -> Any:
    """Run check ``check`` (a name of :data:`pytest_pipecheck.contract.REGISTRY`) as ``fn(ctx, *args, **kwargs)``,
    under the rules every check shares (see the module's docstring).

    ``in_child(ctx, check, *args, **kwargs)`` is what the check does in a sanitizer child under the
    policies ``launch`` and ``once`` (launch the kernel for the tool, record a skip); it also runs for a
    deselected ``launch`` check there, since the tool must still see the kernel. ``skip(ctx, check, reason,
    *args, **kwargs)`` records the skip of a check that did not run (default: a plain skip result).
    """
    __tracebackhide__ = True
    kind = kind_of(check)
    skipper = skip or _plain_skip
    why = deselection(check, ctx.config)
    child = ctx.role.sanitizer
    if why is not None:
        if child and kind.child == CHILD_LAUNCH and in_child is not None:
            in_child(ctx, check, *args, **kwargs)  # a test whose launches all go through checks launches
        return skipper(ctx, check, why, *args, **kwargs)
    if ctx.role.compare and check != "perf":
        # REV's process of --pipecheck-compare: only its perf checks' times count, and a failing check must
        # not end its test before the perf check it is there for
        return skipper(ctx, check, "not run in REV's process of --pipecheck-compare: only perf checks are timed "
                                   "there", *args, **kwargs)
    if child:
        if (kind.child == CHILD_LAUNCH and ctx.sanitizer_launch_only) or kind.child == CHILD_ONCE:
            assert in_child is not None, f"check {check} has no launch for the sanitizer child"
            return in_child(ctx, check, *args, **kwargs)
        if kind.child == CHILD_SKIP:
            return skipper(ctx, check, f"not run under compute-sanitizer {ctx.role.tool}: {kind.name} is judged "
                                       "in the normal run", *args, **kwargs)
    return fn(ctx, *args, **kwargs)
