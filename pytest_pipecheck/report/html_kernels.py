"""The HTML report's section for each kernel: its table of verdicts per test and check, then what the
details carry, each as a table and a plot: the occupancy per architecture (blocks/SM against shared memory
per block, the kernel's point, its cliffs), the time against the stored baseline, the stage sweep (measured
against cost-model predicted), the baseline history, and the sanitizer findings with the source line each
points at.

A plot needs matplotlib; without it, or when one cannot be drawn from odd details, the table stays and the
plot's place says why. At most ``_MAX_PLOTS_PER_KIND`` distinct configurations are drawn per kernel.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from ..results import CheckResult, Verdict
from . import plots
from .html_details import (
    _arch_points,
    _findings,
    _float,
    _history_rows,
    _int,
    _source_line,
    _stage_extras,
    _stage_rows,
)
from .html_markup import _ORDER, _badge, _bytes, _check_order, _e, _kernel_of
from .terminal import status

_MAX_PLOTS_PER_KIND = 3  # per kernel: distinct configurations drawn before the rest are only tabled


def _verdict_table(results: Sequence[CheckResult]) -> str:
    checks = sorted({r.check for r in results}, key=_check_order)
    by_test: dict[str, dict[str, list[CheckResult]]] = defaultdict(lambda: defaultdict(list))
    for r in results:
        by_test[r.nodeid][r.check].append(r)
    head = "<tr><th>test</th>" + "".join(f"<th>{_e(c)}</th>" for c in checks) + "</tr>"
    rows = []
    for nodeid in sorted(by_test):
        cells = []
        for check in checks:
            group = by_test[nodeid].get(check)
            if not group:
                cells.append('<td class="v-none">–</td>')
                continue
            worst = min(group, key=lambda r: _ORDER[status(r)])
            inner = "".join(f'<div class="cell">{_badge(status(r))} {_e(r.summary)}</div>' for r in group)
            cells.append(f'<td class="v-{status(worst)}">{inner}</td>')
        rows.append(f"<tr><td><code>{_e(nodeid or '?')}</code></td>{''.join(cells)}</tr>")
    return f'<table class="verdicts">{head}{"".join(rows)}</table>'


def _figure(png: bytes, alt: str, caption: str) -> str:
    return (f'<figure><img src="{plots.data_uri(png)}" alt="{_e(alt)}">'
            f"<figcaption>{_e(caption)}</figcaption></figure>")


def _plot(draw: Any, alt: str, caption: str, missing: str | None) -> str:
    if missing:
        return f'<p class="note">{_e(missing)}</p>'
    try:
        png = draw()
    except Exception as exc:  # a plot must never cost the report
        return f'<p class="note">plot not drawn ({_e(type(exc).__name__)}: {_e(exc)}); the table has the data</p>'
    return _figure(png, alt, caption)


def _occupancy_section(results: Sequence[CheckResult], missing: str | None) -> str:
    seen: list[tuple[Any, ...]] = []
    parts = []
    omitted = 0
    for r in results:
        points = _arch_points(r.details)
        if not points:
            continue
        floor = _int(r.details.get("floor", r.details.get("min_blocks")))
        key = (tuple(points), floor)
        if key in seen:
            continue
        seen.append(key)
        if len(seen) > _MAX_PLOTS_PER_KIND:
            omitted += 1
            continue
        rows = []
        for p in points:
            cliffs = [p.cliff] if p.cliff else []
            if not cliffs and p.smem_up is not None:
                cliffs.append(f"≤ {_bytes(p.smem_up)} for {p.blocks_per_sm + 1}")
            if not p.cliff and p.smem_down is not None:
                cliffs.append(f"≥ {_bytes(p.smem_down)} drops to {max(p.blocks_per_sm - 1, 0)}")
            low = floor is not None and p.blocks_per_sm < floor
            cls = ' class="v-fail"' if low else ""
            rows.append(
                f"<tr><td>{_e(p.arch)}</td><td class=\"num\">{_e(p.threads if p.threads is not None else '–')}</td>"
                f"<td class=\"num\">{_e(p.registers if p.registers is not None else '–')}</td>"
                f'<td class="num">{_e(_bytes(p.smem_per_block))}</td>'
                f'<td class="num"{cls}>{p.blocks_per_sm}</td><td>{_e(", ".join(p.limiters) or "–")}</td>'
                f"<td>{_e('; '.join(cliffs) or '–')}</td></tr>")
        table = ("<table><tr><th>arch</th><th>threads</th><th>registers</th><th>smem/block</th>"
                 "<th>blocks/SM</th><th>limited by</th><th>cliffs</th></tr>" + "".join(rows) + "</table>")
        title = f"{r.nodeid}" + (f" (floor {floor} blocks/SM)" if floor else "")
        alt = "occupancy: " + ", ".join(f"{p.arch} {p.blocks_per_sm} blocks/SM at {_bytes(p.smem_per_block)}"
                                        for p in points)
        plot = _plot(lambda pts=points, fl=floor: plots.occupancy_plot(pts, floor=fl), alt,
                     "blocks per SM against shared memory per block; the dot is this kernel, dashed lines "
                     "its cliffs", missing)
        parts.append(f"<h4>{_e(title)}</h4>{table}{plot}")
    if not parts:
        return ""
    more = f'<p class="note">{omitted} more configurations not drawn.</p>' if omitted else ""
    return '<h3 class="occupancy">Occupancy per architecture</h3>' + "".join(parts) + more


_R = TypeVar("_R", bound=Sequence[Any])


def _plotted(results: Sequence[CheckResult],
             rows_of: Callable[[Mapping[str, Any]], _R]) -> Iterator[tuple[CheckResult, _R]]:
    """(result, its rows) for the results that have rows to show, at most _MAX_PLOTS_PER_KIND of them."""
    shown = 0
    for r in results:
        rows = rows_of(r.details)
        if not rows:
            continue
        if shown >= _MAX_PLOTS_PER_KIND:
            break
        shown += 1
        yield r, rows


def _stage_section(results: Sequence[CheckResult], missing: str | None) -> str:
    parts: list[str] = []
    for r, rows in _plotted(results, _stage_rows):
        extras = _stage_extras(r.details)
        chosen = _int(r.details.get("chosen"))
        best = _int(r.details.get("best_stages"))

        def has(key: str, ex: dict[int, dict[str, Any]] = extras) -> bool:
            return any(e.get(key) not in (None, "") for e in ex.values())

        show_spread, show_blocks, show_tflops = has("q1_us") and has("q3_us"), has("blocks_per_sm"), has("tflops")
        show_note = has("note") or chosen is not None or best is not None
        head = "<tr><th>stages</th><th>measured (µs)</th><th>predicted (µs)</th>"
        head += "<th>q1 – q3 (µs)</th>" if show_spread else ""
        head += "<th>blocks/SM</th>" if show_blocks else ""
        head += "<th>TFLOP/s</th>" if show_tflops else ""
        head += "<th>note</th>" if show_note else ""
        body = []
        for s, m, p in rows:
            e = extras.get(s, {})
            cells = (f"<td class=\"num\">{s}</td><td class=\"num\">{_e(f'{m:.2f}' if m is not None else '–')}</td>"
                     f"<td class=\"num\">{_e(f'{p:.2f}' if p is not None else '–')}</td>")
            if show_spread:
                q1, q3 = e.get("q1_us"), e.get("q3_us")
                spread = f"{q1:.2f} – {q3:.2f}" if q1 is not None and q3 is not None else "–"
                cells += f'<td class="num">{_e(spread)}</td>'
            if show_blocks:
                b = e.get("blocks_per_sm")
                cells += f'<td class="num">{_e(b if b is not None else "–")}</td>'
            if show_tflops:
                t = e.get("tflops")
                cells += f'<td class="num">{_e(f"{t:.1f}" if t is not None else "–")}</td>'
            if show_note:
                marks = ", ".join(w for w, on in (("best", s == best), ("chosen", s == chosen)) if on)
                note = "; ".join(x for x in (marks, e.get("note") or "") if x)
                fail = ' class="v-fail"' if (s == chosen and r.verdict == Verdict.FAIL) else ""
                cells += f"<td{fail}>{_e(note or '–')}</td>"
            body.append(f"<tr>{cells}</tr>")
        table = "<table>" + head + "</tr>" + "".join(body) + "</table>"
        blocks = {s: e["blocks_per_sm"] for s, e in extras.items() if e.get("blocks_per_sm") is not None}
        no_fit = [s for s, m, _ in rows if m is None and "does not fit" in extras.get(s, {}).get("note", "")]
        plot = _plot(lambda rw=rows, bl=blocks, ch=chosen, nf=no_fit: plots.stage_sweep_plot(
            rw, blocks_per_sm=bl or None, chosen=ch, no_fit=nf), "stage sweep: " + ", ".join(
            f"{s} stages {f'{m:.1f}' if m is not None else '?'} us" for s, m, _ in rows),
            "time against stage count, measured and cost-model predicted"
            + ("; bars: blocks per SM" if blocks else ""), missing)
        title = r.nodeid
        loss = _float(r.details.get("loss"))
        if best is not None:
            title += f" (best {best} stages" + (f", chosen {chosen}" if chosen is not None else "")
            title += (f": {loss:+.1%}" if loss is not None and chosen is not None else "") + ")"
        parts.append(f"<h4>{_e(title)}</h4>{table}{plot}")
    return '<h3 class="stage-sweep">Stage sweep</h3>' + "".join(parts) if parts else ""


def _history_section(results: Sequence[CheckResult], missing: str | None) -> str:
    parts: list[str] = []
    for r, rows in _plotted(results, _history_rows):
        current = _float(r.details.get("median_us"))
        body = "".join(f"<tr><td>{_e(label)}</td><td class=\"num\">{m:.2f}</td></tr>" for label, m in rows)
        if current is not None:
            body += f'<tr><td><b>this run</b></td><td class="num"><b>{current:.2f}</b></td></tr>'
        table = "<table><tr><th>baseline</th><th>median (µs)</th></tr>" + body + "</table>"
        plot = _plot(lambda rw=rows, c=current: plots.history_plot(rw, current=c),
                     "baseline history: " + ", ".join(f"{lbl} {m:.2f} us" for lbl, m in rows),
                     "median time of each recorded baseline, and this run", missing)
        parts.append(f"<h4>{_e(r.nodeid)}</h4>{table}{plot}")
    return '<h3 class="history">Baseline history</h3>' + "".join(parts) if parts else ""


def _perf_section(results: Sequence[CheckResult], missing: str | None) -> str:
    rows = []
    bars: list[tuple[str, float, bool]] = []
    threshold: float | None = None
    for r in results:
        d = r.details
        median = _float(d.get("median_us"))
        if r.check != "perf" or median is None:
            continue
        base = _float(d.get("baseline_median_us"))
        change = _float(d.get("change"))
        if change is None and base:
            change = median / base - 1.0
        p_value = _float(d.get("p_value"))
        q1, q3 = _float(d.get("q1_us")), _float(d.get("q3_us"))
        spread = f"{q1:.2f} – {q3:.2f}" if q1 is not None and q3 is not None else "–"
        label = r.nodeid + (f" [{d['case']}]" if d.get("case") not in (None, "", "default") else "")
        rows.append(
            f'<tr><td><code>{_e(label)}</code></td><td class="num">{median:.2f}</td><td class="num">{_e(spread)}</td>'
            f'<td class="num">{_e(f"{base:.2f}" if base is not None else "–")}</td>'
            f'<td class="num v-{r.verdict.value}">{_e(f"{change:+.1%}" if change is not None else "–")}</td>'
            f'<td class="num">{_e(f"{p_value:.2g}" if p_value is not None else "–")}</td></tr>')
        if change is not None:
            bars.append((label, change, r.verdict == Verdict.FAIL))
            threshold = _float(d.get("threshold")) if threshold is None else threshold
    if not rows:
        return ""
    table = ("<table><tr><th>test</th><th>median (µs)</th><th>q1 – q3 (µs)</th><th>baseline median (µs)</th>"
             "<th>change</th><th>p-value</th></tr>" + "".join(rows) + "</table>")
    plot = ""
    if bars:
        plot = _plot(lambda: plots.perf_change_plot(bars, threshold=threshold),
                     "time against baseline: " + ", ".join(f"{lbl} {c:+.1%}" for lbl, c, _ in bars[:10]),
                     "median time against the stored baseline; red bars failed the gate", missing)
    return '<h3 class="perf">Time against baseline</h3>' + table + plot


def _findings_section(results: Sequence[CheckResult], roots: Sequence[str]) -> str:
    merged: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in results:
        for f in _findings(r.details):
            kind = str(f.get("kind") or "?")
            if f.get("hazard"):
                kind = f"{f.get('hazard')} {kind}"
            key = (str(f.get("tool") or r.details.get("tool") or r.check), kind, f.get("kernel"),
                   f.get("file"), f.get("line"), f.get("second_file"), f.get("second_line"))
            entry = merged.setdefault(key, {"count": 0, "tests": set(), "message": f.get("message")})
            entry["count"] += max(_int(f.get("count")) or 1, 1)
            entry["tests"].add(r.nodeid)
    if not merged:
        return ""
    rows = []
    for (tool, kind, kernel, file, line, file2, line2), entry in sorted(
            merged.items(), key=lambda kv: -kv[1]["count"]):
        where = f"{file}:{line}" if file else "?"
        source = _source_line(file, line, roots)
        src = f"<pre>{_e(source)}</pre>" if source else '<span class="note">source not found here</span>'
        if file2:
            where2 = f"{file2}:{line2}"
            source2 = _source_line(file2, line2, roots)
            src += f"<div>with <code>{_e(where2)}</code></div>"
            if source2:
                src += f"<pre>{_e(source2)}</pre>"
        rows.append(f'<tr><td class="v-fail">{_e(kind)}</td><td>{_e(tool)}</td><td><code>{_e(kernel or "?")}'
                    f'</code></td><td><code>{_e(where)}</code></td><td class="num">{entry["count"]}</td>'
                    f"<td>{src}</td><td>{len(entry['tests'])}</td></tr>")
    return ('<h3 class="findings">Sanitizer findings</h3><table><tr><th>kind</th><th>tool</th><th>kernel</th>'
            "<th>location</th><th>count</th><th>source line</th><th>tests</th></tr>" + "".join(rows) + "</table>")


def _kernel_sections(results: Sequence[CheckResult], missing: str | None, roots: Sequence[str]) -> str:
    by_kernel: dict[str, list[CheckResult]] = defaultdict(list)
    for r in results:
        by_kernel[_kernel_of(r)].append(r)
    out = []
    for i, kernel in enumerate(sorted(by_kernel)):
        group = by_kernel[kernel]
        counts = Counter(status(r) for r in group)
        badges = " ".join(_badge(v, f"{counts[v]} {v}") for v in sorted(counts, key=lambda v: _ORDER[v]))
        worst = status(min(group, key=lambda r: _ORDER[status(r)]))
        out.append(
            f'<section class="kernel v-{worst}" id="kernel-{i}"><h2>{_e(kernel)} {badges}</h2>'
            + _verdict_table(group)
            + _occupancy_section(group, missing)
            + _perf_section(group, missing)
            + _stage_section(group, missing)
            + _history_section(group, missing)
            + _findings_section(group, roots)
            + "</section>"
        )
    return "".join(out)
