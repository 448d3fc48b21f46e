"""The HTML report: content, escaping, self-containment, plots, and bad input."""

from __future__ import annotations

import base64
import functools
import io
import itertools
import os
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_pipecheck.config import PipecheckConfig
from pytest_pipecheck.device import DeviceInfo, TierInfo
from pytest_pipecheck.report import html as html_report
from pytest_pipecheck.report import html_markup, plots
from pytest_pipecheck.report.html import HtmlReportError, render, write_html
from pytest_pipecheck.report.outcomes import TestOutcomes
from pytest_pipecheck.results import CheckResult, Verdict

GPU = TierInfo("gpu", DeviceInfo(0, "NVIDIA H100 80GB HBM3", "9.0", 132, 81559, "580.65"), "",
               {"torch": "2.8.0", "triton": None})
CPU = TierInfo("cpu", None, "nvidia-smi not found", {"torch": None})
CFG = PipecheckConfig(enabled=True, arch=("sm_80", "sm_86", "sm_90"), min_blocks=2)
CREATED = "2026-11-22T00:00:00+00:00"

needs_matplotlib = pytest.mark.skipif(not plots.available(), reason="matplotlib is not installed")


def _occ_details(threads: int = 128, registers: int = 96, smem: int = 48 * 1024,
                 archs: tuple[str, ...] = ("sm_80", "sm_86", "sm_90")) -> dict[str, Any]:
    from pytest_pipecheck.occupancy import occupancy

    per_arch = {}
    for arch in archs:
        occ = occupancy(arch, threads, registers, 0, smem)
        per_arch[arch] = {
            "threads": threads, "registers": registers, "static_smem": 0, "dynamic_smem": smem,
            "smem_per_block": smem, "blocks_per_sm": occ.blocks_per_sm, "limiters": sorted(occ.limiters),
            "smem_up": occ.smem_up, "smem_down": occ.smem_down,
        }
    return {"per_arch": per_arch, "floor": 3}


def _results() -> list[CheckResult]:
    gemm = "gemm_cpasync"
    return [
        CheckResult("coverage", Verdict.PASS, "max rel err 2.0e-04 (tol 1.0e-02)", gemm, {},
                    "tests/test_gemm.py::test_cov[M129-N65-K200]"),
        CheckResult("coverage", Verdict.FAIL, "K tile 7 of 8, the last, never reached the output", gemm,
                    {"message": "K tile 7 of 8 (the last) never reached the output\nworst C[3,5]"},
                    "tests/test_gemm.py::test_cov[M128-N64-K256]"),
        CheckResult("occupancy", Verdict.FAIL, "sm_86 2 blocks/SM (floor 3)", gemm, _occ_details(),
                    "tests/test_gemm.py::test_occ"),
        CheckResult("perf", Verdict.PASS, "41.20 us, +0.4% vs baseline", gemm, {
            "median_us": 41.2,
            "history": [{"label": "a1b2c3", "median_us": 40.9}, {"label": "d4e5f6", "median_us": 41.05}],
            "stage_sweep": [{"stages": s, "measured_us": m, "predicted_us": p}
                            for s, m, p in [(2, 60.1, 58.0), (3, 45.3, 44.0), (4, 41.2, 40.5), (5, 43.0, None)]],
        }, "tests/test_gemm.py::test_perf"),
        CheckResult("sanitizer:synccheck", Verdict.SKIP, "needs a CUDA GPU: nvidia-smi not found", "triton_ws",
                    {}, "tests/test_ws.py::test_a"),
        CheckResult("sanitizer:synccheck", Verdict.SKIP, "needs a CUDA GPU: nvidia-smi not found", "triton_ws",
                    {}, "tests/test_ws.py::test_b"),
        CheckResult("determinism", Verdict.ERROR, "compile failed: ptxas", "triton_ws", {},
                    "tests/test_ws.py::test_b"),
    ]


def _page(results: list[CheckResult] | None = None, tier: TierInfo = GPU, **kwargs: Any) -> str:
    if results is None and tier is GPU and not kwargs and plots.available():
        return _default_page()
    return render(_results() if results is None else results, tier, 1234, CFG, created=CREATED, **kwargs)


@functools.cache
def _default_page() -> str:
    # drawing the plots is most of a test's time; the read-only tests share one page
    return render(_results(), GPU, 1234, CFG, created=CREATED)


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def _section(page: str, start: str, end: str = "</section>") -> str:
    i = page.index(start)
    return page[i:page.index(end, i)]


# ----------------------------------------------------------------------------- content


def test_header_names_tier_seed_versions_and_totals() -> None:
    page = _page()
    header = page[page.index("<header>"):page.index("</header>")]
    assert "NVIDIA H100 80GB HBM3" in header and "sm_90" in header and "132 SMs" in header
    assert "driver 580.65" in header
    assert "<b>seed</b> 1234" in header
    assert "pytest-pipecheck " in header and "Python " in header and "torch 2.8.0" in header
    assert "triton not installed" in header
    assert ">2 pass<" in header and ">2 fail<" in header and ">2 skip<" in header and ">1 error<" in header
    assert "7 check results, 2 kernels, 6 tests" in header
    assert "<title>pipecheck report: 2 pass, 2 fail, 2 skip, 1 error</title>" in page


def test_cpu_tier_says_gpu_checks_were_skipped_not_passed() -> None:
    page = _page(tier=CPU)
    assert "cpu (no GPU: nvidia-smi not found)" in page
    assert "Checks that need a GPU were skipped, not passed: nvidia-smi not found" in page


def test_failures_listed_with_message_and_reproduce_line_worst_first() -> None:
    page = _page()
    section = page[page.index('id="not-passed"'):page.index('id="skipped"')]
    assert "Not passed (3)" in section
    # errors before failures, then by test id
    assert section.index("determinism") < section.index("K tile 7 of 8") < section.index("sm_86 2 blocks/SM")
    assert "K tile 7 of 8 (the last) never reached the output\nworst C[3,5]" in section
    assert "reproduce: <code>pytest &#x27;tests/test_gemm.py::test_cov[M128-N64-K256]&#x27; " \
           "--pipecheck --pipecheck-seed=1234</code>" in section
    assert "coverage" in section and "max rel err" not in section  # passes are not failures


def test_skips_grouped_with_reason_and_count_never_as_pass() -> None:
    page = _page()
    skipped = page[page.index('id="skipped"'):page.index("<section")]
    assert re.search(r'<td class="v-skip">sanitizer:synccheck</td><td class="num">2</td>'
                     r"<td>needs a CUDA GPU: nvidia-smi not found", skipped)
    ws = _section(page, ">triton_ws ")
    assert ws.count('<td class="v-skip">') == 2
    assert '<td class="v-pass">' not in ws


def test_verdict_table_per_kernel_colours_each_cell_by_its_worst_verdict() -> None:
    page = _page()
    gemm = _section(page, ">gemm_cpasync ")
    assert '<section class="kernel v-fail"' in page
    header = re.search(r"<tr><th>test</th>(.*?)</tr>", gemm)
    assert header is not None
    # checks in pipecheck's order, not alphabetical
    assert re.findall(r"<th>(.*?)</th>", header.group(1)) == ["coverage", "occupancy", "perf"]
    row = re.search(r"test_cov\[M128-N64-K256\]</code></td>(.*?)</tr>", gemm)
    assert row is not None
    assert row.group(1).startswith('<td class="v-fail">')
    assert '<td class="v-none">' in row.group(1)  # no occupancy result for this test
    ws = _section(page, ">triton_ws ")
    assert '<td class="v-error"><div class="cell"><span class="badge v-error">error</span> compile failed' in ws


def test_everything_from_results_is_escaped() -> None:
    evil = "<script>alert(1)</script>"
    results = [CheckResult("coverage", Verdict.FAIL, f"bad {evil} & more", f"k{evil}",
                           {"message": evil, "findings": [{"kind": evil, "kernel": evil, "file": evil,
                                                           "line": 1, "count": 1}]},
                           f"tests/t.py::test[{evil}]")]
    page = _page(results)
    assert "<script" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "bad &lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in page


def test_page_is_self_contained() -> None:
    page = _page()
    assert page.startswith("<!DOCTYPE html>")
    lowered = page.lower()
    for needle in ("http://", "https://", "<script", "<link", "@import", "url(", "<iframe"):
        assert needle not in lowered, needle
    for src in re.findall(r'src="([^"]*)"', page):
        assert src.startswith("data:image/png;base64,"), src[:40]


def test_no_results_still_writes_a_page_that_says_so() -> None:
    page = _page([])
    assert 'id="no-results"' in page and "No pipecheck checks ran." in page
    assert "<img" not in page and "<section" not in page


# ----------------------------------------------------------------------------- plots


def test_occupancy_steps_agree_with_the_model_on_each_side_of_every_cliff() -> None:
    from pytest_pipecheck.occupancy import occupancy

    for arch in ("sm_80", "sm_86", "sm_90"):
        point = plots.ArchPoint(arch, 256, 64, 0, 0)
        steps = plots.occupancy_steps(point)
        assert steps is not None and len(steps) >= 3
        assert steps[0][0] == 0 and steps[-1][1] == 0
        for (size, blocks), (nxt, nxt_blocks) in itertools.pairwise(steps):
            assert occupancy(arch, 256, 64, 0, size).blocks_per_sm == blocks
            assert occupancy(arch, 256, 64, 0, nxt - 1).blocks_per_sm == blocks
            assert occupancy(arch, 256, 64, 0, nxt).blocks_per_sm == nxt_blocks < blocks


def test_occupancy_steps_without_a_model_or_for_an_unknown_arch() -> None:
    assert plots.occupancy_steps(plots.ArchPoint("sm_99", 128, 32, 0, 1)) is None
    assert plots.occupancy_steps(plots.ArchPoint("sm_90", None, 32, 0, 1)) is None


def test_occupancy_table_rows_and_cliffs_and_the_row_below_the_floor() -> None:
    page = _page()
    occ = page[page.index('class="occupancy"'):page.index('class="stage-sweep"')]
    assert "tests/test_gemm.py::test_occ (floor 3 blocks/SM)" in occ
    rows = dict(re.findall(r"<tr><td>(sm_\d+)</td>(.*?)</tr>", occ))
    assert set(rows) == {"sm_80", "sm_86", "sm_90"}
    details = _occ_details()["per_arch"]
    for arch, row in rows.items():
        blocks = details[arch]["blocks_per_sm"]
        cls = ' class="v-fail"' if blocks < 3 else ""
        assert f'<td class="num"{cls}>{blocks}</td>' in row
        assert f"drops to {blocks - 1}" in row
    assert "48 KB" in rows["sm_90"]


@needs_matplotlib
def test_plots_are_embedded_pngs_that_show_the_kernel_point() -> None:
    import matplotlib.image as mpimg
    import numpy as np

    page = _page()
    images = _images(page)
    assert len(images) == 3  # occupancy, stage sweep, history
    for png in images:
        assert png.startswith(b"\x89PNG\r\n\x1a\n")
    occ = mpimg.imread(io.BytesIO(images[0]), format="png")[..., :3]
    red = np.array([0xD6, 0x27, 0x28]) / 255.0  # the kernel's point
    assert (np.abs(occ - red).max(axis=-1) < 0.05).sum() > 50
    assert 'alt="occupancy: sm_80 3 blocks/SM at 48 KB' in page


@needs_matplotlib
def test_stage_sweep_and_history_tables_and_plots() -> None:
    page = _page()
    sweep = page[page.index('class="stage-sweep"'):page.index('class="history"')]
    assert '<td class="num">5</td><td class="num">43.00</td><td class="num">–</td>' in sweep
    assert 'alt="stage sweep: 2 stages 60.1 us' in sweep
    history = page[page.index('class="history"'):]
    assert "<td>d4e5f6</td><td class=\"num\">41.05</td>" in history
    assert '<td><b>this run</b></td><td class="num"><b>41.20</b></td>' in history
    assert "data:image/png;base64," in sweep and "data:image/png;base64," in history


def test_without_matplotlib_tables_remain_and_the_page_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert not plots.available()
    page = _page()
    assert "<img" not in page
    assert 'id="no-matplotlib"' in page and "plots need matplotlib" in page
    assert "pip install matplotlib; pipecheck&#x27;s html extra installs it too: pip install -e &#x27;.[html]&#x27; " \
        "in a clone of pytest-pipecheck" in page
    assert "<th>blocks/SM</th>" in page and "<th>measured (µs)</th>" in page


def test_a_plot_that_fails_is_replaced_by_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*args: Any, **kwargs: Any) -> bytes:
        raise RuntimeError("no room <here>")

    monkeypatch.setattr(plots, "occupancy_plot", boom)
    monkeypatch.setattr(plots, "missing_reason", lambda: None)
    page = _page(_results())  # not the shared page: this one is drawn with the broken plot
    assert "plot not drawn (RuntimeError: no room &lt;here&gt;); the table has the data" in page
    assert "<th>blocks/SM</th>" in page


def test_malformed_details_do_not_break_the_page() -> None:
    odd: list[dict[str, Any]] = [
        {"per_arch": "nonsense", "stage_sweep": 5, "history": "x", "findings": {"a": 1}},
        {"per_arch": {"sm_90": {"blocks_per_sm": "many"}, "sm_80": 3}, "stage_sweep": [{"stages": "x"}, 7],
         "history": [{"label": "a"}, None], "findings": [1, None, {"line": "x"}]},
        {"per_arch": [{"arch": "sm_99", "blocks_per_sm": 2, "smem_per_block": 1000, "threads": 64,
                       "registers": 32}], "floor": "two"},
        {"stage_sweep": [{"stages": 2, "measured_us": float("nan"), "predicted_us": "fast"}]},
    ]
    results = [CheckResult("perf", Verdict.PASS, "ok", "k", d, f"t.py::test_{i}") for i, d in enumerate(odd)]
    page = _page(results)
    assert page.count("<tr><td><code>t.py::test_") == 4
    # the unknown architecture is still tabled and plotted as a point, without a curve
    assert "<tr><td>sm_99</td>" in page
    # the stage sweep with no usable time says so instead of a plot
    if plots.available():
        assert "plot not drawn (ValueError: no times to plot)" in page


def test_findings_merge_duplicates_and_show_their_source_lines(tmp_path: Path) -> None:
    src = tmp_path / "kernels" / "gemm.cu"
    src.parent.mkdir()
    src.write_text("// gemm\nfloat a = s[0];\n  __pipeline_wait_prior(0);  // <wait> & sync\n")
    findings = [
        {"kind": "race", "hazard": "RAW", "kernel": "gemm", "file": "kernels/gemm.cu", "line": 3, "count": 2,
         "second_file": str(src), "second_line": 2},
        {"kind": "race", "hazard": "RAW", "kernel": "gemm", "file": "kernels/gemm.cu", "line": 3, "count": 5,
         "second_file": str(src), "second_line": 2},
        {"kind": "invalid_access", "kernel": "gemm", "file": "elsewhere.cu", "line": 9, "count": 1},
    ]
    results = [CheckResult("sanitizer:racecheck", Verdict.FAIL, "7 RAW hazards", "gemm",
                           {"tool": "racecheck", "findings": findings[:2]}, "t.py::test_a"),
               CheckResult("sanitizer:memcheck", Verdict.FAIL, "1 invalid access", "gemm",
                           {"tool": "memcheck", "findings": findings[2:]}, "t.py::test_b")]
    page = _page(results, source_roots=[str(tmp_path)])
    table = page[page.index('class="findings"'):]
    rows = re.findall(r"<tr><td class=\"v-fail\">(.*?)</tr>", table)
    assert len(rows) == 2
    assert rows[0].startswith("RAW race</td><td>racecheck</td>")
    assert '<code>kernels/gemm.cu:3</code></td><td class="num">7</td>' in rows[0]
    assert "<pre>__pipeline_wait_prior(0);  // &lt;wait&gt; &amp; sync</pre>" in rows[0]
    assert "<pre>float a = s[0];</pre>" in rows[0]
    assert "invalid_access" in rows[1] and "source not found here" in rows[1]


# ----------------------------------------------------------------------------- writing


def test_write_html_writes_a_readable_file(tmp_path: Path) -> None:
    target = tmp_path / "out" / "report.html"
    write_html(target, _results(), GPU, 1234, CFG)
    text = target.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "gemm_cpasync" in text
    assert os.stat(target).st_mode & 0o044  # shareable, unlike the temporary file's 0600
    assert [p.name for p in target.parent.iterdir()] == ["report.html"]


def test_write_html_to_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(HtmlReportError, match=r"it is a directory; give a file name") as info:
        write_html(tmp_path, _results(), GPU, 1, CFG)
    assert isinstance(info.value, OSError)


def test_write_html_to_an_unwritable_path_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    # a path below a regular file cannot be created, whoever runs the test (root included)
    with pytest.raises(HtmlReportError, match=r"cannot write the HTML report to '.*file\.txt/r\.html': "):
        write_html(blocker / "r.html", _results(), GPU, 1, CFG)
    with pytest.raises(HtmlReportError, match="the path is empty"):
        write_html("  ", _results(), GPU, 1, CFG)


def test_a_failed_write_leaves_the_previous_report_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "report.html"
    target.write_text("previous report")

    def broken(path: str, text: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(html_report, "write_atomic", broken)
    with pytest.raises(HtmlReportError, match="No space left on device"):
        write_html(target, _results(), GPU, 1, CFG)
    assert target.read_text() == "previous report"


# ----------------------------------------------------------------------------- what the checks write


def test_renders_what_the_occupancy_check_records() -> None:
    from pytest_pipecheck.fixture import Pipecheck

    pc = Pipecheck("t.py::test_occ", PipecheckConfig(enabled=True, arch=("sm_80", "sm_90")), GPU, 1)
    result = pc.check_occupancy(threads=128, registers=64, dynamic_smem=64 * 1024, min_blocks=1, kernel="gemm")
    page = _page([result])
    occ = page[page.index('class="occupancy"'):]
    rows = dict(re.findall(r"<tr><td>(sm_\d+)</td>(.*?)</tr>", occ))
    assert set(rows) == {"sm_80", "sm_90"}
    for arch, row in rows.items():
        assert f'<td class="num">{result.details["archs"][arch]["blocks_per_sm"]}</td>' in row
        assert "64 KB" in row and "<td class=\"num\">128</td>" in row
        assert html_markup._e(result.details["archs"][arch]["cliff"]) in row  # the check's own words
    if plots.available():
        assert len(_images(page)) == 1


def test_perf_results_against_their_baseline() -> None:
    base = {"q1_us": 40.0, "q3_us": 42.0, "threshold": 0.03, "p_value": 1e-5}
    results = [
        CheckResult("perf", Verdict.FAIL, "regression: +30.0%", "gemm",
                    {**base, "case": "M4096", "median_us": 52.0, "baseline_median_us": 40.0, "change": 0.3},
                    "t.py::test_perf"),
        CheckResult("perf", Verdict.PASS, "-1.0%", "gemm",
                    {**base, "median_us": 39.6, "baseline_median_us": 40.0}, "t.py::test_perf2"),
        CheckResult("perf", Verdict.SKIP, "no baseline for this GPU", "gemm", {"median_us": 39.0}, "t.py::test_p3"),
    ]
    page = _page(results)
    perf = page[page.index('class="perf"'):]
    assert ('<tr><td><code>t.py::test_perf [M4096]</code></td><td class="num">52.00</td>'
            '<td class="num">40.00 – 42.00</td><td class="num">40.00</td><td class="num v-fail">+30.0%</td>'
            '<td class="num">1e-05</td></tr>') in perf
    assert '<td class="num v-pass">-1.0%</td>' in perf  # computed from the medians when "change" is absent
    assert '<code>t.py::test_p3</code></td><td class="num">39.00</td><td class="num">–</td>' in perf
    if plots.available():
        assert 'alt="time against baseline: t.py::test_perf [M4096] +30.0%, t.py::test_perf2 -1.0%"' in perf


def test_write_html_for_run_never_raises_and_says_what_happened(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    ok, line = html_report.write_html_for_run(tmp_path / "r.html", _results(), GPU, 1, CFG)
    assert ok and line == f"pipecheck: HTML report written to {tmp_path / 'r.html'} (7 check results)"
    ok, line = html_report.write_html_for_run(tmp_path / "e.html", [], GPU, 1, CFG)
    assert ok and "no pipecheck checks ran" in line and "No pipecheck checks ran." in (tmp_path / "e.html").read_text()
    ok, line = html_report.write_html_for_run(tmp_path, _results(), GPU, 1, CFG)
    assert not ok and line.startswith("pipecheck: cannot write the HTML report to ") and "is a directory" in line

    def bug(*args: Any, **kwargs: Any) -> str:
        raise KeyError("arch")

    monkeypatch.setattr(html_report, "render", bug)
    ok, line = html_report.write_html_for_run(tmp_path / "b.html", _results(), GPU, 1, CFG)
    assert not ok and line.endswith("b.html': KeyError: 'arch'")
    assert not (tmp_path / "b.html").exists()


def test_expected_failures_show_as_caught_not_as_failures() -> None:
    results = [
        CheckResult("tile_probe", Verdict.FAIL, "K tile 3 of 4 never reached the output", kernel="mutant_x",
                    nodeid="t.py::test_m", expected=True),
        CheckResult("coverage", Verdict.PASS, "max rel err 1e-04", kernel="ref", nodeid="t.py::test_r"),
    ]
    page = _page(results)
    assert 'class="badge v-caught"' in page
    assert "1 caught" in page
    assert 'id="not-passed"' not in page  # nothing failed that was not meant to
    assert "Every check passed" in page


def test_identical_failures_are_one_block_listing_their_tests() -> None:
    same = [CheckResult("sanitizer:racecheck", Verdict.ERROR, "inconclusive: tool not proven",
                        kernel="k", nodeid=f"t.py::test_k[{i}]") for i in range(5)]
    other = CheckResult("coverage", Verdict.FAIL, "3 defects", kernel="k", nodeid="t.py::test_c")
    page = _page([*same, other])
    start = page.index('id="not-passed"')
    section = page[start:page.index("<section", start)]
    assert "Not passed (6)" in section
    assert section.count("inconclusive: tool not proven") == 1
    assert "in 5 tests" in section and all(f"t.py::test_k[{i}]" in section for i in range(5))
    assert section.count('class="failure ') == 2


def test_header_names_each_gpu_that_ran_tests() -> None:
    """Under pytest-xdist each worker has its own GPU; the header says which GPU ran how many tests."""
    from pytest_pipecheck.report.html import render

    rs = [CheckResult("coverage", Verdict.PASS, "ok", kernel="k", nodeid=f"t.py::test[{i}]",
                      details={"gpu": f"NVIDIA H200 (index {i % 2}, GPU-{i % 2})"}) for i in range(5)]
    page = render(rs, GPU, 1, None)
    assert "ran on" in page
    assert "NVIDIA H200 (index 0, GPU-0): 3 tests" in page and "NVIDIA H200 (index 1, GPU-1): 2 tests" in page


# docs/verdicts.md item 22: a finding's file is embedded only when it lies under the session's rootdir
@pytest.mark.skipif(os.name == "nt", reason="symlinks")
def test_source_lines_come_only_from_files_under_the_rootdir(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "k").mkdir(parents=True)
    (root / "k" / "gemm.cu").write_text("inside line one\n")
    secret = tmp_path / "outside" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("TOP SECRET outside the rootdir\n")
    (root / "k" / "link.cu").symlink_to(secret)  # a symlink in the checkout pointing out of it
    findings = [
        {"kind": "race", "kernel": "g", "file": "k/gemm.cu", "line": 1},
        {"kind": "oob", "kernel": "g", "file": str(secret), "line": 1},  # absolute, outside
        {"kind": "oob2", "kernel": "g", "file": "../outside/secret.txt", "line": 1},  # relative escape
        {"kind": "oob3", "kernel": "g", "file": "k/link.cu", "line": 1},  # symlink out
        {"kind": "oob4", "kernel": "g", "file": "/etc/passwd", "line": 1},  # a system file
    ]
    r = CheckResult("sanitizer:memcheck", Verdict.FAIL, "5", "g", {"tool": "memcheck", "findings": findings},
                    "t.py::test_a")
    page = _page([r], source_roots=[str(root)])
    assert "<pre>inside line one</pre>" in page
    assert "TOP SECRET" not in page
    assert "root:" not in page  # the first line of /etc/passwd
    assert page.count("source not found here") == 4


# docs/verdicts.md item 16: the headline comes from the tests' own outcomes too
def _outcomes(*specs: tuple[str, str, bool]) -> TestOutcomes:
    from types import SimpleNamespace

    out = TestOutcomes()
    for nodeid, when, failed in specs:
        out.add(SimpleNamespace(nodeid=nodeid, when=when, failed=failed, skipped=False, passed=not failed,
                                longrepr="AssertionError: after the checks" if failed else None))
    return out


def test_a_test_failing_after_its_checks_is_the_headline_not_every_check_passed() -> None:
    checks = [CheckResult("coverage", Verdict.PASS, "max rel err 1e-04", kernel="k", nodeid="t.py::test_a")]
    outcomes = _outcomes(("t.py::test_a", "setup", False), ("t.py::test_a", "call", True),
                         ("t.py::test_a", "teardown", False))
    page = _page(checks, outcomes=outcomes, exitstatus=1)
    assert 'id="all-passed"' not in page and "Every check passed" not in page
    assert 'id="tests-not-passed"' in page and "1 test did not pass" in page
    assert 'id="tests-failed"' in page and "AssertionError: after the checks" in page
    assert "1 failed" in page and "<title>pipecheck report: 1 test not passed;" in page


def test_every_test_and_check_passed_only_when_both_did() -> None:
    checks = [CheckResult("coverage", Verdict.PASS, "max rel err 1e-04", kernel="k", nodeid="t.py::test_a")]
    good = _outcomes(("t.py::test_a", "setup", False), ("t.py::test_a", "call", False))
    assert 'id="all-passed"' in _page(checks, outcomes=good, exitstatus=0)
    # the same outcomes with a non-zero exit (a worker crash, an internal error): not a pass
    page = _page(checks, outcomes=good, exitstatus=3)
    assert 'id="all-passed"' not in page and 'id="exit-status"' in page
    # no outcomes given (a library call): the page says it cannot tell
    page = _page(checks)
    assert 'id="all-passed"' not in page and "own outcomes were not given" in page
