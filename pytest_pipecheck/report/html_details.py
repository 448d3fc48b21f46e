"""How the HTML report reads a check result's ``details``: defensively, a malformed value left out, never a
failed report. The readers here turn the occupancy, stage sweep, history and findings fields into plain rows
(and :class:`~pytest_pipecheck.report.plots.ArchPoint`) for the tables and :mod:`.plots`;
:func:`_source_line` is the line of source a sanitizer finding points at, embedded only from a file under
the session's rootdir.

The details the page reads (each optional, each read defensively):

``archs`` (what the occupancy check writes) or ``per_arch``
    ``{arch: {"threads", "registers", "static_smem", "dynamic_smem", "smem_per_block",
    "blocks_per_sm", "limiters", "smem_up", "smem_down", "opt_in", "cliff"}}`` or a list of such
    dicts with an ``"arch"`` key (``Occupancy.to_json()`` spellings are accepted); ``floor``.
``median_us``, ``q1_us``, ``q3_us``, ``baseline_median_us``, ``change``, ``p_value``, ``threshold``
    on ``perf`` results (what the perf gate writes): the table and plot of time against baseline.
``stage_sweep``
    ``[{"stages", "measured_us", "predicted_us"}]``, optionally with ``q1_us``, ``q3_us``,
    ``blocks_per_sm``, ``tflops`` and ``note`` per row (what ``check_stage_sweep`` writes), and
    ``chosen``, ``best_stages``, ``loss`` beside it: extra columns and marks appear when present.
``history``
    ``[{"label", "median_us"}]``, oldest first; the run's own time from ``median_us``.
``findings``
    ``[{"kind", "kernel", "file", "line", "count"}]`` (plus ``hazard``, ``second_file``,
    ``second_line``, ``message``, ``tool`` where the sanitizer gives them).
``outputs``
    ``{output: {"unwritten_not_checked": why, ...}}`` on ``coverage`` results: the weaker-coverage list.
"""

from __future__ import annotations

import linecache
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from . import plots

_MAX_SOURCE_CHARS = 240


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out and out not in (float("inf"), float("-inf")) else None


def _arch_points(details: Mapping[str, Any]) -> list[plots.ArchPoint]:
    # the occupancy check writes "archs" (Occupancy.to_json() plus "cliff"); "per_arch" is accepted too
    raw = details.get("per_arch", details.get("archs"))
    items: list[tuple[str, Mapping[str, Any]]] = []
    if isinstance(raw, Mapping):
        items = [(str(k), v) for k, v in raw.items() if isinstance(v, Mapping)]
    elif isinstance(raw, Sequence) and not isinstance(raw, (str, bytes)):
        items = [(str(v.get("arch")), v) for v in raw if isinstance(v, Mapping) and v.get("arch")]
    points = []
    for arch, d in items:
        static = _int(d.get("static_smem")) or 0
        dynamic = _int(d.get("dynamic_smem")) or 0
        smem = _int(d.get("smem_per_block"))
        if smem is None:
            # a kernel that could not launch reports what it asked for as "required"
            smem = static + dynamic or _int(d.get("required")) or 0
        blocks = _int(d.get("blocks_per_sm"))
        if blocks is None:
            continue
        limiters = d.get("limiters") or ()
        if isinstance(limiters, str):
            limiters = tuple(p for p in limiters.replace("+", ",").split(",") if p)
        points.append(plots.ArchPoint(
            arch=arch,
            threads=_int(d.get("threads", d.get("threads_per_block"))),
            registers=_int(d.get("registers", d.get("registers_per_thread"))),
            smem_per_block=max(smem, 0),
            blocks_per_sm=blocks,
            opt_in=bool(d.get("opt_in", details.get("opt_in", True))),
            limiters=tuple(str(x) for x in limiters) if isinstance(limiters, Iterable) else (),
            smem_up=_int(d.get("smem_up")),
            smem_down=_int(d.get("smem_down")),
            cliff=str(d["cliff"]) if isinstance(d.get("cliff"), str) else None,
        ))
    return points


def _stage_entries(details: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    """(stage count, row) of each well-formed row of a stage sweep; odd rows are left out."""
    raw = details.get("stage_sweep")
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        return []
    out = []
    for d in raw:
        if isinstance(d, Mapping):
            stages = _int(d.get("stages"))
            if stages is not None:
                out.append((stages, d))
    return out


def _stage_rows(details: Mapping[str, Any]) -> list[tuple[int, float | None, float | None]]:
    return sorted((s, _float(d.get("measured_us")), _float(d.get("predicted_us"))) for s, d in _stage_entries(details))


def _stage_extras(details: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """Per stage count, the optional columns of a stage sweep row (check_stage_sweep writes them)."""
    out: dict[int, dict[str, Any]] = {}
    for stages, d in _stage_entries(details):
        note = d.get("note")
        out[stages] = {
            "q1_us": _float(d.get("q1_us")),
            "q3_us": _float(d.get("q3_us")),
            "blocks_per_sm": _int(d.get("blocks_per_sm")),
            "tflops": _float(d.get("tflops")),
            "note": note if isinstance(note, str) else "",
        }
    return out


def _history_rows(details: Mapping[str, Any]) -> list[tuple[str, float]]:
    raw = details.get("history")
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        return []
    rows = []
    for i, d in enumerate(raw):
        if not isinstance(d, Mapping):
            continue
        median = _float(d.get("median_us"))
        if median is None:
            continue
        rows.append((str(d.get("label") or f"#{i + 1}"), median))
    return rows


def _findings(details: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    raw = details.get("findings")
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)):
        return []
    return [f for f in raw if isinstance(f, Mapping)]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _source_line(path: Any, line: Any, roots: Sequence[str]) -> str | None:
    """The text of ``path:line`` when the file lies under one of ``roots`` (the session's rootdir).

    A finding names whatever file the tool says; the page embeds a line of it only when the file,
    with every symlink resolved, is inside a root: a report must not carry a line of ``/etc/shadow``
    or of a file a symlink in the checkout points at.
    """
    lineno = _int(line)
    if not isinstance(path, str) or not path or "\0" in path or lineno is None or lineno < 1:
        return None
    real_roots = [os.path.realpath(root) for root in roots]
    candidates = [path] if os.path.isabs(path) else [os.path.join(root, path) for root in real_roots]
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if not any(_under(real, root) for root in real_roots):
            continue
        if os.path.isfile(real):
            candidate = real
            text = linecache.getline(candidate, lineno).rstrip("\n")
            if text:
                return text.strip()[:_MAX_SOURCE_CHARS]
    return None
