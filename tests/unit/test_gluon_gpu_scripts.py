"""The Gluon GEMM's GPU scripts, checked without a GPU: the tuning grid and the race probe's parser.

scripts/gpu/gluon_gemm_tune.py must only ask for configurations the launcher accepts (an epilogue
plan that fits next to the ring, a tile wgmma can cover), and scripts/gpu/gluon_race_probe.py must
read racecheck's hazard report as compute-sanitizer writes it (the reports in
docs/validation/2026-11-23-h200-1257/run-e/; the one read here is tests/data/sanitizer/gluon_run_e_variant0_racecheck_2026_11_23.log).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from reference_kernels.triton import gluon_gemm as gg

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "gpu" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tune() -> ModuleType:
    return _load("gluon_gemm_tune")


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    return _load("gluon_race_probe")


def _plan(cfg: dict[str, Any], kw: dict[str, Any]) -> tuple[bool, int, int]:
    return gg.epilogue_plan(4096, 2, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                            stages=cfg["stages"], tma=kw.get("epilogue_tma"), split=kw.get("epi_split"),
                            bufs=kw.get("epi_bufs"))


def test_every_tuning_configuration_is_one_the_launcher_accepts(tune):
    for grid in (tune.grid(), tune.quick_grid()):
        assert len({tune.label(c) for c in grid}) == len(grid), "labels must tell configurations apart"
    configs = tune.grid() + tune.quick_grid()
    for cfg in configs:
        kw = tune.launch_kwargs(cfg)
        gg.kernel_config(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                         consumer_warps=cfg["consumer_warps"])
        tma_store, split, bufs = _plan(cfg, kw)
        assert gg.shared_memory_bytes(BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
                                      stages=cfg["stages"], epilogue_tma=tma_store, epi_split=split,
                                      epi_bufs=bufs) <= gg.SMEM_LIMIT_SM90
        if cfg.get("epilogue") not in (None, "masked"):
            assert (tma_store, f"{split}x{bufs}") == (True, cfg["epilogue"]), tune.label(cfg)


def test_launch_kwargs_spell_the_epilogue_overrides(tune):
    base = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "stages": 4, "consumer_warps": 8, "GROUP_M": 8}
    assert tune.launch_kwargs({**base, "epilogue": None}) == base
    assert tune.launch_kwargs({**base, "epilogue": "masked"}) == {**base, "epilogue_tma": False}
    assert tune.launch_kwargs({**base, "epilogue": "4x2", "num_programs": 128}) == {
        **base, "epilogue_tma": True, "epi_split": 4, "epi_bufs": 2, "num_programs": 128}


def test_race_probe_reads_racecheck_hazards_with_their_addresses(probe):
    log = ROOT / "tests" / "data" / "sanitizer" / "gluon_run_e_variant0_racecheck_2026_11_23.log"  # run-e's
    if not log.is_file():
        pytest.skip(f"recorded racecheck output {log} is not in this checkout")
    found = probe._hazards(log.read_text())
    assert found["kinds"] == {"RAW": 4}
    assert found["summary"] == "========= RACECHECK SUMMARY: 4 hazards displayed (4 errors, 0 warnings)"
    assert set(found["addresses"]) == {"__shared__ 0x304b0", "__shared__ 0x304b2", "__shared__ 0x304b3"}
    assert "Write Thread (31,0,0)" in found["examples"][0]


def test_race_probe_finds_no_hazard_in_a_clean_report(probe):
    clean = "========= COMPUTE-SANITIZER\n========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    found = probe._hazards(clean)
    assert found["kinds"] == {} and found["addresses"] == {} and found["examples"] == []
    assert found["summary"].endswith("0 hazards displayed (0 errors, 0 warnings)")
