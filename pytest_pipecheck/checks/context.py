"""What a check gets of its test (:class:`CheckContext`), and the one path every check takes (:func:`run_check`).

A check is a function ``check(ctx, ...)`` of a module of this package. It reads the test's settings, tier,
seed and role from ``ctx`` and records its result through ``ctx.record``; it never sees the fixture that
called it. :func:`run_check` applies, for every check the same way, what is not the check's own business:

* selection (``--pipecheck-checks``, ``checks=`` in the marker): a deselected check is recorded as skipped,
  with the reason;
* the sanitizer child's policy, from the check's row in :data:`pytest_pipecheck.contract.REGISTRY`: launch
  the kernel once for the tool and judge nothing (``launch``, ``once``), skip (``skip``) or run (``run``);
* in REV's process of ``--pipecheck-compare``, every check but perf is recorded as skipped unrun;
* the traceback rules: these frames are hidden, so a failure shows the test's own line and the message;
* what escapes: an exception out of a call that recorded no failure or error of its own (a ``PipecheckError``
  for a bad spec or argument, a ``TypeError``, a bug) is recorded as an ERROR result for the check before it
  propagates (:func:`record_escape`), so a test that catches it still fails and every report says why. The
  fixture's check methods do the same for what they do before ``run_check`` (pinning a config, checking a
  shape: :func:`records_errors`).

Finalization (the test's node id, kernel name, GPU, and whether a failure was expected) happens in
:meth:`CheckContext.record`, through :func:`pytest_pipecheck.contract.finalize`, for every result.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ..children import NONE, Role
from ..config import PipecheckConfig
from ..contract import (
    CHILD_LAUNCH,
    CHILD_ONCE,
    CHILD_SKIP,
    CheckKind,
    deselection,
    expects_a_judged_failure,
    finalize,
    kind_of,
)
from ..device import TierInfo
from ..results import CheckResult, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from ..model.spec import KernelSpec

__all__ = ["CheckContext", "derive_seed", "record_escape", "records_errors", "run_check"]


def derive_seed(run_seed: int, nodeid: str) -> int:
    """A test's seed: stable for a given run seed and node id, independent of test order."""
    digest = hashlib.blake2b(f"{run_seed}:{nodeid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class CheckContext:
    """What a check needs of the test it runs in: node id, settings, tier, seed and random sources, role,
    where relative paths resolve, and the results recorded so far."""

    def __init__(self, nodeid: str, config: PipecheckConfig, tier: TierInfo, run_seed: int, *,
                 role: Role = NONE, results: list[CheckResult] | None = None, rootdir: str = ".",
                 reproduce: str | None = None) -> None:
        self.nodeid = nodeid
        #: the run's line that reruns this test (children.reproduce_line); None: built from the node id and seed
        self._reproduce = reproduce
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
        #: this run's compare mode (:class:`pytest_pipecheck.perf.compare.ComparePlugin`), set by the fixture; None
        #: where it is off, or in REV's own process
        self.compare_session: Any = None
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
        """One command line that replays this test with the same seed, every argument shell-quoted."""
        if self._reproduce is not None:
            return self._reproduce
        from ..reproduce import rerun_argv, shell_line

        return shell_line(rerun_argv(self.nodeid, self.run_seed))

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
              in_child: Callable[..., Any] | None = None, skip: Skipper | None = None,
              kind: CheckKind | None = None, **kwargs: Any) -> Any:
    """Run check ``check`` (a name of :data:`pytest_pipecheck.contract.REGISTRY`) as ``fn(ctx, *args, **kwargs)``,
    under the rules every check shares (see the module's docstring).

    ``in_child(ctx, check, *args, **kwargs)`` is what the check does in a sanitizer child under the
    policies ``launch`` and ``once`` (launch the kernel for the tool, record a skip); it also runs for a
    deselected ``launch`` check there, since the tool must still see the kernel. ``skip(ctx, check, reason,
    *args, **kwargs)`` records the skip of a check that did not run (default: a plain skip result). ``kind``: the
    row of a check that is not pipecheck's own (:mod:`pytest_pipecheck.outside`).

    An exception that escapes the call without a failure or error recorded for it is recorded as an ERROR
    result first (:func:`record_escape`): a test that catches it does not pass with nothing recorded.
    """
    __tracebackhide__ = True
    start = len(ctx.results)
    try:
        return _dispatch(ctx, check, fn, *args, in_child=in_child, skip=skip, kind=kind, **kwargs)
    except Exception as exc:  # only what a check raises; pytest's skip/fail/exit and interrupts pass through
        record_escape(ctx, check, exc, start, _kernel_named(args, kwargs))
        raise


#: set on an exception once an ERROR result stands for it (a nested call must not record it twice)
_RECORDED = "_pipecheck_recorded"
_MAX_SUMMARY = 300

_F = TypeVar("_F", bound=Callable[..., Any])


def _kernel_named(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
    kernel = kwargs.get("kernel") or getattr(args[0] if args else None, "name", None)
    return kernel if isinstance(kernel, str) else None


def record_escape(ctx: CheckContext, check: str, exc: BaseException, start: int, kernel: str | None = None) -> None:
    """Record an ERROR result of ``check`` for ``exc``, which escaped a check call that began when
    ``ctx.results`` held ``start`` results, unless a failure or error recorded since stands for it.

    A check that finds a defect records a FAIL and raises it (:class:`~pytest_pipecheck.results.PipecheckFailure`);
    one that cannot reach a verdict records an ERROR and may raise (perf's missing baseline directory). An
    exception with no such result behind it (a ``PipecheckError`` for a bad spec or argument, a bug) used to
    leave nothing recorded: a test that caught it passed, and the reports said no check ran. The result's
    message names the check and the exception, so the report says what happened without the test's own output.
    """
    if getattr(exc, _RECORDED, False):
        return
    if not any(r.verdict in (Verdict.FAIL, Verdict.ERROR) for r in ctx.results[start:]):
        text = str(exc).strip()
        first = text.splitlines()[0] if text else "(no message)"
        if len(first) > _MAX_SUMMARY:
            first = first[:_MAX_SUMMARY] + " ..."
        name = type(exc).__name__
        ctx.record(CheckResult(check, Verdict.ERROR, f"the check raised {name}: {first}", kernel=kernel,
                               details={"message": f"pipecheck: {check} could not reach a verdict: it raised "
                                                   f"{name}: {text or '(no message)'}",
                                        "raised": name}))
    try:
        setattr(exc, _RECORDED, True)
    except (AttributeError, TypeError):  # an exception type without a __dict__: a nested call may record it again
        pass


def records_errors(check: str) -> Callable[[_F], _F]:
    """Decorate a fixture's check method: an exception escaping it, also from what it does before
    :func:`run_check` (pinning an autotune config, checking the shape and keywords of ``check_kernel``), is
    recorded as an ERROR result of ``check`` (:func:`record_escape`). Nested in ``run_check``'s own recording,
    an exception is recorded once."""

    def decorate(method: _F) -> _F:
        @functools.wraps(method)
        def checked(self: CheckContext, *args: Any, **kwargs: Any) -> Any:
            __tracebackhide__ = True
            start = len(self.results)
            try:
                return method(self, *args, **kwargs)
            except Exception as exc:  # see run_check
                record_escape(self, check, exc, start, _kernel_named(args, kwargs))
                raise

        return cast(_F, checked)

    return decorate


def _dispatch(ctx: CheckContext, check: str, fn: Callable[..., Any], *args: Any,
              in_child: Callable[..., Any] | None = None, skip: Skipper | None = None,
              kind: CheckKind | None = None, **kwargs: Any) -> Any:
    """The rules of :func:`run_check` that decide what runs: selection, REV's process, the sanitizer child."""
    __tracebackhide__ = True
    kind = kind or kind_of(check)
    skipper = skip or _plain_skip
    why = deselection(check, ctx.config, kind)
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
