"""The default tolerance knows the accumulation: a correct fp32 scan passes at every generated shape, and a
scan or a reduction that drops its last loop tile stays thousands of times outside the tolerance.

The kernels are pure torch (fast on the CPU tier) and accumulate the way a sequential kernel does: one fp32
running sum per row, carried from loop tile to loop tile, each element the running sum after its own term.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck.model import tolerance as tol  # noqa: E402
from pytest_pipecheck.model.shapes import generate  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckFailure, Verdict  # noqa: E402

TILE_K = 64


def _scan(drop_last_chunk: bool = False):
    def launch(arrays, dims):
        x, y = arrays["x"], arrays["y"]
        acc = torch.zeros(x.shape[0], dtype=torch.float32, device=x.device)  # the GPU tier's arrays are on the device
        chunks = range(0, dims["K"], TILE_K)
        for k0 in chunks:
            last = k0 == chunks[-1]
            for k in range(k0, min(k0 + TILE_K, dims["K"])):
                if not (drop_last_chunk and last):
                    acc = acc + x[:, k]  # fp32 + fp32, rounded once per element
                y[:, k] = acc

    return launch


def _scan_reference(arrays, dims):
    return {"y": torch.cumsum(arrays["x"].double(), dim=1)}


def scan_spec(drop_last_chunk: bool = False) -> KernelSpec:
    return KernelSpec(
        name="scan_drops_last_chunk" if drop_last_chunk else "scan_fp32",
        launch=_scan(drop_last_chunk),
        reference=_scan_reference,
        tensors=[Tensor("x", ("M", "K"), "float32"), Tensor("y", ("M", "K"), "float32", role="output")],
        tiles={"M": 64, "K": TILE_K},
        loop_dim="K",
        stages=3,
    )


def test_a_correct_fp32_scan_passes_at_every_generated_medium_shape(pipecheck):
    """Under the flat fp32 default (atol 1e-5) elements where the running sum crosses zero failed at the
    longer shapes (K 447 to 959: errors of a few 1e-5); the atol now grows with the loop's length."""
    spec = scan_spec()
    shapes = generate(spec, "medium")
    assert max(s["K"] for s in shapes) > 900  # long enough that the flat default failed a correct scan
    failed = {}
    for shape in shapes:
        try:
            results = pipecheck.check_kernel(spec, shape)
        except PipecheckFailure as exc:
            failed[str(shape)] = str(exc).splitlines()[:3]
            continue
        assert [r.verdict for r in results] == [Verdict.PASS] * 3, results
    assert not failed, f"a correct fp32 scan failed at {len(failed)} of {len(shapes)} shapes: {failed}"
    longest = max(shapes, key=lambda s: s["K"])
    cov = next(r for r in pipecheck.results if r.check == "coverage" and r.details["shape"] == str(longest))
    assert f"for L = {longest['K']} additions along K" in cov.details["outputs"]["y"]["tolerance"]


@pytest.mark.pipecheck(expect_failures=["coverage", "tile_probe"])
def test_a_scan_that_drops_its_last_chunk_fails_far_outside_the_tolerance(pipecheck):
    spec = scan_spec(drop_last_chunk=True)
    shape = max(generate(spec, "medium"), key=lambda s: s["K"])  # the longest loop: the loosest tolerance
    with pytest.raises(PipecheckFailure) as info:
        pipecheck.check_kernel(spec, shape)
    message = str(info.value)
    assert "outside the tolerance" in message or "exceed the tolerance" in message, message
    assert f"K tile {spec.loop_trips(shape) - 1} of {spec.loop_trips(shape)}" in message, message
    assert "never reached the output" in message, message
    cov = next(r for r in pipecheck.results if r.check == "coverage")
    # the worst element is thousands of times past the tolerance grown for this length
    assert cov.details["outputs"]["y"]["of_tol"] > 1000, cov.details


@pytest.mark.parametrize("length", [256, 1024, 4096, 16384])
def test_a_dropped_loop_tile_stays_far_outside_the_grown_tolerance(length):
    """A dot product over ``length`` unit-normal products (a GEMM's K; fp32 output) whose last tile of 64
    is dropped: the tolerance grows like sqrt(length), the dropped tile moves each value by its own sum."""
    gen = torch.Generator().manual_seed(length)
    a = torch.randn(128, length, generator=gen, dtype=torch.float64)
    b = torch.randn(length, 64, generator=gen, dtype=torch.float64)
    ref = (a @ b).numpy()
    dropped = (a[:, : length - 64] @ b[: length - 64]).numpy()
    t = tol.accumulated(tol.default_tolerance("float32"), "float32", "K", length, ref)
    assert t.atol > tol.DEFAULTS["float32"][1] and "along K" in t.source
    cmp = tol.compare(dropped, ref, t)
    assert cmp.fraction > 0.95 and cmp.of_tol > 100, (cmp, t)


def _scan_spec(launch, name):
    exact_fp32 = lambda a, d: {"s": torch.cumsum(a["x"].double(), dim=1).float()}  # noqa: E731
    return KernelSpec(name, launch, lambda a, d: {"s": torch.cumsum(a["x"].double(), dim=1)},
                      [Tensor("x", ("M", "K"), dtype="float32"), Tensor("s", ("M", "K"), dtype="float32", role="output")],
                      {"K": TILE_K}, "K", same_precision=exact_fp32)


def test_a_calibrated_tolerance_is_never_tighter_than_the_accumulation_bound(pipecheck) -> None:
    """The same-precision implementation here is the exact sum rounded once (half a unit in the last place): k
    times its error is less than a correct scan summing in another order is off by. fla-core's chunked cumsum
    failed a tile probe that way on an H100, by 3 units in the last place; a scan off by 16 passes now, and the
    report says the tolerance was raised and why. A scan that drops its last chunk still fails."""
    def other_order(arrays, dims):  # a correct fp32 scan in another order: 16 units in the last place off
        arrays["s"].copy_((torch.cumsum(arrays["x"].double(), dim=1) * (1 + 16 * 2.0**-24)).float())

    good = _scan_spec(other_order, "scan_other_order")
    for check in (pipecheck.check_coverage, pipecheck.check_tile_probe):
        result = check(good, "M4-K831")
        assert result.verdict is Verdict.PASS, result.summary
    tolerance = pipecheck.results[0].details["outputs"]["s"]["tolerance"]
    assert "calibrated" in tolerance and "atol raised to 6 u sqrt(L) max|ref| for L = 831" in tolerance, tolerance
    raised = tol.at_least_accumulation(tol.calibrated("float32", 1e-7, 20.0, 2.0), "float32", "K", 831, [20.0])
    assert raised.atol == pytest.approx(tol.accumulation_atol("float32", 831, 20.0)) and not raised.default_atol
    bigger = tol.calibrated("float32", 1e-3, 20.0, 2.0)  # a calibration above the bound is kept as it is
    assert tol.at_least_accumulation(bigger, "float32", "K", 831, [20.0]) is bigger

    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure):
        pipecheck.check_coverage(_scan_spec(_scan(drop_last_chunk=True), "scan_drops_last_chunk"), "M4-K831")


def test_the_floor_does_not_let_a_scan_that_accumulates_in_half_precision_pass(pipecheck) -> None:
    """The accumulation bound assumes an fp32 accumulator: a scan that carries its running sum in float16 is
    off by far more, and still fails the calibrated tolerance with the floor under it."""
    def half_accumulator(arrays, dims):
        x, s = arrays["x"], arrays["s"]
        acc = torch.zeros(x.shape[0], dtype=torch.float16, device=x.device)
        for k in range(dims["K"]):
            acc = acc + x[:, k].half()
            s[:, k] = acc.float()

    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure, match="elements exceed the tolerance"):
        pipecheck.check_coverage(_scan_spec(half_accumulator, "scan_fp16_accumulator"), "M4-K831")
