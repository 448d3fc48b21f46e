"""Three bugs from kernel libraries' public trackers, rewritten as mutants of our own kernels
(``kernels.py`` cites each issue). The correct kernels pass every default case; each mutant is
caught by pipecheck's default shapes and value patterns, without choosing inputs for it.

Run: ``pytest examples/upstream_bugs --pipecheck``
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from pytest_pipecheck import KernelSpec, Tensor  # noqa: E402
from pytest_pipecheck.model import shapes as _shapes  # noqa: E402
from pytest_pipecheck.model import values as _values  # noqa: E402
from pytest_pipecheck.results import PipecheckFailure  # noqa: E402

from .kernels import ROW_MAX_BLOCK, SCAN_CHUNK, chunk_scan, layer_norm, row_max  # noqa: E402

EPS = 1e-5


def _layer_norm_spec(padded_variance: bool) -> KernelSpec:
    return KernelSpec(
        "layer_norm_padded_variance" if padded_variance else "layer_norm",
        call=lambda x, w, b: layer_norm(x, w, b, EPS, padded_variance=padded_variance),
        reference=lambda a, d: {"y": torch.nn.functional.layer_norm(a["x"].double(), (d["N"],), a["w"].double(),
                                                                    a["b"].double(), EPS)},
        tensors=(Tensor("x", ("M", "N")), Tensor("w", ("N",)), Tensor("b", ("N",)),
                 Tensor("y", ("M", "N"), role="output")),
        tiles={"M": 1, "N": 64}, loop_dim="N")


def _row_max_spec(zero_other: bool) -> KernelSpec:
    return KernelSpec(
        "row_max_zero_other" if zero_other else "row_max",
        call=lambda x: row_max(x, zero_other=zero_other),
        reference=lambda a, d: {"y": a["x"].double().amax(dim=-1)},
        tensors=(Tensor("x", ("M", "N")), Tensor("y", ("M",), role="output")),
        tiles={"M": 1, "N": ROW_MAX_BLOCK}, loop_dim="N")


def _chunk_scan_reference(a, d):
    x = a["x"].double()
    out = []
    for c in x.split(SCAN_CHUNK, dim=1):
        o = c.cumsum(1)
        o[:, -1] += c.sum(1)
        out.append(o)
    return {"o": torch.cat(out, dim=1)}


def _chunk_scan_fp32(a, d):
    """The same sums with one fp32 addition per step (torch's CPU cumsum accumulates float32 in double)."""
    x = a["x"].float()
    out = torch.empty_like(x)
    for lo in range(0, x.shape[1], SCAN_CHUNK):
        acc = torch.zeros_like(x[:, 0])
        for t in range(lo, min(lo + SCAN_CHUNK, x.shape[1])):
            acc = acc + x[:, t]
            out[:, t] = acc
        out[:, t] = out[:, t] + acc
    return {"o": out}


def _chunk_scan_spec(fixed_last_row: bool) -> KernelSpec:
    return KernelSpec(
        "chunk_scan_fixed_last_row" if fixed_last_row else "chunk_scan",
        call=lambda x: chunk_scan(x, fixed_last_row=fixed_last_row), reference=_chunk_scan_reference,
        # a running sum's error scales with its terms, not its result (the large pattern cancels): calibrated
        same_precision=_chunk_scan_fp32,
        tensors=(Tensor("x", ("B", "T"), dtype="float32"), Tensor("o", ("B", "T"), dtype="float32", role="output")),
        tiles={"T": SCAN_CHUNK}, loop_dim="T")


CORRECT = {"layer_norm": _layer_norm_spec(False), "row_max": _row_max_spec(False), "chunk_scan": _chunk_scan_spec(False)}
MUTANTS = {"layer_norm": _layer_norm_spec(True), "row_max": _row_max_spec(True), "chunk_scan": _chunk_scan_spec(True)}


def _default_cases(spec: KernelSpec) -> list[tuple[object, str]]:
    """The (shape, value pattern) cases the plugin generates for a test taking ``shape`` and ``values``."""
    return _values.pair(spec, list(_shapes.generate(spec)))


@pytest.mark.parametrize("name", sorted(CORRECT))
def test_the_correct_kernel_passes_every_default_case(pipecheck, name):
    spec = CORRECT[name]
    for shape, pattern in _default_cases(spec):
        pipecheck.check_kernel(spec, shape, values=pattern)


@pytest.mark.pipecheck(expect_failures=True)
@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_the_mutant_is_caught_by_the_default_cases(pipecheck, name):
    spec = MUTANTS[name]
    caught = []
    for shape, pattern in _default_cases(spec):
        try:
            pipecheck.check_kernel(spec, shape, values=pattern)
        except PipecheckFailure:
            caught.append(f"{shape}-values={pattern}")
    assert caught, f"no default case caught the mutant {spec.name}"
    print(f"{spec.name}: caught at {len(caught)} of {len(_default_cases(spec))} default cases: {', '.join(caught)}")
