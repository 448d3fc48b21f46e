"""The HTML report as a browser shows it: one page rendered by headless Chromium, then its pixels read.

The page is self-contained, so the browser needs no network; the flags keep Chromium from trying
(first-run, sync, component updates, QUIC). Skipped with the reason when no Chromium is installed
(Debian: ``apt-get install chromium``) or matplotlib is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from pytest_pipecheck.config import PipecheckConfig
from pytest_pipecheck.device import DeviceInfo, TierInfo
from pytest_pipecheck.report import plots
from pytest_pipecheck.report.html import write_html
from pytest_pipecheck.results import CheckResult, Verdict

WIDTH, HEIGHT = 1400, 2000


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium)")


def _rgb(hex_colour: str) -> tuple[float, float, float]:
    h = hex_colour.lstrip("#")
    return (int(h[0:2], 16) / 255, int(h[2:4], 16) / 255, int(h[4:6], 16) / 255)


def _mask(img: Any, hex_colour: str, tol: float = 0.03) -> Any:
    import numpy as np

    return np.abs(img - np.array(_rgb(hex_colour))).max(axis=-1) < tol


def _results() -> list[CheckResult]:
    from pytest_pipecheck.occupancy import occupancy

    per_arch = {}
    for arch in ("sm_80", "sm_86", "sm_90"):
        occ = occupancy(arch, 128, 128, 0, 40 * 1024)
        per_arch[arch] = {"threads": 128, "registers": 128, "static_smem": 0, "dynamic_smem": 40 * 1024,
                          "blocks_per_sm": occ.blocks_per_sm, "limiters": sorted(occ.limiters),
                          "smem_up": occ.smem_up, "smem_down": occ.smem_down}
    return [
        CheckResult("coverage", Verdict.PASS, "max rel err 1e-04", "gemm", {}, "t.py::test_a[M64]"),
        CheckResult("coverage", Verdict.FAIL, "K tile 3 of 4 never reached the output", "gemm", {},
                    "t.py::test_a[M65]"),
        CheckResult("sanitizer:racecheck", Verdict.SKIP, "needs a CUDA GPU", "gemm", {}, "t.py::test_a[M64]"),
        CheckResult("occupancy", Verdict.PASS, "sm_86 2 blocks/SM", "gemm", {"per_arch": per_arch, "floor": 1},
                    "t.py::test_occ"),
    ]


@pytest.mark.skipif(not plots.available(), reason="matplotlib is not installed; the page would have no plots")
def test_chromium_shows_the_verdict_colours_and_the_occupancy_plot(tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    browser = _chromium()
    page = tmp_path / "report.html"
    tier = TierInfo("gpu", DeviceInfo(0, "NVIDIA H100", "9.0", 132, 81559, "580.65"), "", {})
    write_html(page, _results(), tier, 7, PipecheckConfig(enabled=True))
    shot = tmp_path / "shot.png"
    profile = tmp_path / "profile"
    profile.mkdir()
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--hide-scrollbars", "--force-device-scale-factor=1", f"--user-data-dir={profile}",
           f"--screenshot={shot}", f"--window-size={WIDTH},{HEIGHT}", page.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False,
                          env={**os.environ, "HOME": str(tmp_path)})
    assert shot.is_file(), f"Chromium wrote no screenshot (exit {proc.returncode}):\n{proc.stderr[-2000:]}"

    img = mpimg.imread(str(shot))[..., :3]
    assert img.shape[:2] == (HEIGHT, WIDTH)

    # the inline CSS was applied: the header band runs across the top
    assert _mask(img[5], "#24292f").mean() > 0.95

    # each verdict cell is painted in its colour, in the verdict table (below the header)
    for verdict, colour in (("pass", "#dafbe1"), ("fail", "#ffebe9"), ("skip", "#fff8c5")):
        assert _mask(img, colour).sum() > 2000, f"no {verdict} cell colour on the page"
    fail_rows = _mask(img, "#ffebe9").any(axis=1).nonzero()[0]
    pass_rows = _mask(img, "#dafbe1").any(axis=1).nonzero()[0]
    # the not-passed banner comes first, above any pass cell
    assert fail_rows.min() < pass_rows.min()

    # the embedded PNG was decoded and drawn: one step curve per architecture in the plot's colours
    # (the page's CSS uses none of them), and the kernel's points in red
    for arch_colour in ("#1f77b4", "#ff7f0e", "#2ca02c"):
        mask = _mask(img, arch_colour, tol=0.04)
        assert mask.sum() > 150, f"no {arch_colour} curve pixels: the occupancy plot is not visible"
        rows = mask.any(axis=1).nonzero()[0]
        assert rows.max() - rows.min() > 80  # a curve that steps down, not a legend swatch alone
    assert _mask(img, "#d62728", tol=0.05).sum() > 60
