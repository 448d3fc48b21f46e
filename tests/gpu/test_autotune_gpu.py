"""Every config of a ``triton.autotune`` kernel on the GPU, as a library ships it: a split-K row sum whose
wrapper allocates its output with ``torch.empty`` and whose Autotuner zeroes it (``reset_to_zero``) before
the atomic adds. Each config is pinned on its own (:mod:`pytest_pipecheck.model.autotune`) with the Autotuner's
hooks, so the poisoned allocation is zeroed as on a real first call; a split-K bug present only in the
configs with more than one split is named by those configs. Skipped without a CUDA device."""

from __future__ import annotations

import pytest

from pytest_pipecheck import KernelSpec, Tensor, autotune

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

BLOCK_M = 16
CONFIGS = [triton.Config({"BLOCK_N": 32, "SPLIT": 1}, num_warps=4, num_stages=2),
           triton.Config({"BLOCK_N": 64, "SPLIT": 4}, num_warps=4, num_stages=3),
           triton.Config({"BLOCK_N": 128, "SPLIT": 2}, num_warps=8, num_stages=3)]
# at N=1100 and N=300 the tile count is not a multiple of either split (18 and 9, 5 and 3 tiles)
SHAPES = [{"M": 37, "N": 1100}, {"M": 20, "N": 300}]


@triton.jit
def _row_sum_split(x_ptr, y_ptr, M, N, sxm, sxn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   SPLIT: tl.constexpr, ROUND_DOWN: tl.constexpr):
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    tiles = tl.cdiv(N, BLOCK_N)
    if ROUND_DOWN:
        # the bug: whole rounds of SPLIT tiles only, so the last tiles % SPLIT tiles are never summed
        tiles = tiles // SPLIT * SPLIT
    acc = tl.zeros((BLOCK_M,), dtype=tl.float32)
    for t in range(tl.program_id(1), tiles, SPLIT):
        rn = t * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :] * sxn, mask=mask, other=0.0)
        acc += tl.sum(x.to(tl.float32), axis=1)
    tl.atomic_add(y_ptr + rm, acc, mask=rm < M)


def _autotuned():  # type: ignore[no-untyped-def]
    return triton.autotune(configs=CONFIGS, key=["N"], reset_to_zero=["y_ptr"])(_row_sum_split)


_correct_kernel = _autotuned()
_rounded_kernel = _autotuned()


def _op(kernel, round_down: bool):  # type: ignore[no-untyped-def]
    def row_sum(x):  # type: ignore[no-untyped-def]
        """As a library ships it: allocates its output and leaves zeroing it to the Autotuner's hook."""
        m, n = x.shape
        y = torch.empty((m,), dtype=torch.float32, device=x.device)
        kernel[lambda meta: (triton.cdiv(m, BLOCK_M), meta["SPLIT"])](
            x, y, m, n, x.stride(0), x.stride(1), BLOCK_M=BLOCK_M, ROUND_DOWN=round_down)
        return y
    return row_sum


def _spec(name: str, kernel, round_down: bool) -> KernelSpec:  # type: ignore[no-untyped-def]
    return KernelSpec(name, call=_op(kernel, round_down), autotune=kernel,
                      reference=lambda a, d: {"y": a["x"].double().sum(dim=1)},
                      tensors=[Tensor("x", ("M", "N"), dtype="float32"),
                               Tensor("y", ("M",), dtype="float32", role="output")],
                      tiles={"M": BLOCK_M, "N": "BLOCK_N"}, loop_dim="N",
                      deterministic=False)  # the splits' atomic adds land in any order


SPEC = _spec("row_sum_split", _correct_kernel, False)
ROUNDED = _spec("row_sum_split_rounded", _rounded_kernel, True)


@pytest.mark.pipecheck(spec=SPEC)
def test_every_config_passes_with_the_autotuners_hooks(pipecheck, config) -> None:  # type: ignore[no-untyped-def]
    """The output is poisoned by pipecheck and zeroed only by ``reset_to_zero``: a pinned launch that skipped
    the hook would sum onto NaN and fail."""
    if not pipecheck.has_gpu:
        pytest.skip(f"needs a CUDA GPU: {pipecheck.tier.reason}")
    for shape in SHAPES:
        results = pipecheck.check_kernel(SPEC, shape, config=config)
        assert results and all(r.verdict.value in ("pass", "skip") for r in results), [r.summary for r in results]
        assert all(f"[{config}]" in (r.kernel or "") for r in results), [r.kernel for r in results]


@pytest.mark.pipecheck(expect_failures=["coverage"])
def test_a_bug_in_the_split_configs_only_is_named_by_those_configs(pipecheck) -> None:  # type: ignore[no-untyped-def]
    if not pipecheck.has_gpu:
        pytest.skip(f"needs a CUDA GPU: {pipecheck.tier.reason}")
    from pytest_pipecheck.results import PipecheckFailure

    verdicts = {}
    for cfg in autotune.configs(_rounded_kernel):
        try:
            pipecheck.check_coverage(ROUNDED, SHAPES[0], config=cfg.id)
            verdicts[cfg.id] = "pass"
        except PipecheckFailure as exc:
            assert f"row_sum_split_rounded[{cfg.id}]" in str(exc), str(exc)
            verdicts[cfg.id] = "fail"
    if pipecheck.sanitizer_launch_only:
        return  # a launch-only sanitizer child judges nothing; the normal run asserts the verdicts
    assert verdicts == {"BLOCK_N32-SPLIT1-w4-s2": "pass", "BLOCK_N64-SPLIT4-w4-s3": "fail",
                        "BLOCK_N128-SPLIT2-w8-s3": "fail"}, verdicts


def test_the_configs_of_a_new_tuning_key_compile_side_by_side(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """On the GPU tier an autotuned kernel compiles the configs it is about to benchmark on several threads
    (``autotune.compile_configs_side_by_side``), then benchmarks them without compiling again, and its result
    is the one the Autotuner computes without it."""
    import threading

    import triton.compiler as compiler

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))  # every config really compiles
    threads: list[str] = []
    original = compiler.compile

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        threads.append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(compiler, "compile", recording)
    put = autotune.compile_configs_side_by_side(threads=3)  # False: this session put it in place already
    try:
        # a JITFunction of its own, whose binder (made at its first launch) takes the recording compile
        kernel = triton.autotune(configs=CONFIGS, key=["N"], reset_to_zero=["y_ptr"])(triton.jit(_row_sum_split.fn))
        x = torch.randn((37, 1100), device="cuda", dtype=torch.float32)
        y = _op(kernel, round_down=False)(x)
        torch.cuda.synchronize()
    finally:
        if put:
            autotune.restore_compile()
    assert len(threads) == len(CONFIGS), threads  # each config compiled once: the benchmark compiled none again
    assert all(name.startswith("pipecheck-compile") for name in threads), threads
    torch.testing.assert_close(y, x.sum(dim=1), rtol=1e-4, atol=1e-3)
