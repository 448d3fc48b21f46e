"""Plots for the HTML report, drawn with matplotlib (the optional ``html`` extra).

Each function takes the plain, JSON-shaped data a check left in its result's ``details`` and
returns a PNG as bytes; :func:`data_uri` turns that into something an ``<img>`` can show without
the network. matplotlib is imported inside the functions, through its object-oriented API (a
``Figure`` on an Agg canvas, never ``pyplot``), so importing this module costs nothing, a report
can be written from a process that has another backend selected, and no global figure state leaks
between reports. :func:`available` says whether plots can be drawn at all.

The data passed in has been normalised by :mod:`pytest_pipecheck.report.html_details`; the functions
still raise ``ValueError`` for input they cannot draw, and the caller shows that message in
place of the plot.
"""

from __future__ import annotations

import base64
import importlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ArchPoint",
    "available",
    "data_uri",
    "history_plot",
    "missing_reason",
    "occupancy_plot",
    "occupancy_steps",
    "perf_change_plot",
    "stage_sweep_plot",
]

# Colours are the matplotlib "tab" palette; the report's CSS uses none of them, which lets the
# headless-browser test tell plot pixels from page pixels.
_CURVE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
_POINT_COLOUR = "#d62728"
_MAX_STEPS = 256  # more steps than any real architecture has blocks per SM; guards a loop on bad data


@dataclass(frozen=True)
class ArchPoint:
    """One architecture's configuration of a kernel, as the occupancy plot needs it."""

    arch: str
    threads: int | None
    registers: int | None
    smem_per_block: int  # static + dynamic bytes, as the kernel asks for them
    blocks_per_sm: int
    opt_in: bool = True
    limiters: tuple[str, ...] = ()
    smem_up: int | None = None  # at or below this size one more block fits
    smem_down: int | None = None  # at or above this size one block is lost
    cliff: str | None = None  # the occupancy check's own words for the distance to the cliff


def missing_reason() -> str | None:
    """None when plots can be drawn; otherwise why not, in words a reader can act on."""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        return ("plots need matplotlib (pip install matplotlib; pipecheck's html extra installs it too: "
                "pip install -e '.[html]' in a clone of pytest-pipecheck); the tables below carry the same data")
    return None


def available() -> bool:
    """Whether matplotlib can be imported."""
    return missing_reason() is None


def data_uri(png: bytes) -> str:
    """``data:image/png;base64,...`` for ``png``."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _figure(width: float = 7.5, height: float = 3.6) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def occupancy_steps(point: ArchPoint) -> list[tuple[int, int]] | None:
    """Blocks/SM as a step function of shared memory per block for ``point``'s other resources.

    Returns ``[(bytes, blocks), ...]``: from each listed size on (up to the next), that many blocks
    fit; the last entry is where blocks drop to 0 (the per-block limit). None when the occupancy
    model is not installed, or does not know the architecture or the configuration.
    """
    if point.threads is None or point.registers is None:
        return None
    try:
        occ_mod = importlib.import_module("pytest_pipecheck.occupancy")
        occupancy = occ_mod.occupancy
    except (ImportError, AttributeError):
        return None
    steps: list[tuple[int, int]] = []
    size = 0
    try:
        for _ in range(_MAX_STEPS):
            occ = occupancy(point.arch, point.threads, point.registers, 0, size, opt_in=point.opt_in)
            steps.append((size, int(occ.blocks_per_sm)))
            down = getattr(occ, "smem_down", None)
            if occ.blocks_per_sm <= 0 or down is None or down <= size:
                break
            size = int(down)
    except (ValueError, TypeError, LookupError):
        # an architecture or a size the model rejects: plot the kernel's point alone
        return None
    return steps


def occupancy_plot(points: Sequence[ArchPoint], *, floor: int | None = None, title: str = "") -> bytes:
    """Blocks/SM against shared memory per block, one step curve per architecture.

    The kernel's own configuration is a marked point on each curve, and the cliffs either side of
    it (the largest size that gains a block, the smallest that loses one) are dashed lines, so a
    reader sees how many bytes a stage more or less would cost. ``floor`` draws the test's
    blocks/SM floor.
    """
    if not points:
        raise ValueError("no architectures to plot")
    fig = _figure(7.5, 3.8)
    ax = fig.add_subplot()
    kb = 1024.0
    top = 1
    right = 1.0
    for i, p in enumerate(points):
        colour = _CURVE_COLOURS[i % len(_CURVE_COLOURS)]
        steps = occupancy_steps(p)
        if steps:
            xs = [s / kb for s, _ in steps]
            ys = [b for _, b in steps]
            # extend the last level a little so the drop to 0 is visible as a step
            xs.append(xs[-1] * 1.03 + 1)
            ys.append(ys[-1])
            ax.step(xs, ys, where="post", color=colour, lw=1.8, label=f"{p.arch}")
            top = max(top, *ys)
            right = max(right, xs[-1])
        else:
            ax.plot([], [], color=colour, lw=1.8, label=f"{p.arch} (no curve: model unavailable)")
        ax.plot([p.smem_per_block / kb], [p.blocks_per_sm], marker="o", ms=9, color=_POINT_COLOUR,
                markeredgecolor=colour, markeredgewidth=2.0, linestyle="none", zorder=5)
        ax.annotate(f"{p.arch}: {p.blocks_per_sm}", (p.smem_per_block / kb, p.blocks_per_sm),
                    textcoords="offset points", xytext=(6, 6 + 9 * (i % 3)), fontsize=8, color=colour)
        for edge, style in ((p.smem_up, ":"), (p.smem_down, "--")):
            if edge is not None:
                ax.axvline(edge / kb, color=colour, lw=1.0, ls=style, alpha=0.8)
        top = max(top, p.blocks_per_sm)
        right = max(right, p.smem_per_block / kb * 1.1)
    if floor is not None and floor > 0:
        ax.axhline(floor, color="#7f7f7f", lw=1.2, ls="-.", label=f"floor {floor} blocks/SM")
        top = max(top, floor)
    # legend entries explaining the marks, drawn once
    ax.plot([], [], marker="o", ms=7, color=_POINT_COLOUR, linestyle="none", label="this kernel")
    ax.plot([], [], color="#555555", lw=1.0, ls="--", label="cliff: one block fewer")
    ax.plot([], [], color="#555555", lw=1.0, ls=":", label="cliff: one block more")
    ax.set_xlim(0, right)
    ax.set_ylim(0, top + 1)
    ax.set_xlabel("shared memory per block (KB, static + dynamic)")
    ax.set_ylabel("blocks per SM")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    if title:
        ax.set_title(title, fontsize=10)
    return _png(fig)


def stage_sweep_plot(rows: Sequence[tuple[int, float | None, float | None]], *, title: str = "",
                     blocks_per_sm: Mapping[int, int] | None = None, chosen: int | None = None,
                     no_fit: Sequence[int] = ()) -> bytes:
    """Time against stage count: measured, and predicted by the cost model when given.

    ``rows`` are ``(stages, measured_us, predicted_us)``; either time may be None.
    ``blocks_per_sm`` (per stage count) is drawn as pale bars on a second axis, ``chosen`` (the
    kernel's configured stage count) as a ring around its point, and ``no_fit`` (stage counts whose
    launch did not fit) as crosses on the axis.
    """
    if not rows:
        raise ValueError("no stage counts to plot")
    fig = _figure(6.0, 3.4)
    ax = fig.add_subplot()
    measured = [(s, m) for s, m, _ in rows if m is not None]
    predicted = [(s, p) for s, _, p in rows if p is not None]
    if not measured and not predicted:
        raise ValueError("no times to plot")
    if blocks_per_sm:
        ax2 = ax.twinx()
        xs = sorted(blocks_per_sm)
        bars = ax2.bar(xs, [blocks_per_sm[s] for s in xs], width=0.45, color="#7f7f7f", alpha=0.22, zorder=0)
        ax2.set_ylabel("blocks per SM")
        ax2.set_ylim(0, max(max(blocks_per_sm.values()), 1) * 2 + 1)  # bars stay in the lower half
        ax2.yaxis.get_major_locator().set_params(integer=True)
        ax.set_zorder(ax2.get_zorder() + 1)
        ax.patch.set_visible(False)
    if measured:
        ax.plot([s for s, _ in measured], [m for _, m in measured], marker="o", color=_CURVE_COLOURS[0],
                label="measured")
        best = min(measured, key=lambda r: r[1])
        ax.plot([best[0]], [best[1]], marker="*", ms=14, color=_POINT_COLOUR, linestyle="none",
                label=f"fastest measured: {best[0]} stages")
        mine = [m for s, m in measured if s == chosen]
        if mine:
            ax.plot([chosen], mine, marker="o", ms=15, markerfacecolor="none", markeredgecolor="#333333",
                    markeredgewidth=1.5, linestyle="none", label=f"chosen: {chosen} stages")
    if predicted:
        ax.plot([s for s, _ in predicted], [p for _, p in predicted], marker="s", ls="--",
                color=_CURVE_COLOURS[1], label="cost model")
    if no_fit:
        ax.plot(list(no_fit), [0.0] * len(no_fit), marker="x", ms=10, mew=2, color="#333333", linestyle="none",
                clip_on=False, label="does not fit")
    ax.set_xticks(sorted({s for s, _, _ in rows}))
    ax.set_xlabel("pipeline stages")
    ax.set_ylabel("time (µs)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if blocks_per_sm:
        handles.append(bars)
        labels.append("blocks/SM (right axis)")
    ax.legend(handles, labels, fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return _png(fig)


def history_plot(rows: Sequence[tuple[str, float]], *, current: float | None = None, title: str = "") -> bytes:
    """Median time of each recorded baseline in order, with the current run as the last point."""
    if not rows and current is None:
        raise ValueError("no history to plot")
    fig = _figure(6.5, 3.4)
    ax = fig.add_subplot()
    labels = [label for label, _ in rows]
    xs = list(range(len(rows)))
    if rows:
        ax.plot(xs, [m for _, m in rows], marker="o", color=_CURVE_COLOURS[0], label="baseline median")
    if current is not None:
        ax.plot([len(rows)], [current], marker="D", ms=9, color=_POINT_COLOUR, linestyle="none",
                label="this run")
        labels.append("this run")
    ax.set_xticks(list(range(len(labels))))
    ax.set_xticklabels([lbl if len(lbl) <= 14 else lbl[:13] + "…" for lbl in labels], rotation=30,
                       ha="right", fontsize=7)
    ax.set_ylabel("median time (µs)")
    # not from zero: the point of this plot is a few percent of movement between commits
    ax.margins(x=0.08, y=0.35)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    if title:
        ax.set_title(title, fontsize=10)
    return _png(fig)


def perf_change_plot(rows: Sequence[tuple[str, float, bool]], *, threshold: float | None = None,
                     title: str = "") -> bytes:
    """Change of each case's median time against its baseline, as horizontal bars.

    ``rows`` are ``(label, change, regressed)`` with ``change`` a fraction (+0.05 is 5% slower);
    regressions are drawn red. ``threshold`` draws the gate's practical threshold.
    """
    if not rows:
        raise ValueError("no perf results with a baseline to plot")
    fig = _figure(6.5, 1.2 + 0.32 * len(rows))
    ax = fig.add_subplot()
    ys = list(range(len(rows)))
    colours = [_POINT_COLOUR if bad else _CURVE_COLOURS[2] for _, _, bad in rows]
    ax.barh(ys, [c * 100 for _, c, _ in rows], color=colours, height=0.6)
    ax.set_yticks(ys)
    ax.set_yticklabels([lbl if len(lbl) <= 40 else "…" + lbl[-39:] for lbl, _, _ in rows], fontsize=7)
    ax.invert_yaxis()
    ax.axvline(0, color="#333333", lw=0.8)
    if threshold is not None:
        ax.axvline(threshold * 100, color="#7f7f7f", lw=1.0, ls="--", label=f"threshold +{threshold:.0%}")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("median time against baseline (%; positive is slower)")
    ax.grid(True, axis="x", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    return _png(fig)
