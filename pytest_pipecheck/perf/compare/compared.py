"""The perf check in compare mode: HEAD and REV timed in turns, and the paired gate's verdict."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...results import CheckResult, PipecheckError, PipecheckFailure, Verdict
from ..stats import Samples, StatsError, compare
from .errors import CompareError
from .outcomes import NewAtRev
from .samplers import fake_timer, make_sampler
from .session import ComparePlugin

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from ...checks.context import CheckContext
    from ..baseline import EnvKey, Lookup


def _stored_alongside(ctx: CheckContext, found: Lookup | None, head: Samples) -> dict[str, Any]:
    """What the stored baseline says of the head's samples, reported beside the paired gate's verdict."""
    if found is None:
        return {"status": "off", "verdict": "skip", "summary": "baselines are off (baseline_dir is none)"}
    if found.samples is None:
        return {"status": "none", "verdict": "skip", "summary": found.reason}
    try:
        result = compare(found.samples, head, threshold=ctx.config.perf_threshold, alpha=ctx.config.perf_alpha,
                         ci=True, seed=ctx.seed, anchor_mode=ctx.config.perf_anchor_mode,
                         clock_tolerance=ctx.config.perf_clock_tolerance)
    except StatsError as exc:
        return {"status": "none", "verdict": "skip", "summary": f"not comparable: {exc}"}
    return {**result.to_json(), "status": "compared", "verdict": "fail" if result.regressed else "pass",
            "summary": result.describe(), "baseline_file": found.path}


def check(ctx: CheckContext, session: ComparePlugin, fn: Callable[..., Any] | None, *,
                    flops_f: float | None, bytes_f: float | None, case_id: str, hot_cache: bool, graph: bool,
                    dtype: str, kernel: str | None, benchmark: Any, env: EnvKey | Mapping[str, Any] | None,
                    anchor: str | None, timing_kw: dict[str, Any]) -> CheckResult | NewAtRev:
    """One check in compare mode: the paired gate decides, the stored baseline is reported alongside.

    Returns the recorded result, or :class:`.compare.NewAtRev` when REV has nothing to pair with (the caller
    then goes on as without compare mode). Raises :class:`PipecheckFailure` on a regression against REV and
    :class:`PipecheckError` when the pairing failed (REV's process crashed or hung, REV's kernel raised, the
    calls came in another order), REV could not be timed (the module's "new at REV"), or the ties left the
    pairs undecided (:attr:`.paired.PairedComparison.inconclusive`), recorded as an error.
    """
    __tracebackhide__ = True
    from .. import timing
    from ..baseline import BaselineError, BaselineStore, EnvKey
    from ..paired import paired_compare
    from ..record import _baseline_dir, _feed_benchmark, _skip, environment_key

    nodeid = ctx.nodeid
    rev = session.revision
    info: dict[str, Any] = {"rev": rev.rev, "sha": rev.sha}
    fake = fake_timer()
    blocked = (None if fake else f"timing needs a CUDA GPU: {ctx.tier.reason}" if not ctx.tier.has_gpu
               else ctx.tier.timing_blocked or None)
    if blocked or session.tree is None:
        reason = f"perf not compared with {rev.label} (--pipecheck-compare): {blocked or 'no tree of REV was made'}"
        return _skip(ctx, reason, benchmark, kernel, case_id,
                     details={"decided_by": "compare", "compare": {**info, "status": "skipped", "reason": reason}})
    assert fn is not None
    key = env if isinstance(env, EnvKey) else EnvKey(dict(env)) if env is not None else environment_key(ctx)
    directory, where = _baseline_dir(ctx)
    found: Lookup | None = None
    if directory is not None:
        try:
            found = BaselineStore(directory, where).lookup(key, nodeid, case_id)
        except BaselineError as exc:
            ctx.record(CheckResult("perf", Verdict.ERROR, str(exc), kernel=kernel,
                                  details={"case": case_id, "env": dict(key.values)}))
            raise
    # The pairing cancels the clock; an anchor is timed only for a stored baseline that has one (like for like).
    use_anchor = None
    if not fake and found is not None and found.samples is not None and found.samples.anchored:
        use_anchor = timing.Anchor.from_definition(dict(found.samples.anchor or {}))
    settle_s = float(timing_kw.get("settle_s", timing.DEFAULT_SETTLE_S))
    n_samples = int(timing_kw.get("n_samples", timing.DEFAULT_SAMPLES))
    if n_samples < 2:
        raise PipecheckError(f"check_perf: n_samples={n_samples} must be >= 2")
    anchor_dtype = dtype if dtype in ("bf16", "fp16") else "bf16"

    def head() -> Any:
        return make_sampler(fn, warmup_s=float(timing_kw.get("warmup_s", 0.2)), hot_cache=hot_cache,
                            graph=graph, n_inputs=timing_kw.get("n_inputs"), reps=timing_kw.get("reps"),
                            anchor=use_anchor, anchor_dtype=anchor_dtype, settle_s=settle_s)

    try:
        got = session.pair(ctx, case_id, head, n_samples=n_samples,
                           max_time_s=float(timing_kw.get("max_time_s", 30.0)), settle_s=settle_s,
                           timeout=ctx.config.compare_timeout)
    except CompareError as exc:
        message = f"perf not compared with {rev.label}: {exc}"
        ctx.record(CheckResult("perf", Verdict.ERROR, message.split("\n", 1)[0], kernel=kernel,
                               details={"case": case_id, "decided_by": "compare",
                                        "compare": {**info, "status": "error", "reason": str(exc)}}))
        raise PipecheckError(f"check_perf in {nodeid} [case {case_id}]: {message}") from None
    if isinstance(got, NewAtRev):
        return got
    try:
        paired = paired_compare(got.base, got.head, threshold=ctx.config.compare_threshold,
                                alpha=ctx.config.perf_alpha)
    except StatsError as exc:
        message = f"perf not compared with {rev.label}: the pairs cannot be decided: {exc}"
        ctx.record(CheckResult("perf", Verdict.ERROR, message, kernel=kernel,
                               details={"case": case_id, "decided_by": "compare",
                                        "compare": {**info, "status": "error", "reason": str(exc)}}))
        raise PipecheckError(f"check_perf in {nodeid} [case {case_id}]: {message}") from None
    head_samples = got.head
    summary = paired.describe(rev.label)
    stored = _stored_alongside(ctx, found, head_samples)
    details: dict[str, Any] = {
        "case": case_id,
        "decided_by": "compare",
        "median_us": head_samples.median,
        "q1_us": head_samples.q1,
        "q3_us": head_samples.q3,
        "n": head_samples.n,
        "timing": dict(head_samples.meta),
        "env": dict(key.values),
        "threshold": ctx.config.compare_threshold,
        "alpha": ctx.config.perf_alpha,
        "anchor": {"requested": anchor, "kind": None if use_anchor is None else use_anchor.kind,
                   "reason": "compare mode: the pairing with REV cancels the clock" if use_anchor is None
                   else "compare mode: the stored baseline's anchor, for the comparison reported alongside"},
        "baseline_median_us": paired.base_median_us,
        "candidate_median_us": paired.head_median_us,
        "ratio": paired.ratio,
        "change": paired.change,
        "p_value": paired.p_value,
        "ci_low": paired.ci_low,
        "ci_high": paired.ci_high,
        "regressed": paired.regressed,
        "significant": paired.significant,
        "compare": {**info, "status": "compared", "reason": "", **paired.to_json(),
                    "decision": paired.decision, "base_timing": dict(got.base.meta),
                    "summary": summary},
        "stored": stored,
    }
    throughput = []
    if flops_f is not None:
        details["tflops"] = flops_f / (head_samples.median * 1e-6) / 1e12
        throughput.append(f"{details['tflops']:.1f} TFLOP/s")
    if bytes_f is not None:
        details["gbps"] = bytes_f / (head_samples.median * 1e-6) / 1e9
        throughput.append(f"{details['gbps']:.0f} GB/s")
    if benchmark is not None:
        _feed_benchmark(benchmark, head_samples, {"pipecheck_case": case_id, "pipecheck_unit": "device time (events)",
                                                  **{k: v for k, v in details.items() if k in ("tflops", "gbps")}})
    extra = f"; {', '.join(throughput)}" if throughput else ""
    alongside = f"; stored baseline ({stored['verdict']}, not gated): {stored['summary']}"
    if paired.regressed:
        record = ctx.record(CheckResult("perf", Verdict.FAIL, f"regression against {rev.label}: {summary}{extra}"
                                        f"{alongside}", kernel=kernel, details=details))
        raise PipecheckFailure(
            f"perf regression against {rev.label} in {nodeid} [case {case_id}]: {summary}{extra}\n"
            f"  gate (--pipecheck-compare): the median of the per-pair ratios head/REV, timed in turns on one GPU, "
            f"slower by more than {ctx.config.compare_threshold * 100:g}%, with the one-sided sign test's "
            f"p < {ctx.config.perf_alpha:g} or its 95% interval wholly above the threshold ({paired.n_pairs} pairs; "
            f"a tied pair counts as not slower)\n"
            f"  REV: {rev.rev} = {rev.sha}\n"
            f"  stored baseline, reported only (compare mode decides): {stored['summary']}",
            record,
        )
    if paired.inconclusive:
        # a median above the threshold the ties left no way to confirm: neither a regression nor a pass
        details["compare"]["reason"] = paired.inconclusive
        message = f"perf not decided against {rev.label}: {summary}: {paired.inconclusive}"
        ctx.record(CheckResult("perf", Verdict.ERROR, f"{message}{extra}{alongside}", kernel=kernel, details=details))
        raise PipecheckError(f"check_perf in {nodeid} [case {case_id}]: {message}")
    return ctx.record(CheckResult("perf", Verdict.PASS, f"{summary}{extra}{alongside}", kernel=kernel,
                                  details=details))
