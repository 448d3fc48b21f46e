"""A failing correctness check says why: the change that flips it to a pass comes first, as one ``cause:``
line, and the verdict stays a failure."""

from __future__ import annotations

from collections.abc import Callable

import pytest

torch = pytest.importorskip("torch")

from pytest_pipecheck import KernelSpec, Tensor  # noqa: E402
from pytest_pipecheck.config import PipecheckConfig  # noqa: E402
from pytest_pipecheck.device import TierInfo  # noqa: E402
from pytest_pipecheck.fixture import Pipecheck  # noqa: E402
from pytest_pipecheck.results import PipecheckFailure, Verdict  # noqa: E402

CPU = TierInfo("cpu", None, "unit test")


def _pc() -> Pipecheck:
    return Pipecheck("tests/unit/test_diagnose.py::t", PipecheckConfig(), CPU, 7)


def _double(arrays, dims):  # type: ignore[no-untyped-def]
    return {"y": arrays["x"].double() * 2}


def _fails(pc: Pipecheck, spec: KernelSpec, shape: str, **kwargs: object) -> str:
    with pytest.raises(PipecheckFailure) as info:
        pc.check_coverage(spec, shape, **kwargs)
    assert pc.results[-1].verdict is Verdict.FAIL  # the diagnosis changes no verdict
    return str(info.value)


def _row_sum(name: str, kernel: Callable[..., object], layout: str | None = None, **kwargs: object) -> KernelSpec:
    """``kernel`` as a row sum, ``s = x.sum(dim=1)`` for ``x`` (M, K) fp32 with K the loop in tiles of 8, both
    tensors of ``layout`` (any, unless given); ``kwargs`` go to the spec."""
    return KernelSpec(name, kernel, lambda a, d: {"s": a["x"].double().sum(dim=1)},
                      [Tensor("x", ("M", "K"), "float32", layout=layout),
                       Tensor("s", ("M",), "float32", role="output", layout=layout)],
                      tiles={"K": 8}, loop_dim="K", **kwargs)


def _causes(spec: KernelSpec) -> tuple[str, list[str]]:
    """The failure message of ``spec``'s coverage check at M3-K40 and its ``cause:`` lines."""
    text = _fails(_pc(), spec, "M3-K40")
    return text, [ln for ln in text.splitlines() if ln.startswith("  cause:")]


def test_a_kernel_that_takes_one_tensors_strides_for_another_is_named() -> None:
    def mixed(arrays, dims):  # type: ignore[no-untyped-def]
        x, y = arrays["x"], arrays["y"]
        # writes y through x's strides: right only where the two are laid out alike
        torch.as_strided(y, y.shape, x.stride(), y.storage_offset()).copy_(x * 2)

    spec = KernelSpec("mixed", mixed, _double, [Tensor("x", ("M", "N"), "float32"),
                                                Tensor("y", ("M", "N"), "float32", role="output")],
                      tiles={"M": 4, "N": 8}, loop_dim="N")
    text = _fails(_pc(), spec, "M5-N20")
    cause = text.splitlines()[1]
    assert cause.startswith("  cause: a stride mix-up: it passes when every tensor is contiguous"), text
    assert "'y' (padded)" in cause and "'x' (padded)" in cause, cause
    # padded alike (equal strides for the equal shapes) it passes: it takes one tensor's strides for another's
    assert "takes one tensor's strides for another's: it passes when every tensor is padded alike" in cause, cause
    assert _pc().results == []


def test_a_kernel_that_ignores_a_tensors_strides_is_told_from_one_that_borrows_them() -> None:
    def contiguous_x(arrays, dims):  # type: ignore[no-untyped-def]
        x, y = arrays["x"], arrays["y"]
        # reads x as if it were contiguous: wrong for any row padding, shared or not
        flat = torch.as_strided(x, (x.numel(),), (1,), x.storage_offset())
        y.copy_(flat.view(x.shape) * 2)

    spec = KernelSpec("contiguous_x", contiguous_x, _double, [Tensor("x", ("M", "N"), "float32"),
                                                              Tensor("y", ("M", "N"), "float32", role="output")],
                      tiles={"M": 4, "N": 8}, loop_dim="N")
    cause = _fails(_pc(), spec, "M5-N20").splitlines()[1]
    assert "it fails when any one of 'x' (padded) alone" in cause, cause
    assert "ignores those tensors' strides: it fails when every tensor is padded alike too" in cause, cause


def test_a_kernel_that_both_borrows_and_ignores_strides_is_not_said_to_only_ignore_them() -> None:
    """y written through x's strides (a borrow) and z read as if contiguous (ignored): padded alike it still
    fails, for z. The cause must not tell the user that x and y are ignored; it says one or more are."""
    def both(arrays, dims):  # type: ignore[no-untyped-def]
        x, y, z = arrays["x"], arrays["y"], arrays["z"]
        torch.as_strided(y, y.shape, x.stride(), y.storage_offset()).copy_(x * 2)
        flat = torch.as_strided(z, (z.numel(),), (1,), z.storage_offset()).view(z.shape)
        arrays["w"].copy_(flat * 3)

    spec = KernelSpec("both", both, lambda a, d: {"y": a["x"].double() * 2, "w": a["z"].double() * 3},
                      [Tensor("x", ("M", "N"), "float32"), Tensor("z", ("M", "N"), "float32"),
                       Tensor("y", ("M", "N"), "float32", role="output"),
                       Tensor("w", ("M", "N"), "float32", role="output")],
                      tiles={"M": 4, "N": 8}, loop_dim="N")
    cause = _fails(_pc(), spec, "M5-N20").splitlines()[1]
    assert "'x' (padded)" in cause and "'y' (padded)" in cause and "'z' (padded)" in cause, cause
    assert "ignores the strides of one or more of those tensors (some may also take another's)" in cause, cause


def test_tensors_of_different_shapes_are_not_told_apart_by_a_shared_padding() -> None:
    """Padded alike, tensors of different shapes may still differ in some stride, so a kernel that takes one's
    strides for the other's could fail that run too and be blamed for ignoring them: between tensors of
    different shapes the cause makes neither claim."""
    def borrowed_rows(arrays, dims):  # type: ignore[no-untyped-def]
        x, y = arrays["x"], arrays["y"]
        # y's rows through x's row stride: right where the two row strides are equal (both contiguous)
        torch.as_strided(y, y.shape, (x.stride(0), y.stride(1)), y.storage_offset()).copy_(x[: dims["K"]] * 2)

    spec = KernelSpec("borrowed_rows", borrowed_rows, lambda a, d: {"y": a["x"].double()[: d["K"]] * 2},
                      [Tensor("x", ("M", "N"), "float32"), Tensor("y", ("K", "N"), "float32", role="output")],
                      tiles={"M": 4, "K": 4, "N": 8}, loop_dim="N")
    cause = _fails(_pc(), spec, "M5-K3-N20").splitlines()[1]
    assert "a stride mix-up: it passes when every tensor is contiguous" in cause, cause
    assert "ignores those tensors' strides or takes another tensor's" in cause, cause
    assert "padded alike" not in cause, cause


def test_a_reduction_with_the_wrong_identity_is_blamed_on_the_values() -> None:
    def rowmax_zero_pad(arrays, dims):  # type: ignore[no-untyped-def]
        x = arrays["x"].float()
        pad = (-dims["N"]) % 8
        arrays["m"].copy_(torch.nn.functional.pad(x, (0, pad), value=0.0).amax(dim=1))

    spec = KernelSpec("rowmax0", rowmax_zero_pad, lambda a, d: {"m": a["x"].double().amax(dim=1)},
                      [Tensor("x", ("M", "N")), Tensor("m", ("M",), "float32", role="output")],
                      tiles={"N": 8}, loop_dim="N")
    text = _fails(_pc(), spec, "M3-N20", values="negative")
    assert text.splitlines()[1].startswith("  cause: the values: it fails under values=negative and passes under "
                                           "normal values"), text


def test_a_pipelining_bug_passes_with_one_stage() -> None:
    def staged(arrays, dims, stages=3):  # type: ignore[no-untyped-def]
        x = arrays["x"].double()
        tiles = -(-dims["K"] // 8)
        # once the stage ring fills (more tiles than stages), the last tile's buffer is never consumed
        used = tiles - 1 if 1 < stages < tiles else tiles
        arrays["s"].copy_(x[:, : used * 8].sum(dim=1).float())

    text, causes = _causes(_row_sum("staged", staged, stages=3))
    assert causes[0].startswith("  cause: the pipeline: it passes with one stage and fails with 3"), text
    assert any(c.startswith("  cause: the loop: it passes at M3-K8") for c in causes), causes


def test_a_bug_of_one_tile_is_not_blamed_on_the_pipeline() -> None:
    def off(arrays, dims):  # type: ignore[no-untyped-def]
        arrays["s"].copy_((arrays["x"].double().sum(dim=1) + 1).float())

    text, causes = _causes(_row_sum("off", off, "contiguous"))
    assert causes == ["  cause: one tile: it fails at M3-K8 too, where K fits one tile of 8: the arithmetic or "
                      "the masks of a tile, not the pipeline over tiles"], text


def test_a_correct_kernel_is_not_diagnosed_and_a_caught_mutant_is_not_either() -> None:
    def good(arrays, dims):  # type: ignore[no-untyped-def]
        arrays["y"].copy_(arrays["x"] * 2)

    spec = KernelSpec("good", good, _double, [Tensor("x", ("M", "N"), "float32"),
                                              Tensor("y", ("M", "N"), "float32", role="output")],
                      tiles={"M": 4, "N": 8}, loop_dim="N")
    pc = _pc()
    assert pc.check_coverage(spec, "M5-N20").verdict is Verdict.PASS
    assert "cause" not in pc.results[-1].details


def test_no_tensor_is_padded_against_its_declared_contract_to_tell_the_kinds_apart() -> None:
    """A tensor the spec declares contiguous is never padded: the run that would tell a borrow from an ignored
    stride is left out, and the cause makes neither claim."""
    def mixed(arrays, dims):  # type: ignore[no-untyped-def]
        x, y = arrays["x"], arrays["y"]
        torch.as_strided(y, y.shape, x.stride(), y.storage_offset()).copy_(x * 2)
        arrays["w"].copy_(x)

    spec = KernelSpec("mixed_with_contiguous_w", mixed, lambda a, d: {"y": a["x"].double() * 2, "w": a["x"].double()},
                      [Tensor("x", ("M", "N"), "float32"), Tensor("y", ("M", "N"), "float32", role="output"),
                       Tensor("w", ("M", "N"), "float32", role="output", layout="contiguous")],
                      tiles={"M": 4, "N": 8}, loop_dim="N")
    cause = _fails(_pc(), spec, "M5-N20").splitlines()[1]
    assert "'x' (padded)" in cause and "'y' (padded)" in cause, cause
    assert "ignores those tensors' strides or takes another tensor's" in cause and "padded alike" not in cause, cause


def test_a_dropped_last_tile_is_named_as_the_probe_names_it() -> None:
    """A kernel that drops its last K tile fails at one tile too (the only tile is the last): the cause follows
    the tile probe, which finds the last tile never reaching the output, instead of clearing the pipeline
    (mamba-ssm's chunk state with its last K tile dropped, on a first day: the two lines disagreed)."""
    def drop_last(arrays, dims):  # type: ignore[no-untyped-def]
        used = (-(-dims["K"] // 8) - 1) * 8
        arrays["s"].copy_(arrays["x"].double()[:, :used].sum(dim=1).float())

    _, causes = _causes(_row_sum("drop_last", drop_last, "contiguous"))
    assert len(causes) == 1 and "not the pipeline" not in causes[0], causes
    assert causes[0].startswith("  cause: one tile: it fails at M3-K8 too") and \
        "the tile probe finds K tile 4 of 5, the last" in causes[0] and "never reached the output" in causes[0], causes
