"""``python -m pytest_pipecheck baseline``: list, show, compare (driven through its argparse entry)."""

from __future__ import annotations

import argparse

import pytest

from pytest_pipecheck.cli import baseline as cli
from pytest_pipecheck.perf.baseline import BaselineStore, EnvKey
from pytest_pipecheck.perf.stats import Samples

H100 = EnvKey.create(gpu="NVIDIA H100", sm_count=132, compute_capability="9.0", driver="580", cuda="13.0")
H200 = EnvKey.create(gpu="NVIDIA H200", sm_count=132, compute_capability="9.0", driver="580", cuda="13.0")


def _main(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="pipecheck baseline")
    cli.add_arguments(parser)
    return cli.run(parser.parse_args(argv))


def _entry(median: float) -> dict:
    return Samples.of([median * (1 + 0.001 * (i % 7)) for i in range(50)], mode="cold").to_json()


@pytest.fixture
def two_dirs(tmp_path):
    old, new = BaselineStore(str(tmp_path / "old")), BaselineStore(str(tmp_path / "new"))
    po = old.save(H100, "t.py::test_a", "default", _entry(60))
    old.save(H100, "t.py::test_b", "default", _entry(100))
    old.save(H100, "t.py::test_gone", "default", _entry(10))
    pn = new.save(H100, "t.py::test_a", "default", _entry(60.3))
    new.save(H100, "t.py::test_b", "default", _entry(110))
    return po, pn, tmp_path


def test_list(two_dirs, capsys) -> None:
    _, _, root = two_dirs
    assert _main("list", "--dir", str(root / "old")) == 0
    out = capsys.readouterr().out
    assert H100.filename() in out and "NVIDIA H100" in out and "3" in out


def test_list_flags_unreadable_files(two_dirs, capsys) -> None:
    _, _, root = two_dirs
    (root / "old" / "broken.json").write_text("{")
    assert _main("list", "--dir", str(root / "old")) == 1
    assert "UNREADABLE" in capsys.readouterr().out


def test_list_missing_dir(tmp_path, capsys) -> None:
    assert _main("list", "--dir", str(tmp_path / "nope")) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_show(two_dirs, capsys) -> None:
    po, _, _ = two_dirs
    assert _main("show", po, "--test", "test_b") == 0
    out = capsys.readouterr().out
    assert "t.py::test_b" in out and "t.py::test_a" not in out and "100.30" in out


def test_compare_finds_the_regression(two_dirs, capsys) -> None:
    po, pn, _ = two_dirs
    assert _main("compare", po, pn) == 1
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("t.py")}
    assert "REGRESSED" in lines["t.py::test_b"] and "+10.0%" in lines["t.py::test_b"]
    assert "ok" in lines["t.py::test_a"]
    assert "t.py::test_gone [default] only in" in out
    assert "2 compared, 1 regressed" in out
    # a lenient threshold lets it pass
    assert _main("compare", po, pn, "--threshold", "0.2") == 0


def test_compare_refuses_other_environments(tmp_path, capsys) -> None:
    a = BaselineStore(str(tmp_path / "a")).save(H100, "t.py::x", "default", _entry(60))
    b = BaselineStore(str(tmp_path / "b")).save(H200, "t.py::x", "default", _entry(90))
    assert _main("compare", a, b) == 2
    assert "different environments (gpu NVIDIA H100!=NVIDIA H200)" in capsys.readouterr().err
    assert _main("compare", a, b, "--allow-different-env") == 0
    assert "informational" in capsys.readouterr().out


def test_corrupt_file_is_one_line(tmp_path, capsys) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("not json")
    assert _main("show", str(bad)) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipecheck baseline: baseline file") and "corrupt" in err and "Traceback" not in err


def test_bad_alpha(two_dirs, capsys) -> None:
    po, pn, _ = two_dirs
    assert _main("compare", po, pn, "--alpha", "2") == 2
    assert "alpha=2.0 must be in (0, 1)" in capsys.readouterr().err


ANCHOR = {"kind": "matmul", "dtype": "bf16", "m": 2048, "n": 2048, "k": 4096, "label": "bf16 matmul 2048x2048x4096"}


def _anchored(median: float, clock: float) -> dict:
    return Samples.of([median * clock * (1 + 0.001 * (i % 7)) for i in range(50)],
                      anchor_us=[50.0 * clock * (1 + 0.001 * (i % 5)) for i in range(50)], anchor=ANCHOR).to_json()


def test_compare_anchored_entries(tmp_path, capsys) -> None:
    a = BaselineStore(str(tmp_path / "a")).save(H100, "t.py::x", "default", _anchored(60, 1.0))
    BaselineStore(str(tmp_path / "a")).save(H100, "t.py::y", "default", _anchored(60, 1.0))
    b = BaselineStore(str(tmp_path / "b")).save(H100, "t.py::x", "default", _anchored(60, 1.15))  # slower clock
    BaselineStore(str(tmp_path / "b")).save(H100, "t.py::y", "default", _anchored(60 * 1.1, 1.0))  # slower kernel
    assert _main("compare", a, b) == 1
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.startswith("t.py")}
    assert "+15.0%" in lines["t.py::x"] and "anchor" in lines["t.py::x"] and "ok" in lines["t.py::x"]
    assert "REGRESSED" in lines["t.py::y"] and "+10.0%" in lines["t.py::y"]
    assert "gated on" in out
    assert _main("show", a) == 0
    assert "bf16 matmul 2048x2048x4096 50.1" in capsys.readouterr().out


def test_show_version_1_file(tmp_path, capsys) -> None:
    import json

    path = tmp_path / "old.json"
    path.write_text(json.dumps({"schema": "pytest-pipecheck-baseline", "version": 1, "env": dict(H100.values),
                                "tests": {"t.py::x": {"default": _entry(60)}}}))
    assert _main("show", str(path)) == 0
    out = capsys.readouterr().out
    assert "schema version 1: no anchors" in out and "t.py::x" in out


def test_compare_adaptive_columns_and_options(tmp_path, capsys) -> None:
    a = BaselineStore(str(tmp_path / "a")).save(H100, "t.py::x", "default", _anchored(60, 1.0))
    b = BaselineStore(str(tmp_path / "b")).save(H100, "t.py::x", "default", _anchored(60, 1.01))  # clock +1%
    assert _main("compare", a, b) == 0  # the default: per-kind, a matmul anchor gates on the ratios
    out = capsys.readouterr().out
    assert "(threshold 2.75%, alpha 0.001, anchor mode per-kind" in out
    assert next(x for x in out.splitlines() if x.startswith("t.py::x")).split()[7] == "anchor"
    assert _main("compare", a, b, "--anchor-mode", "adaptive") == 0
    out = capsys.readouterr().out
    assert "anchor moved" in out and "anchor mode adaptive, clock tolerance 1.5%" in out
    line = next(x for x in out.splitlines() if x.startswith("t.py::x"))
    assert line.split()[4:8] == ["+1.0%", "+0.0%", "+1.0%", "raw"]  # within the tolerance: raw decides
    assert _main("compare", a, b, "--anchor-mode", "always") == 0
    assert next(x for x in capsys.readouterr().out.splitlines() if x.startswith("t.py::x")).split()[7] == "anchor"
    assert _main("compare", a, b, "--anchor-mode", "adaptive", "--clock-tolerance", "0.005") == 0
    assert next(x for x in capsys.readouterr().out.splitlines() if x.startswith("t.py::x")).split()[7] == "anchor"
    assert _main("compare", a, b, "--clock-tolerance", "-1") == 2
    assert "clock_tolerance=-1.0 must be a finite number >= 0" in capsys.readouterr().err
