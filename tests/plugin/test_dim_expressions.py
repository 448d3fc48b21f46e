"""Tensors whose dims are expressions (packed weights ``K/8``, group scales ``K/group``, fused inputs ``2*N``),
checked by the README's simplest test: pipecheck allocates, poisons and guards them like any tensor, the shapes
it generates keep every expression whole, and each bug is named by tensor, element and tile. One real pytest run
on the CPU tier (Triton's interpreter).

The kernels:

* ``dequant``: int4 weights, eight to an int32 along K (``w``: ``(K/8, N)``), one fp16 scale per group of
  16 rows of K (``scales``: ``(K/group, N)``, ``constants={"group": 16}``), written out as ``(K, N)`` fp32; K is
  the loop. Mutants: one reads the scale of the previous group at each group's first row; one drops the K
  mask of its scale load, reading scale rows past K/group in the last partial K tile (a read whose value the
  masked store discards: only the out-of-bounds watch sees it).
* ``gate``: ``y = silu(x[:, :N]) * x[:, N:]`` from a fused ``(M, 2*N)`` input, in the spec form and as a wrapper
  that allocates its output. Mutant: reads the up projection from the first N columns too.
* ``crelu``: ``y = [relu(x), relu(-x)]``, an ``(M, 2*N)`` output, as a wrapper. Mutant: writes only the first N
  of the 2N columns.
"""

from __future__ import annotations

import re

import pytest

from ._simplest_tests import run_simplest_tests

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out

pytest.importorskip("torch")
pytest.importorskip("triton")

KERNELS = '''
import torch
import triton
import triton.language as tl
from pytest_pipecheck import KernelSpec, Tensor

GROUP = 16


@triton.jit
def dequant_kernel(w_ptr, s_ptr, o_ptr, K, N, swk, swn, ssk, ssn, sok, son, GROUP: tl.constexpr,
                   BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, LAG: tl.constexpr, MASK_K: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        m = (ks[:, None] < K) & (cols[None, :] < N)
        packed = tl.load(w_ptr + (ks // 8)[:, None] * swk + cols[None, :] * swn, mask=m, other=0)
        q = (packed >> ((ks % 8) * 4)[:, None]) & 0xF
        g = tl.maximum(ks - LAG, 0) // GROUP
        sm = m if MASK_K else cols[None, :] < N
        s = tl.load(s_ptr + g[:, None] * ssk + cols[None, :] * ssn, mask=sm, other=0.0)
        tl.store(o_ptr + ks[:, None] * sok + cols[None, :] * son, (q - 8).to(tl.float32) * s.to(tl.float32),
                 mask=m)


def _dequant(lag, mask_k):
    def launch(arrays, dims):
        w, s, o = arrays["w"], arrays["scales"], arrays["out"]
        dequant_kernel[(triton.cdiv(dims["N"], 16),)](
            w, s, o, dims["K"], dims["N"], w.stride(0), w.stride(1), s.stride(0), s.stride(1), o.stride(0),
            o.stride(1), GROUP=GROUP, BLOCK_K=32, BLOCK_N=16, LAG=lag, MASK_K=mask_k)
    return launch


def dequant_reference(arrays, dims):
    k = torch.arange(dims["K"])
    w = arrays["w"].to(torch.int64)
    q = (w[k // 8] >> ((k % 8) * 4)[:, None]) & 0xF
    return {"out": (q - 8).double() * arrays["scales"].double()[k // GROUP]}


def _packed(shape, gen):
    return torch.randint(-2**31, 2**31 - 1, shape, generator=gen, dtype=torch.int64).to(torch.int32)


def _dequant_spec(name, lag=0, mask_k=True):
    return KernelSpec(name, _dequant(lag, mask_k), dequant_reference,
                      [Tensor("w", ("K/8", "N"), "int32", init=_packed), Tensor("scales", ("K/group", "N"), "float16"),
                       Tensor("out", ("K", "N"), "float32", role="output")],
                      tiles={"K": 32, "N": 16}, loop_dim="K", constants={"group": GROUP})


DEQUANT = _dequant_spec("dequant")
DEQUANT_LAG = _dequant_spec("dequant_previous_group", lag=1)
DEQUANT_NO_K_MASK = _dequant_spec("dequant_unmasked_scales", mask_k=False)


@triton.jit
def gate_kernel(x_ptr, y_ptr, N, sxm, sxn, sym, syn, UP: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, N, BLOCK):
        c = start + tl.arange(0, BLOCK)
        m = c < N
        g = tl.load(x_ptr + row * sxm + c * sxn, mask=m, other=0.0)
        u = tl.load(x_ptr + row * sxm + (c + UP * N) * sxn, mask=m, other=0.0)
        tl.store(y_ptr + row * sym + c * syn, g * tl.sigmoid(g) * u, mask=m)


def _gate_launch(up):
    def launch(arrays, dims):
        x, y = arrays["x"], arrays["y"]
        gate_kernel[(dims["M"],)](x, y, dims["N"], x.stride(0), x.stride(1), y.stride(0), y.stride(1), UP=up,
                                  BLOCK=16)
    return launch


def gate(x):
    y = torch.empty((x.shape[0], x.shape[1] // 2), dtype=x.dtype, device=x.device)
    gate_kernel[(x.shape[0],)](x, y, y.shape[1], x.stride(0), x.stride(1), y.stride(0), y.stride(1), UP=1,
                               BLOCK=16)
    return y


def gate_reference(arrays, dims):
    x = arrays["x"].double()
    g, u = x[:, :dims["N"]], x[:, dims["N"]:]
    return {"y": g * torch.sigmoid(g) * u}


GATE_TENSORS = [Tensor("x", ("M", "2*N"), "float32"), Tensor("y", ("M", "N"), "float32", role="output")]
GATE = KernelSpec("gate", _gate_launch(1), gate_reference, GATE_TENSORS, tiles={"M": 1, "N": 16}, loop_dim="N")
GATE_FIRST_HALF = KernelSpec("gate_first_half_only", _gate_launch(0), gate_reference, GATE_TENSORS,
                             tiles={"M": 1, "N": 16}, loop_dim="N")
GATE_CALL = KernelSpec("gate_call", call=gate, reference=gate_reference, tensors=GATE_TENSORS,
                       tiles={"M": 1, "N": 16}, loop_dim="N")


@triton.jit
def crelu_kernel(x_ptr, y_ptr, N, sxm, sxn, sym, syn, BOTH: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, N, BLOCK):
        c = start + tl.arange(0, BLOCK)
        m = c < N
        x = tl.load(x_ptr + row * sxm + c * sxn, mask=m, other=0.0)
        tl.store(y_ptr + row * sym + c * syn, tl.maximum(x, 0.0), mask=m)
        if BOTH:
            tl.store(y_ptr + row * sym + (N + c) * syn, tl.maximum(-x, 0.0), mask=m)


def _crelu(both):
    def crelu(x):
        y = torch.empty((x.shape[0], 2 * x.shape[1]), dtype=x.dtype, device=x.device)
        crelu_kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), x.stride(1), y.stride(0), y.stride(1),
                                    BOTH=both, BLOCK=16)
        return y
    return crelu


def crelu_reference(arrays, dims):
    x = arrays["x"].double()
    return {"y": torch.cat([x.clamp(min=0), (-x).clamp(min=0)], dim=1)}


CRELU_TENSORS = [Tensor("x", ("M", "N"), "float32"), Tensor("y", ("M", "2*N"), "float32", role="output")]
CRELU = KernelSpec("crelu", call=_crelu(True), reference=crelu_reference, tensors=CRELU_TENSORS,
                   tiles={"M": 1, "N": 16}, loop_dim="N")
CRELU_FIRST_HALF = KernelSpec("crelu_first_half_only", call=_crelu(False), reference=crelu_reference,
                              tensors=CRELU_TENSORS, tiles={"M": 1, "N": 16}, loop_dim="N")
'''

#: the simplest test of each spec of KERNELS (tests/plugin/_simplest_tests.py): {test name: spec name}
SUITE = {
    "test_dequant": "DEQUANT",
    "test_dequant_previous_group": "DEQUANT_LAG",
    "test_dequant_unmasked_scales": "DEQUANT_NO_K_MASK",
    "test_gate": "GATE",
    "test_gate_call": "GATE_CALL",
    "test_gate_first_half_only": "GATE_FIRST_HALF",
    "test_crelu": "CRELU",
    "test_crelu_first_half_only": "CRELU_FIRST_HALF",
}


def _failures(out: str) -> dict[str, list[str]]:
    failed: dict[str, list[str]] = {}
    for line in out.splitlines():
        m = re.match(r"FAILED test_suite.py::(\w+)\[([^\]]+)\]", line)
        if m:
            failed.setdefault(m.group(1), []).append(m.group(2))
    return failed


def test_expression_dims_in_the_simplest_test(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_simplest_tests(pytester, monkeypatch, KERNELS, SUITE, seed=5)
    out = result.stdout.str()
    failed = _failures(out)
    passed = re.findall(r"PASSED test_suite.py::(\w+)\[([^\]]+)\]", out)
    # the correct kernels pass every generated case; K is a multiple of 16 in each (K/8 and K/group whole)
    assert not {"test_dequant", "test_gate", "test_gate_call", "test_crelu"} & set(failed), failed
    dequant_cases = [case for name, case in passed if name == "test_dequant"]
    assert dequant_cases and any("extent" in c for c in dequant_cases), passed
    for case in dequant_cases:
        k = re.search(r"K(\d+)", case)
        assert k is None or int(k.group(1)) % 16 == 0, case
    # a partial last K tile is among them (K=48: one tile of 32, then 16)
    assert any(re.search(r"K(\d+)", c) and int(re.search(r"K(\d+)", c).group(1)) % 32 for c in dequant_cases)

    # the previous group's scale at each group's first row: named by output, element and tile
    assert failed["test_dequant_previous_group"], failed
    rows = [int(k) for k in re.findall(r"output 'out': [^\n]*?worst at \[(\d+), \d+\] \(K tile", out)]
    assert rows and all(k % 16 == 0 and k > 0 for k in rows), rows
    # the scale load without its K mask reads scale rows past K/group (the store discards them): the
    # out-of-bounds watch names the tensor, the row along its K/group axis and that axis's tile (tile_K / group)
    assert failed["test_dequant_unmasked_scales"], failed
    assert re.search(r"input 'scales': \d+ reads past its view \(K/group \d+(\.\.\d+)? of \d+, in the guard band "
                     r"after it\), first at scales\[\d+, \d+\] \(K/group tile \d+ of \d+", out), out

    # the gate that reads the first half twice: y named with its element
    assert failed["test_gate_first_half_only"], failed
    assert re.search(r"output 'y': [^\n]*elements exceed the tolerance[^\n]*worst at \[\d+, \d+\] \(M tile \d+ of "
                     r"\d+", out), out
    # the CReLU that writes the first N of its 2N columns: the first unwritten element is the first of the
    # second copy of N
    assert failed["test_crelu_first_half_only"], failed
    halves = re.findall(r"crelu_first_half_only at M(\d+)-N(\d+): coverage failed\n(?:E\s+cause: [^\n]*\n)?"
                        r"E\s+output 'y': (\d+) of \d+ \(50\.00%\) elements never written \(still poison\); first "
                        r"at \[0, (\d+)\] \(M tile 0 of \d+, 2\*N copy 1 of 2, N tile 0 of \d+", out)
    assert halves, out
    for m, n, unwritten, column in halves:
        assert int(unwritten) == int(m) * int(n) and column == n, (m, n, unwritten, column)
