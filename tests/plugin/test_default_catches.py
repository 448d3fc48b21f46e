"""The README's first example, as a new user writes it for kernels nobody here wrote, catches every bug
class by default, and each failure says why; the correct twins pass once their layout contract is declared.
One real pytest run on the CPU tier (Triton's interpreter)."""

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
from pytest_pipecheck import KernelSpec, Range, Tensor


# a row max whose masked load pads with 0: right for positive rows, wrong when a row is all negative
@triton.jit
def rowmax_kernel(x_ptr, m_ptr, N, sxm, sxn, smm, BLOCK: tl.constexpr, PAD: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.full((BLOCK,), float("-inf"), tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=PAD)
        acc = tl.maximum(acc, x.to(tl.float32))
    tl.store(m_ptr + row * smm, tl.max(acc, axis=0))


def _rowmax(pad):
    def launch(arrays, dims):
        x = arrays["x"]
        m = arrays["m"]
        rowmax_kernel[(dims["M"],)](x, m, dims["N"], x.stride(0), x.stride(1), m.stride(0), BLOCK=16, PAD=pad)
    return launch


def _rowmax_spec(name, pad):
    return KernelSpec(name, _rowmax(pad), lambda a, d: {"m": a["x"].double().amax(dim=1)},
                      [Tensor("x", ("M", "N"), "float32"), Tensor("m", ("M",), "float32", role="output")],
                      tiles={"M": 1, "N": 16}, loop_dim="N")


ROWMAX_ZERO = _rowmax_spec("rowmax_other0", 0.0)
ROWMAX = _rowmax_spec("rowmax", float("-inf"))


# a scale whose launcher passes the row stride only: it assumes the columns are adjacent
@triton.jit
def scale_kernel(x_ptr, y_ptr, M, N, sxm, sxn, sym, syn, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    for start in range(0, N, BLOCK):
        c = start + cols
        x = tl.load(x_ptr + row * sxm + c * sxn, mask=c < N)
        tl.store(y_ptr + row * sym + c * syn, x * 2, mask=c < N)


def _scale(unit_columns):
    def launch(arrays, dims):
        x, y = arrays["x"], arrays["y"]
        sxn = 1 if unit_columns else x.stride(1)
        syn = 1 if unit_columns else y.stride(1)
        scale_kernel[(dims["M"],)](x, y, dims["M"], dims["N"], x.stride(0), sxn, y.stride(0), syn, BLOCK=16)
    return launch


def _scale_spec(name, unit_columns):
    return KernelSpec(name, _scale(unit_columns), lambda a, d: {"y": a["x"].double() * 2},
                      [Tensor("x", ("M", "N"), "float32"), Tensor("y", ("M", "N"), "float32", role="output")],
                      tiles={"M": 1, "N": 16}, loop_dim="N")


SCALE_UNIT = _scale_spec("scale_unit_columns", True)
SCALE = _scale_spec("scale", False)


# a row normalisation whose launcher gives X's row stride to Y as well (one stride for both)
@triton.jit
def center_kernel(x_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / N
    tl.store(y_ptr + row * stride + cols, x - mean, mask=mask)


def _center(arrays, dims):
    x, y = arrays["x"], arrays["y"]
    center_kernel[(dims["M"],)](x, y, dims["N"], x.stride(0), BLOCK=triton.next_power_of_2(dims["N"]))


def _center_ref(arrays, dims):
    x = arrays["x"].double()
    return {"y": x - x.mean(dim=1, keepdim=True)}


CENTER = KernelSpec("center_one_stride", _center, _center_ref,
                    [Tensor("x", ("M", "N"), "float32"), Tensor("y", ("M", "N"), "float32", role="output")],
                    tiles={"M": 1, "N": 32}, loop_dim="N")
# its contract: both contiguous (then one row stride is right for both)
CENTER_DECLARED = KernelSpec("center_contiguous", _center, _center_ref,
                             [Tensor("x", ("M", "N"), "float32", layout="contiguous"),
                              Tensor("y", ("M", "N"), "float32", role="output", layout="contiguous")],
                             tiles={"M": 1, "N": 32}, loop_dim="N")


# self-attention whose launcher offsets K, V and O by Q's batch, head and row strides (right only while all
# four tensors share one layout, as they do when each is contiguous and of one shape)
@triton.jit
def attn_kernel(q_ptr, k_ptr, v_ptr, o_ptr, M, H, sqb, sqh, sqm, sqd, skb, skh, skm, skd, svb, svh, svm, svd,
                sob, soh, som, sod, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr):
    b = tl.program_id(1) // H
    h = tl.program_id(1) % H
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, D)
    q = tl.load(q_ptr + b * sqb + h * sqh + rm[:, None] * sqm + rd[None, :] * sqd, mask=rm[:, None] < M, other=0.0)
    k = tl.load(k_ptr + b * skb + h * skh + rn[:, None] * skm + rd[None, :] * skd, mask=rn[:, None] < M, other=0.0)
    v = tl.load(v_ptr + b * svb + h * svh + rn[:, None] * svm + rd[None, :] * svd, mask=rn[:, None] < M, other=0.0)
    s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * 0.25
    s = tl.where(rn[None, :] < M, s, float("-inf"))
    p = tl.exp(s - tl.max(s, axis=1)[:, None])
    p = p / tl.sum(p, axis=1)[:, None]
    o = tl.sum(p[:, :, None] * v[None, :, :], axis=1)
    tl.store(o_ptr + b * sob + h * soh + rm[:, None] * som + rd[None, :] * sod, o, mask=rm[:, None] < M)


def _attn(q_strides_for_all):
    def launch(arrays, dims):
        q, k, v, o = (arrays[n] for n in "qkvo")
        strides = [q.stride()] * 4 if q_strides_for_all else [t.stride() for t in (q, k, v, o)]
        grid = (triton.cdiv(dims["M"], 16), dims["B"] * dims["H"])
        attn_kernel[grid](q, k, v, o, dims["M"], dims["H"], *[x for st in strides for x in st],
                          BLOCK_M=16, BLOCK_N=triton.next_power_of_2(dims["M"]), D=16)
    return launch


def _attn_ref(arrays, dims):
    q, k, v = (arrays[n].double() for n in "qkv")
    return {"o": torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1) @ v}


def _attn_spec(name, q_strides_for_all, layout=None):
    dims = ("B", "H", "M", "D")
    kw = {} if layout is None else {"layout": layout}
    return KernelSpec(name, _attn(q_strides_for_all), _attn_ref,
                      [Tensor("q", dims, "float32", **kw), Tensor("k", dims, "float32", **kw),
                       Tensor("v", dims, "float32", **kw), Tensor("o", dims, "float32", role="output", **kw)],
                      tiles={"M": 16}, loop_dim="M", preconditions=(Range("D", 16, 16), Range("B", 1, 2), Range("H", 1, 2),
                                                      Range("M", 1, 128)),
                      rtol=1e-4, atol=1e-4)


ATTN_Q_STRIDES = _attn_spec("attention_q_strides", True)
ATTN = _attn_spec("attention", False)
# its contract: every tensor contiguous (then Q's strides are every tensor's)
ATTN_DECLARED = _attn_spec("attention_q_strides_contiguous", True, layout="contiguous")
'''

#: the simplest test of each spec of KERNELS (tests/plugin/_simplest_tests.py): {test name: spec name}
SUITE = {
    "test_rowmax_other0": "ROWMAX_ZERO",
    "test_rowmax": "ROWMAX",
    "test_scale_unit_columns": "SCALE_UNIT",
    "test_scale": "SCALE",
    "test_center_one_stride": "CENTER",
    "test_center_contiguous": "CENTER_DECLARED",
    "test_attention_q_strides": "ATTN_Q_STRIDES",
    "test_attention": "ATTN",
    "test_attention_q_strides_contiguous": "ATTN_DECLARED",
}


def test_the_simplest_test_catches_each_bug_and_says_why(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    result = run_simplest_tests(pytester, monkeypatch, KERNELS, SUITE, seed=11)
    out = result.stdout.str()
    failed: dict[str, list[str]] = {}
    for line in out.splitlines():
        m = re.match(r"FAILED test_suite.py::(\w+)\[([^\]]+)\]", line)
        if m:
            failed.setdefault(m.group(1), []).append(m.group(2))
    # the correct twins pass every default case
    assert not {"test_rowmax", "test_scale", "test_center_contiguous"} & set(failed), failed
    # the row max with the wrong identity: only the negative values reach it, and the cause says so
    assert failed["test_rowmax_other0"] and all("values=negative" in c for c in failed["test_rowmax_other0"]), failed
    assert "cause: the values: it fails under values=negative and passes under normal values" in out
    # the launcher that assumes unit columns: the declared strided variants catch it, and name the tensor
    assert failed["test_scale_unit_columns"], failed
    assert all(re.search(r"(x|y)-(transposed|sliced)", c) for c in failed["test_scale_unit_columns"]), failed
    assert re.search(r"cause: a stride mix-up: it passes when every tensor is contiguous; it fails when any one of "
                     r"'[xy]' \((transposed|sliced)\)", out), out
    # one row stride for two tensors: fails in the base layout, and the cause names both tensors' layouts
    assert failed["test_center_one_stride"], failed
    assert re.search(r"cause: a stride mix-up: it passes when every tensor is contiguous; it fails when any one of "
                     r"'x' \(padded\), 'y' \(padded\) alone is laid out so, the others contiguous\. The kernel \(or "
                     r"its launcher\) takes one tensor's strides for another's", out), out
    # attention whose launcher offsets K, V and O by Q's strides: every case in the default (padded) layout
    # fails, and the cause names the tensors whose strides are mixed up; the twin that passes each tensor's own
    # strides passes every case, and so does the buggy launcher once its contract (all contiguous) is declared
    assert not {"test_attention", "test_attention_q_strides_contiguous"} & set(failed), failed
    assert len(failed["test_attention_q_strides"]) >= 12, failed
    assert re.search(r"attention_q_strides at \S+: coverage failed\n.*cause: a stride mix-up: it passes when every "
                     r"tensor is contiguous; it fails when any one of 'q' \(padded\), 'k' \(padded\), 'v' "
                     r"\(padded\), 'o' \(padded\) alone is laid out so, the others contiguous\. The kernel \(or its "
                     r"launcher\) takes one tensor's strides for another's: it passes when every tensor is padded "
                     r"alike", out), out
