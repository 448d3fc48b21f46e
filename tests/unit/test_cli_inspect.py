"""``python -m pytest_pipecheck inspect``: text and JSON output, exit status on bad input."""

from __future__ import annotations

import argparse
import json

from _sass_artifacts import _DATA, art

from pytest_pipecheck.cli import inspect as cli


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    rc = cli.run(parser.parse_args(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cubin_json(tmp_path, capsys):
    art.need_disassembler()
    p = tmp_path / "k.cubin"
    p.write_bytes(art.cu("cpasync_gemm", swap=True)[0])
    rc, out, err = _run([str(p), "--json"], capsys)
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["name"] == "cpasync_gemm" and row["arch"] == "sm_80"
    assert row["async_copies"]["LDGSTS"] > 0 and row["overlap"] is False
    assert row["spills_source"] == "LDL/STL"


def test_cu_text_two_archs(capsys):
    art.need_nvcc()
    art.need_disassembler()
    rc, out, err = _run([str(_DATA / "spill.cu"), "--arch", "sm_80,sm_86"], capsys)
    assert rc == 0, err
    assert out.count("spill_kernel") == 2 and "  sm_86  spill_kernel" in out
    assert "spills: 0 B" not in out and "B spill stores" in out


def test_bad_inputs_exit_2_with_one_line(tmp_path, capsys):
    rc, _out, err = _run([str(tmp_path / "missing.cu")], capsys)
    assert rc == 2 and "does not exist" in err and err.count("\n") == 1
    rc, _, err = _run([str(_DATA / "spill.cu"), "--arch", "sm_99"], capsys)
    assert rc == 2 and "sm_99" in err
    art.need_nvcc()
    rc, _, err = _run([str(_DATA / "no_kernels.cu"), "--arch", "sm_80"], capsys)
    assert rc == 2 and "contains no kernels" in err
