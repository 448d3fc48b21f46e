"""``pipecheck.check_perf``: time a kernel, compare it with its baseline, fail a regression.

The flow of one call:

1. validate the arguments (a declared FLOP or byte count must be a positive number);
2. on the CPU tier, without injected samples, record ``perf`` as skipped with the reason and return:
   the test still passes or fails on its other checks;
3. look up the baseline for (this GPU and software stack, the test's node id, the case id). A
   missing baseline is a skip with the reason; a baseline of another environment is never used;
4. choose the anchor (``anchor="auto"``: from the declared FLOPs and bytes against the ridge point
   of the measured ceilings; ``"matmul"``, ``"copy"`` or None to override). A baseline's anchor of
   the chosen kind is reused, so both runs are anchored to the same workload; a baseline without an
   anchor (schema version 1, or saved with ``anchor=None``) is compared on raw times, timed the same
   way it was, and the summary says so;
5. time the kernel on the device (:mod:`.timing`), interleaved sample by sample with the anchor,
   after ``settle_s`` of steady load; or take the ``samples=`` given (anchored when they carry anchor
   samples);
6. compare (:func:`.stats.compare`). When both runs carry the same anchor, ``perf_anchor_mode``
   decides the series: ``"per-kind"`` (the default) the per-sample kernel/anchor ratios for a matmul
   anchor (a compute-bound kernel, whose clock drifts) and the raw times for a copy anchor (a
   memory-bound kernel, whose times barely drift); ``"always"`` the ratios; ``"adaptive"`` the ratios
   only when the anchor moved by more than ``perf_clock_tolerance``, significantly. Record the result
   with both changes, the anchor's own change and which series decided and why; a regression raises
   :class:`PipecheckFailure` with the numbers;
7. with ``--pipecheck-baseline-save``, time ``perf_baseline_runs - 1`` more runs (2 runs in all by
   default, against the same anchor) and store all of them pooled as the baseline: a candidate of one
   run against a baseline of two met both error-rate targets on every recorded H200 session. Saving
   is accepting: a run that saves reports the change but does not fail on it.

When the test also requests pytest-benchmark's ``benchmark`` fixture and passes it as
``benchmark=``, the device samples are handed to it, so ``--benchmark-json``, ``--benchmark-save``
and ``pytest-benchmark compare`` carry GPU times instead of host times.

**Compare mode** (``--pipecheck-compare=REV``, :mod:`.compare`): the kernel as of REV and as of the working
tree are timed in turns on the same GPU and the paired gate (:func:`.paired.paired_compare`, threshold
``compare_threshold``) decides; a stored baseline of this environment is compared with the head's samples
too and reported alongside, but does not decide. A check with nothing to pair at REV (the test or case is
new there) is decided by the stored baseline when there is one, and is otherwise a skip whose reason says
"new at REV"; a check given ``samples=`` times nothing, so the stored gate decides it as without compare
mode. In compare mode a missing baseline directory is no error (compare mode needs none). On the CPU tier
the check skips with the reason; REV's process failing, hanging, or calling the cases in another order is
an error, and so is a REV that could not be timed (its test skipped, xfailed or failed before the case, its
file failed to collect or was left out of REV's tree, REV's tree lacks a submodule, REV's process imported
the head's code) and a comparison the ties left undecided. Compare mode and ``--pipecheck-baseline-save`` exclude each other.

**Details** of a perf result (``CheckResult.details``, for the JSON, HTML and Markdown reports):

* always: ``case``; ``decided_by`` on every timed result and every result of compare mode (``"compare"``
  when the paired gate decided or compare mode skipped or failed the check, ``"baseline"`` otherwise);
* timed: ``median_us``, ``q1_us``, ``q3_us``, ``n``, ``timing`` (how the samples were taken), ``env``,
  ``threshold``, ``alpha``, ``anchor`` (the anchor asked for, chosen, and why), ``tflops`` / ``gbps`` and
  ``roofline_fraction`` with declared counts;
* the deciding comparison, at the top level: ``baseline_median_us``, ``candidate_median_us``, ``ratio``,
  ``change``, ``p_value``, ``ci_low``, ``ci_high``, ``regressed``, ``significant`` (the stored gate's
  :meth:`.stats.Comparison.to_json`, with ``history``, ``baseline_file`` and ``baseline_schema_version``; in
  compare mode the paired gate's, REV's median standing as the baseline);
* ``compare`` (compare mode only): ``rev`` (as given), ``sha``, ``status`` (``"compared"``, ``"new"``,
  ``"skipped"``, ``"error"`` or ``"not-compared"``) and ``reason``; when compared also ``base_median_us``,
  ``head_median_us``, ``ratio``, ``change``, ``ci_low``, ``ci_high`` (95%, distribution-free), ``p_value``
  (the one-sided sign test, ``test``: ``"sign"``), ``threshold``, ``alpha``, ``n_pairs``, ``n_slower``,
  ``n_tied`` (pairs where the head took longer, where both took the same time), ``regressed``,
  ``significant``, ``inconclusive`` (why the ties left nothing to decide, else empty), ``raw_ratio`` (ratio
  of the two medians), ``decision`` (``"pass"``, ``"fail"`` or ``"inconclusive"``, the last an error),
  ``base_timing`` (how REV's samples were taken) and ``summary``;
* ``stored`` (compare mode, when compared): the stored baseline's view of the head's samples, reported and
  not gated: ``status`` (``"compared"``, ``"none"`` or ``"off"``), ``summary``, ``verdict`` (what the stored
  gate alone would say: ``"pass"``, ``"fail"`` or ``"skip"``) and, when compared, the fields of
  :meth:`.stats.Comparison.to_json` and ``baseline_file``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..results import CheckResult, PipecheckError, PipecheckFailure, Verdict
from .baseline import BaselineError, BaselineStore, EnvKey, Lookup
from .record import _baseline_dir, _feed_benchmark, _skip, environment_key
from .stats import Samples, StatsError, anchor_label, compare

if TYPE_CHECKING:  # pragma: no cover
    from .compare import ComparePlugin, NewAtRev

if TYPE_CHECKING:  # pragma: no cover
    from ..checks.context import CheckContext

__all__ = ["check_perf", "environment_key", "in_sanitizer_child", "skip"]

_TIMING_KEYWORDS = ("n_samples", "warmup_s", "max_time_s", "n_inputs", "reps", "settle_s")
_ANCHOR_CHOICES = ("auto", "matmul", "copy", None)


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


def check_perf(
    ctx: CheckContext,
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
    **timing_kw: Any,
) -> CheckResult:
    """Time ``fn`` on the GPU and gate it against the stored baseline of this test and ``case``.

    ``flops`` / ``bytes`` (per launch) give throughput and the fraction of the measured roofline;
    ``dtype`` picks the matrix ceiling. ``anchor`` picks the clock-drift anchor timed interleaved with
    the kernel: ``"auto"`` (from flops/bytes and the measured ridge point), ``"matmul"``, ``"copy"``,
    or None (raw times only). ``samples`` injects precomputed per-launch times (us, or a
    :class:`Samples`, possibly with anchor samples) instead of timing, and ``env`` an environment key
    (both for tests and offline use). Other keywords go to :func:`.timing.measure` (n_samples,
    warmup_s, max_time_s, n_inputs, reps, settle_s).

    Returns the recorded :class:`CheckResult` (pass, or skip with the reason). Raises
    :class:`PipecheckFailure` on a regression, :class:`PipecheckError` for bad arguments and unusable
    baseline files or directories.
    """
    __tracebackhide__ = True
    try:
        return _check_perf(ctx, fn, flops=flops, nbytes=bytes, case=case, samples=samples, hot_cache=hot_cache,
                           graph=graph, dtype=dtype, kernel=kernel, benchmark=benchmark, env=env,
                           anchor=anchor, timing_kw=timing_kw)
    except PipecheckFailure as exc:
        raise PipecheckFailure(str(exc), exc.result) from None
    except PipecheckError as exc:
        # Re-raised from here so pytest shows the test's line and the message, not plugin frames.
        raise type(exc)(str(exc)) from None


def _check_perf(ctx: CheckContext, fn: Callable[..., Any] | None, *, flops: Any, nbytes: Any, case: str | None,
                samples: Samples | Sequence[float] | None, hot_cache: bool, graph: bool, dtype: str,
                kernel: str | None, benchmark: Any, env: EnvKey | Mapping[str, Any] | None,
                anchor: str | None, timing_kw: dict[str, Any]) -> CheckResult:
    __tracebackhide__ = True
    flops_f, bytes_f, case_id = _checked_args(ctx, fn, flops, nbytes, case, samples, anchor, timing_kw)
    session = _compare_session(ctx)
    if ctx.role.compare:
        from .compare import rev_check

        reason = rev_check(ctx, fn, case_id, samples=samples, timing_kw=timing_kw, hot_cache=hot_cache,
                           graph=graph)
        return _skip(ctx, reason, benchmark, kernel, case_id)
    new_at_rev: NewAtRev | None = None
    if session is not None and samples is None:
        from . import compare as compare_mode

        got = compare_mode.check(ctx, session, fn, flops_f=flops_f, bytes_f=bytes_f, case_id=case_id,
                                 hot_cache=hot_cache, graph=graph, dtype=dtype, kernel=kernel, benchmark=benchmark,
                                 env=env, anchor=anchor, timing_kw=timing_kw)
        if isinstance(got, CheckResult):
            return got
        new_at_rev = got  # nothing to pair at REV: the stored baseline decides, if there is one
    compare_info = _compare_note(session, new_at_rev)
    given: Samples | None = None
    if samples is not None:
        try:
            given = samples if isinstance(samples, Samples) else Samples.of(samples, "samples=")
        except StatsError as exc:
            raise PipecheckError(f"check_perf({exc}) in {ctx.nodeid}") from None
    elif not ctx.tier.has_gpu:
        return _skip(ctx, _noted(new_at_rev, f"perf needs a CUDA GPU: {ctx.tier.reason}"), benchmark, kernel, case_id,
                     details=compare_info)
    elif ctx.tier.timing_blocked:
        return _skip(ctx, _noted(new_at_rev, f"perf not timed: {ctx.tier.timing_blocked}"), benchmark, kernel,
                     case_id, details=compare_info)
    key = env if isinstance(env, EnvKey) else EnvKey(dict(env)) if env is not None else environment_key(ctx)
    store, found = _lookup(ctx, key, case_id, kernel, compare_mode_on=session is not None)
    timed = _measured(ctx, fn, given, found, flops_f, bytes_f, anchor=anchor, dtype=dtype, hot_cache=hot_cache,
                      graph=graph, timing_kw=timing_kw, case_id=case_id)
    measured = timed.measured
    details, roof = _details(ctx, timed, key, case_id, flops_f, bytes_f, dtype, compare_info)
    to_save = timed.to_save or measured
    entry = to_save.to_json()
    entry.update({k: v for k, v in (("flops", flops_f), ("bytes", bytes_f)) if v is not None})
    if benchmark is not None:
        _feed_benchmark(benchmark, measured, {"pipecheck_case": case_id, "pipecheck_unit": "device time (events)",
                                              **{k: v for k, v in details.items() if k in ("tflops", "gbps")}})
    if store is None or found is None:
        off = _noted(new_at_rev, "baselines are off (baseline_dir is none)")
        return _skip(ctx, off, benchmark, kernel, case_id, summary=f"{measured.median:.1f} us{roof}; {off}",
                     details=details)
    saved = ""
    if ctx.config.baseline_save:
        path = store.save(key, ctx.nodeid, case_id, entry)
        details["saved_to"] = path
        pooled = f" pooled from {to_save.runs} runs" if to_save.runs > 1 else ""
        saved = f"; saved as the new baseline{pooled} ({os.path.basename(path)})"
    if found.samples is None:
        details["reason"] = found.reason
        anchored = ""
        if measured.anchored:
            anchored = f" (anchor {anchor_label(measured.anchor)}: {measured.anchor_median:.1f} us)"
        if ctx.config.baseline_save:
            return ctx.record(CheckResult("perf", Verdict.PASS, f"{measured.median:.1f} us{anchored}{roof}{saved}",
                                          kernel=kernel, details=details))
        missing = _noted(new_at_rev, found.reason)
        return _skip(ctx, missing, benchmark, kernel, case_id,
                     summary=f"{measured.median:.1f} us{anchored}{roof}; {missing}", details=details)
    return _gate(ctx, found, measured, details, kernel=kernel, case_id=case_id, roof=roof, saved=saved,
                 new_at_rev=new_at_rev)


def _checked_args(ctx: CheckContext, fn: Any, flops: Any, nbytes: Any, case: Any, samples: Any, anchor: Any,
                  timing_kw: dict[str, Any]) -> tuple[float | None, float | None, str]:
    """The check's arguments checked: FLOPs and bytes as positive numbers (or None) and the case id.
    PipecheckError naming the argument and the test for a bad one."""
    nodeid = ctx.nodeid
    flops_f = _positive("flops", flops, nodeid)
    bytes_f = _positive("bytes", nbytes, nodeid)
    unknown = sorted(set(timing_kw) - set(_TIMING_KEYWORDS))
    if unknown:
        raise PipecheckError(
            f"check_perf in {nodeid}: unknown keyword {unknown[0]!r} (timing keywords: {', '.join(_TIMING_KEYWORDS)})"
        )
    if anchor not in _ANCHOR_CHOICES:
        raise PipecheckError(
            f"check_perf(anchor={anchor!r}) in {nodeid}: must be 'auto', 'matmul', 'copy' or None"
        )
    if case is not None and not isinstance(case, str):
        raise PipecheckError(f"check_perf(case={case!r}) in {nodeid}: case must be a string")
    case_id = case or "default"
    for r in ctx.results:
        if r.check == "perf" and r.details.get("case") == case_id:
            raise PipecheckError(
                f"check_perf called twice with case={case_id!r} in {nodeid}: give each call its own case= "
                "so each has its own baseline"
            )
    if fn is None and samples is None:
        raise PipecheckError(f"check_perf in {nodeid}: pass the callable to time (or samples=)")
    if fn is not None and not callable(fn):
        raise PipecheckError(f"check_perf in {nodeid}: {fn!r} is not callable")
    return flops_f, bytes_f, case_id


def _lookup(ctx: CheckContext, key: EnvKey, case_id: str, kernel: str | None, *,
            compare_mode_on: bool) -> tuple[BaselineStore | None, Lookup | None]:
    """The baseline store and this case's baseline in it for ``key`` (None, None where baselines are off).
    A missing baseline directory on the GPU tier is an error, not a skip (recorded), unless saving creates
    it or compare mode decides."""
    __tracebackhide__ = True
    directory, where = _baseline_dir(ctx)
    if directory is None:
        return None, None
    store = BaselineStore(directory, where)
    try:
        found = store.lookup(key, ctx.nodeid, case_id)
    except BaselineError as exc:
        ctx.record(CheckResult("perf", Verdict.ERROR, str(exc), kernel=kernel,
                               details={"case": case_id, "env": dict(key.values)}))
        raise
    save = ctx.config.baseline_save
    if (found.missing_dir and ctx.tier.has_gpu and not compare_mode_on
            and not (save and not os.path.exists(directory))):
        # On the GPU tier the gate is meant to run: a directory that is not there (a typo, a
        # checkout without it, CI in another working directory) must not turn every perf check
        # into a skip and the run green. Saving creates a missing directory, so that is allowed.
        message = (f"perf gate cannot run: {found.reason.removeprefix('no baseline: ')}. On the GPU tier a "
                   "missing baseline directory is an error, not a skip: fix the path, record baselines "
                   "with --pipecheck-baseline-save, or turn the gate off with baseline_dir = none")
        ctx.record(CheckResult("perf", Verdict.ERROR, message, kernel=kernel,
                               details={"case": case_id, "baseline_dir": directory, "source": where}))
        raise PipecheckError(f"check_perf in {ctx.nodeid} [case {case_id}]: {message}")
    return store, found


@dataclasses.dataclass
class _Timed:
    """What the check measured (or was given), what a save stores, the ceilings and the anchor chosen."""

    measured: Samples
    to_save: Samples | None
    ceilings: Any
    anchor_info: dict[str, Any]


def _measured(ctx: CheckContext, fn: Callable[..., Any] | None, given: Samples | None, found: Lookup | None,
              flops_f: float | None, bytes_f: float | None, *, anchor: str | None, dtype: str, hot_cache: bool,
              graph: bool, timing_kw: dict[str, Any], case_id: str) -> _Timed:
    """The kernel timed on the device with the anchor chosen for it (the baseline's where it has one of the
    same kind; none where the baseline has none, so raw times compare like for like), pooled over
    ``perf_baseline_runs`` runs when saving; or the samples given."""
    ceilings = None
    anchor_info: dict[str, Any] = {"requested": anchor}
    to_save: Samples | None = None
    save = ctx.config.baseline_save
    base_samples = found.samples if found is not None else None
    if given is None:
        from . import timing

        assert fn is not None
        if flops_f is not None or bytes_f is not None or anchor in ("matmul", "copy"):
            ceilings = timing.current_ceilings()
        if anchor == "auto":
            kind, why = timing.choose_anchor(flops_f, bytes_f, ceilings, dtype)
        else:
            kind, why = anchor, ("anchor=None given: raw times only" if anchor is None else f"anchor={anchor!r} given")
        use: timing.Anchor | str | None = kind
        if kind is not None and base_samples is not None:
            if base_samples.anchor and base_samples.anchor.get("kind") == kind:
                use = timing.Anchor.from_definition(dict(base_samples.anchor))
                why += "; the baseline's anchor"
            elif not base_samples.anchored and not save:
                # time it as the baseline was timed, so raw times compare like for like
                use = None
                why = (f"not anchored: the baseline (schema version {found.version if found else '?'}) has no "
                       f"anchor, so raw times are compared; save a new baseline to anchor ({why})")
        anchor_info.update(kind=kind, reason=why)
        timing_kw.setdefault("settle_s", timing.DEFAULT_SETTLE_S)
        anchor_dtype = dtype if dtype in ("bf16", "fp16") else "bf16"
        measured = timing.measure(fn, hot_cache=hot_cache, graph=graph, anchor=use, ceilings=ceilings,
                                  anchor_dtype=anchor_dtype, **timing_kw)
        if save and ctx.config.perf_baseline_runs > 1:
            # A baseline pools several runs (the first is also this check's candidate), each timed like
            # the first and against the very anchor it got, so that all of them share one definition.
            same = timing.Anchor.from_definition(dict(measured.anchor or {})) if measured.anchored else None
            runs = [measured]
            for _ in range(ctx.config.perf_baseline_runs - 1):
                runs.append(timing.measure(fn, hot_cache=hot_cache, graph=graph, anchor=same, ceilings=ceilings,
                                           anchor_dtype=anchor_dtype, **timing_kw))
            try:
                to_save = Samples.pooled(runs)
            except StatsError as exc:  # pragma: no cover - every run was timed with the same anchor
                raise PipecheckError(f"check_perf in {ctx.nodeid} [case {case_id}]: {exc}") from None
    else:
        measured = given
        anchor_info.update(kind=(measured.anchor or {}).get("kind"),
                           reason="anchor samples given" if measured.anchored else "samples given without anchor")
    if measured.anchored:
        anchor_info.update(definition=dict(measured.anchor or {}), median_us=measured.anchor_median)
    return _Timed(measured, to_save, ceilings, anchor_info)


def _details(ctx: CheckContext, timed: _Timed, key: EnvKey, case_id: str, flops_f: float | None,
             bytes_f: float | None, dtype: str, compare_info: dict[str, Any] | None) -> tuple[dict[str, Any], str]:
    """The result's details (the measurement, the environment, the gate's settings, the anchor, throughput and
    the roofline) and the summary's throughput part."""
    measured = timed.measured
    details: dict[str, Any] = {
        "case": case_id,
        "median_us": measured.median,
        "q1_us": measured.q1,
        "q3_us": measured.q3,
        "n": measured.n,
        "timing": dict(measured.meta),
        "env": dict(key.values),
        "threshold": ctx.config.perf_threshold,
        "alpha": ctx.config.perf_alpha,
        "anchor": timed.anchor_info,
        "decided_by": "baseline",
        **(compare_info or {}),
    }
    if timed.to_save is not None and timed.to_save.runs > 1:
        details["saved_runs"] = timed.to_save.runs
        details["saved_run_medians_us"] = list(timed.to_save.meta.get("run_medians_us", []))
    throughput = ""
    if flops_f is not None:
        details["tflops"] = flops_f / (measured.median * 1e-6) / 1e12
        throughput = f"{details['tflops']:.1f} TFLOP/s"
    if bytes_f is not None:
        details["gbps"] = bytes_f / (measured.median * 1e-6) / 1e9
        throughput = (throughput + ", " if throughput else "") + f"{details['gbps']:.0f} GB/s"
    roof = ""
    if timed.ceilings is not None:
        from .timing import roofline

        fraction = roofline(timed.ceilings, measured.median, flops=flops_f, nbytes=bytes_f, dtype=dtype)
        details["ceilings"] = timed.ceilings.to_json()
        if fraction is not None:
            details["roofline_fraction"] = fraction[0]
            roof = f"; {fraction[0]:.2f} of {fraction[1]}"
    if throughput:
        roof = f"; {throughput}{roof}"
    return details, roof


def _gate(ctx: CheckContext, found: Lookup, measured: Samples, details: dict[str, Any], *, kernel: str | None,
          case_id: str, roof: str, saved: str, new_at_rev: NewAtRev | None) -> CheckResult:
    """The stored-baseline gate: the measurement against the baseline (:func:`.stats.compare`); a regression
    fails (unless this run saves: saving is accepting), anything else passes with the numbers."""
    __tracebackhide__ = True
    assert found.samples is not None
    nodeid = ctx.nodeid
    save = ctx.config.baseline_save
    try:
        result = compare(found.samples, measured, threshold=ctx.config.perf_threshold, alpha=ctx.config.perf_alpha,
                         ci=True, seed=ctx.seed, anchor_mode=ctx.config.perf_anchor_mode,
                         clock_tolerance=ctx.config.perf_clock_tolerance)
    except StatsError as exc:
        raise PipecheckError(f"check_perf in {nodeid} [case {case_id}]: {exc}") from None
    details.update(result.to_json())
    from .baseline import history_of

    # earlier baselines, the current one, then this run: what the HTML report plots
    details["history"] = [*history_of(found.entry), {"label": "this run", "median_us": measured.median}]
    details["baseline_file"] = found.path
    details["baseline_schema_version"] = found.version
    unanchored = ""
    if not result.anchor_compared and not result.note.startswith(("the baseline has no anchor", "the anchors differ")):
        reason = details["anchor"].get("reason") or ""
        unanchored = f"; {reason}" if reason.startswith("not anchored") else "; not anchored"
    fewer = ""
    if found.samples.runs < ctx.config.perf_baseline_runs and not save:
        fewer = (f"; the baseline pools {found.samples.runs} run(s), fewer than perf_baseline_runs="
                 f"{ctx.config.perf_baseline_runs}: re-save it for the gate's measured false-alarm rate")
    summary = f"{result.describe()}{unanchored}{fewer}{roof}{saved}"
    if new_at_rev is not None:
        summary += f"; {new_at_rev.reason} (the stored baseline decides)"
    if result.regressed and not save:
        what = ("median of the per-sample kernel/anchor ratios (anchor timed interleaved)" if result.anchored
                else "median of the raw times")
        record = ctx.record(CheckResult("perf", Verdict.FAIL, "regression: " + summary, kernel=kernel, details=details))
        raise PipecheckFailure(
            f"perf regression in {nodeid} [case {case_id}]: {summary}\n"
            f"  gate: {what} slower by more than {ctx.config.perf_threshold * 100:g}% and one-sided Mann-Whitney "
            f"p < {ctx.config.perf_alpha:g} ({result.n_candidate} samples vs {result.n_baseline})\n"
            f"  baseline: {found.path}\n"
            f"  if the slowdown is intended, accept it with --pipecheck-baseline-save",
            record,
        )
    return ctx.record(CheckResult("perf", Verdict.PASS, summary, kernel=kernel, details=details))


# --------------------------------------------------------------------------- compare mode


def _compare_session(ctx: CheckContext) -> ComparePlugin | None:
    """This run's compare mode, when it is on for this check (never in REV's own process)."""
    if ctx.config.compare is None or ctx.role.compare:
        return None
    return ctx.compare_session


def _noted(new_at_rev: NewAtRev | None, reason: str) -> str:
    """A skip's reason, led by why compare mode did not decide (the check is new at REV)."""
    return reason if new_at_rev is None else f"{new_at_rev.reason}; {reason}"


def _compare_note(session: ComparePlugin | None, new_at_rev: NewAtRev | None) -> dict[str, Any] | None:
    """``details["compare"]`` of a check compare mode did not decide."""
    if session is None:
        return None
    info: dict[str, Any] = {"rev": session.revision.rev, "sha": session.revision.sha}
    if new_at_rev is not None:
        return {"decided_by": "baseline", "compare": {**info, "status": "new", "reason": new_at_rev.reason}}
    return {"decided_by": "baseline",
            "compare": {**info, "status": "not-compared", "reason": "samples= given: nothing to time at REV"}}


def skip(ctx: CheckContext, check: str, reason: str, fn: Any = None, *, benchmark: Any = None,
         kernel: str | None = None, case: str | None = None, **_ignored: Any) -> CheckResult:
    """Record that the perf check did not run (deselected), freeing pytest-benchmark's fixture."""
    return _skip(ctx, reason, benchmark, kernel, case or "default")


def in_sanitizer_child(ctx: CheckContext, check: str, fn: Any = None, *, samples: Any = None, **kwargs: Any
                       ) -> CheckResult:
    """In a sanitizer child: launch ``fn`` once, untimed, so the tool sees the kernel at the size the test
    times, and record a skip (a time taken under the tool is the tool's). Injected ``samples`` time
    nothing and are compared as in the normal run."""
    __tracebackhide__ = True
    if samples is not None:
        return check_perf(ctx, fn, samples=samples, **kwargs)
    if fn is None or not callable(fn):
        raise PipecheckError(f"check_perf in {ctx.nodeid}: pass the callable to time (or samples=)")
    from .timing import run_once_for_sanitizer

    run_once_for_sanitizer(fn)
    return _skip(ctx, f"not timed under compute-sanitizer {ctx.role.tool}: the kernel ran once for the sanitizer; "
                 "it is timed in the normal run", kwargs.get("benchmark"), kwargs.get("kernel"),
                 kwargs.get("case") or "default")
