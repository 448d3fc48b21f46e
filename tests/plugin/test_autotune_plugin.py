"""A test taking ``config`` runs once per config of the spec's autotuned kernel; verdicts name the config."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = '''
import torch
import triton
import triton.language as tl

from pytest_pipecheck import KernelSpec, Tensor


@triton.autotune(configs=[triton.Config({"BLOCK_N": 8}, num_warps=4, num_stages=1),
                          triton.Config({"BLOCK_N": 16}, num_warps=4, num_stages=2),
                          triton.Config({"BLOCK_N": 32}, num_warps=2, num_stages=3)],
                 key=["N"])
@triton.jit
def scale_rows(x_ptr, y_ptr, M, N, sxm, sym, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * 4 + tl.arange(0, 4)
    tiles = N // BLOCK_N if BLOCK_N == 32 else tl.cdiv(N, BLOCK_N)  # the BLOCK_N=32 config drops the last tile
    for t in range(0, tiles):
        rn = t * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :], mask=mask, other=0.0)
        tl.store(y_ptr + rm[:, None] * sym + rn[None, :], x * 2, mask=mask)


def scale(x):
    y = torch.empty_like(x)
    scale_rows[(triton.cdiv(x.shape[0], 4),)](x, y, x.shape[0], x.shape[1], x.stride(0), y.stride(0))
    return y


SPEC = KernelSpec("scale", call=scale, reference=lambda a, d: {"y": a["x"].double() * 2},
                  tensors=[Tensor("x", ("M", "N"), dtype="float32"),
                           Tensor("y", ("M", "N"), dtype="float32", role="output")],
                  tiles={"M": 4, "N": "BLOCK_N"}, loop_dim="N", autotune=scale_rows)
SUBSET = KernelSpec("scale_subset", call=scale, reference=lambda a, d: {"y": a["x"].double() * 2},
                    tensors=[Tensor("x", ("M", "N"), dtype="float32"),
                             Tensor("y", ("M", "N"), dtype="float32", role="output")],
                    tiles={"M": 4, "N": "BLOCK_N"}, loop_dim="N", autotune=scale_rows,
                    configs=["BLOCK_N8-w4-s1"])
'''


def test_each_config_is_its_own_test_and_only_the_buggy_one_fails(pytester):
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_configs='''
import pytest
from kernels import SPEC, SUBSET

@pytest.mark.pipecheck(spec=SPEC)
def test_scale(pipecheck, shape, config):
    pipecheck.check_coverage(SPEC, shape, config=config)

@pytest.mark.pipecheck(spec=SUBSET)
def test_subset(pipecheck, config):
    pipecheck.check_coverage(SUBSET, "M5-N40", config=config)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-v", "--pipecheck-seed=3")
    # 10 generated shapes (the three block sizes give ragged N for each), each of the 5 other value
    # patterns at a ragged shape and the extent case (a test that takes only `shape` gets them too), x 3
    # configs; none of the generated shapes is a multiple of 32, so the config that drops the partial tile
    # fails at each of them (the extent probe, whole tiles long, cannot show it)
    result.assert_outcomes(passed=2 * (10 + 5) + 3 + 1, failed=10 + 5)
    lines = result.stdout.lines
    failed = [ln for ln in lines if ln.startswith("FAILED ")]
    assert len(failed) == 15 and all("config=BLOCK_N32-w2-s3" in ln for ln in failed), failed
    result.stdout.fnmatch_lines(["*test_scale?M5-N55-config=BLOCK_N8-w4-s1? PASSED*",
                                 "*test_scale?M5-N55-config=BLOCK_N16-w4-s2? PASSED*",
                                 "*test_scale?M5-N55-config=BLOCK_N32-w2-s3? FAILED*",
                                 "*test_subset?config=BLOCK_N8-w4-s1? PASSED*",
                                 "*scale?BLOCK_N32-w2-s3? at M5-N55: coverage failed*"])
    # the summary (per test under -v) names the config as the kernel
    result.stdout.fnmatch_lines(["*pipecheck summary*",
                                 "*test_scale?M5-N55-config=BLOCK_N32-w2-s3?*scale?BLOCK_N32-w2-s3?*coverage*fail*"])


def test_config_without_autotune_is_left_to_the_users_fixture(pytester):
    pytester.makepyfile(kernels=KERNELS)
    pytester.makepyfile(test_plain='''
import pytest
from pytest_pipecheck import KernelSpec, Tensor

PLAIN = KernelSpec("plain", lambda a, d: a["y"].copy_(a["x"]), lambda a, d: {"y": a["x"].double()},
                   [Tensor("x", ("N",), dtype="float32"), Tensor("y", ("N",), dtype="float32", role="output")],
                   {"N": 8}, "N")

@pytest.fixture
def config():
    return "mine"

@pytest.mark.pipecheck(spec=PLAIN)
def test_plain(pipecheck, config):
    assert config == "mine"
''')
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_a_pruned_config_is_a_skip_with_the_reason(pytester):
    pytester.makepyfile(test_pruned='''
import pytest
import torch
import triton
import triton.language as tl
from pytest_pipecheck import KernelSpec, Tensor

def keep_fitting(configs, nargs, **kwargs):
    return [c for c in configs if c.kwargs["BLOCK"] <= nargs["n"]]

@triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 64})], key=["n"],
                 prune_configs_by={"early_config_prune": keep_fitting})
@triton.jit
def copy(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

def launch(arrays, dims):
    copy[lambda meta: (triton.cdiv(dims["N"], meta["BLOCK"]),)](arrays["x"], arrays["y"], dims["N"])

SPEC = KernelSpec("copy", launch, lambda a, d: {"y": a["x"].double()},
                  [Tensor("x", ("N",), dtype="float32"), Tensor("y", ("N",), dtype="float32", role="output")],
                  {"N": "BLOCK"}, "N", autotune=copy)

@pytest.mark.pipecheck(spec=SPEC)
def test_copy(pipecheck, config):
    pipecheck.check_kernel(SPEC, "N20", config=config)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*copy?BLOCK64-w4-s3?*autotune*1 skip*",
                                 "*autotune x1: *config BLOCK64-w4-s3 is removed*",
                                 "*SKIPPED*pipecheck: autotuned kernel 'copy': config BLOCK64-w4-s3 is removed by "
                                 "its early_config_prune*"])
