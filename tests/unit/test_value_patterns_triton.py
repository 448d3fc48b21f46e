"""Value patterns catch, with default settings, two bugs that normal inputs hide (Triton interpreter on CPU).

* a row max whose masked load reads ``other=0`` instead of ``-inf``: wrong only when a whole row is
  negative, which normal values almost never give;
* a layer norm whose variance runs over the padded lanes of the last chunk (the ``tl.where`` that
  zeroes them dropped): weak with zero-mean inputs, glaring with an offset mean.

The correct kernels pass every default (shape, pattern) pair; each mutant fails at least one, and the
failure names the pattern. Shapes are tiny (one or two rows, a few 16-wide chunks) to keep the
interpreter fast.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from pytest_pipecheck.model import shapes as shape_gen  # noqa: E402
from pytest_pipecheck.model import values as patterns  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckFailure, Verdict  # noqa: E402

BLOCK_N = 16


@triton.jit
def _row_max_kernel(x_ptr, out_ptr, N, sxm, sxn, BLOCK_N: tl.constexpr, ZERO_OTHER: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.full([BLOCK_N], float("-inf"), tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        if ZERO_OTHER:  # the bug: masked lanes read 0, which beats every negative value
            x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=0.0)
        else:
            x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=float("-inf"))
        acc = tl.maximum(acc, x.to(tl.float32))
    tl.store(out_ptr + row, tl.max(acc, axis=0))


@triton.jit
def _layer_norm_kernel(x_ptr, y_ptr, N, sxm, sxn, sym, syn, eps, BLOCK_N: tl.constexpr,
                       MASK_VAR: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        acc += tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / N
    acc2 = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
        if MASK_VAR:
            d = tl.where(cols < N, x - mean, 0.0)
        else:  # the bug: padded lanes add (0 - mean)^2 each
            d = x - mean
        acc2 += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc2, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * sxm + cols * sxn, mask=cols < N, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * sym + cols * syn, ((x - mean) * rstd).to(tl.float16), mask=cols < N)


def row_max_spec(mutant: bool = False) -> KernelSpec:
    def launch(arrays, dims):
        x, out = arrays["x"], arrays["out"]
        _row_max_kernel[(dims["M"],)](x, out, dims["N"], x.stride(0), x.stride(1), BLOCK_N=BLOCK_N,
                                      ZERO_OTHER=mutant)

    def reference(arrays, dims):
        return {"out": arrays["x"].double().amax(dim=1)}

    return KernelSpec("row_max_other_zero" if mutant else "row_max", launch, reference,
                      [Tensor("x", ("M", "N")), Tensor("out", ("M",), dtype="float32", role="output")],
                      {"N": BLOCK_N}, "N")


EPS = 1e-5


def layer_norm_spec(mutant: bool = False) -> KernelSpec:
    def launch(arrays, dims):
        x, y = arrays["x"], arrays["y"]
        _layer_norm_kernel[(dims["M"],)](x, y, dims["N"], x.stride(0), x.stride(1), y.stride(0), y.stride(1), EPS,
                                         BLOCK_N=BLOCK_N, MASK_VAR=not mutant)

    def reference(arrays, dims):
        x = arrays["x"].double()
        mean = x.mean(dim=1, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=1, keepdim=True)
        return {"y": (x - mean) / torch.sqrt(var + EPS)}

    return KernelSpec("layer_norm_var_over_padding" if mutant else "layer_norm", launch, reference,
                      [Tensor("x", ("M", "N")), Tensor("y", ("M", "N"), role="output")], {"N": BLOCK_N}, "N")


def _default_cases(spec):
    return patterns.pair(spec, shape_gen.generate(spec, "small"), "small")


def test_default_pairing_is_bounded_and_puts_each_pattern_on_a_ragged_shape():
    spec = row_max_spec()
    generated = shape_gen.generate(spec, "small")
    cases = _default_cases(spec)
    assert len(cases) == len(generated) + len(patterns.DEFAULT) - 1 <= 13
    for shape, name in cases:
        if name != "normal":
            assert shape["N"] % BLOCK_N, (shape, name)
    assert {n for _, n in cases} == set(patterns.DEFAULT)


@pytest.mark.parametrize("make", [row_max_spec, layer_norm_spec], ids=["row_max", "layer_norm"])
def test_correct_kernels_pass_every_default_pair(pipecheck, make):
    spec = make()
    for shape, name in _default_cases(spec):
        result = pipecheck.check_coverage(spec, shape, values=name)
        assert result.verdict is Verdict.PASS, (shape, name, result)


@pytest.mark.pipecheck(expect_failures=True)
@pytest.mark.parametrize(("make", "revealing"), [(row_max_spec, {"negative"}),
                                                 (layer_norm_spec, {"offset", "negative", "large"})],
                         ids=["row_max_other_zero", "layer_norm_var_over_padding"])
def test_default_patterns_catch_the_mutants(pipecheck, make, revealing):
    spec = make(mutant=True)
    caught = {}
    for shape, name in _default_cases(spec):
        try:
            pipecheck.check_coverage(spec, shape, values=name)
        except PipecheckFailure as exc:
            caught[name] = str(exc)
    assert revealing & set(caught), f"{spec.name}: no default pattern caught it ({sorted(caught)})"
    name = sorted(revealing & set(caught))[0]
    assert f"values={name}" in caught[name] and "exceed the tolerance" in caught[name], caught[name]


def test_normal_values_alone_miss_the_row_max_mutant(pipecheck):
    """Why the patterns are needed: at a ragged shape the mutant agrees with the reference on normal
    inputs (a 31-wide row of normal values is all negative with probability 2**-31) and fails on
    ``negative``."""
    spec = row_max_spec(mutant=True)
    assert pipecheck.check_coverage(spec, "M2-N31").verdict is Verdict.PASS
    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure, match=r"row_max_other_zero at M2-N31 "
                                                                               r"values=negative: coverage failed"):
        pipecheck.check_coverage(spec, "M2-N31", values="negative")
