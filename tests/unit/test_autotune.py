"""Autotuned kernels: every config checked on its own, pinned, with the Autotuner's hooks.

The Triton kernels run in the interpreter on the CPU tier (the plugin sets TRITON_INTERPRET there),
where the Autotuner itself cannot benchmark: only pinned launches run.
"""

from __future__ import annotations

import re

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from pytest_pipecheck.model import autotune  # noqa: E402
from pytest_pipecheck.model.spec import KernelSpec  # noqa: E402
from pytest_pipecheck.model.tensor import Tensor  # noqa: E402
from pytest_pipecheck.results import PipecheckError, PipecheckFailure, Verdict  # noqa: E402

ROWS = 4  # rows per program


@triton.jit
def _scale_rows(x_ptr, y_ptr, M, N, sxm, sym, BLOCK_N: tl.constexpr):
    rm = tl.program_id(0) * 4 + tl.arange(0, 4)
    # the bug of one config: its "fast path" for BLOCK_N=32 rounds the trip count down, so the partial
    # last tile of a row is never written
    tiles = N // BLOCK_N if BLOCK_N == 32 else tl.cdiv(N, BLOCK_N)
    for t in range(0, tiles):
        rn = t * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        x = tl.load(x_ptr + rm[:, None] * sxm + rn[None, :], mask=mask, other=0.0)
        tl.store(y_ptr + rm[:, None] * sym + rn[None, :], x * 2, mask=mask)


CONFIGS = [triton.Config({"BLOCK_N": 8}, num_warps=4, num_stages=1),
           triton.Config({"BLOCK_N": 16}, num_warps=4, num_stages=2),
           triton.Config({"BLOCK_N": 32}, num_warps=2, num_stages=3)]
IDS = ["BLOCK_N8-w4-s1", "BLOCK_N16-w4-s2", "BLOCK_N32-w2-s3"]
scale_rows = triton.autotune(configs=CONFIGS, key=["N"])(_scale_rows)


def _launch_scale(arrays, dims):
    x, y = arrays["x"], arrays["y"]
    scale_rows[(triton.cdiv(dims["M"], ROWS),)](x, y, dims["M"], dims["N"], x.stride(0), y.stride(0))


def _scale_ref(arrays, dims):
    return {"y": arrays["x"].double() * 2}


def _scale_spec(launch=_launch_scale, kernel=scale_rows, **kw):
    return KernelSpec("scale_rows", launch, _scale_ref,
                      [Tensor("x", ("M", "N"), dtype="float32"), Tensor("y", ("M", "N"), dtype="float32", role="output")],
                      {"M": ROWS, "N": "BLOCK_N"}, "N", autotune=kernel, **kw)


# ----------------------------------------------------------------------------- listing and pinning


def test_configs_are_listed_with_readable_unique_ids():
    assert [c.id for c in autotune.configs(scale_rows)] == IDS
    assert [c.index for c in autotune.configs(scale_rows, only=[IDS[2], 0])] == [2, 0]
    twins = triton.autotune(configs=[triton.Config({"B": 8}), triton.Config({"B": 8}, pre_hook=print)],
                            key=[])(_scale_rows)
    assert [c.id for c in autotune.configs(twins)] == ["B8-w4-s3#1", "B8-w4-s3#2"]
    with pytest.raises(PipecheckError, match=r"'_scale_rows' has no config 'BLOCK_N64' \(its configs: "
                                             r"BLOCK_N8-w4-s1, BLOCK_N16-w4-s2, BLOCK_N32-w2-s3\)"):
        autotune.configs(scale_rows, only=["BLOCK_N64"])
    with pytest.raises(PipecheckError, match=r"'_scale_rows' is not a triton\.autotune kernel"):
        autotune.configs(_scale_rows)


def test_spec_takes_tile_sizes_and_stages_from_the_configs():
    spec = _scale_spec()
    assert spec.tile_sizes == {"M": (4,), "N": (8, 16, 32)} and spec.stages == 3
    assert [c.id for c in spec.autotune_configs] == IDS
    one = autotune.spec_for(spec, "BLOCK_N16-w4-s2")
    assert one.name == "scale_rows[BLOCK_N16-w4-s2]" and one.tile_sizes == {"M": (4,), "N": (16,)}
    assert one.stages == 2
    assert [c.id for c in _scale_spec(configs=[0, "BLOCK_N32-w2-s3"]).autotune_configs] == [IDS[0], IDS[2]]
    with pytest.raises(PipecheckError, match=r"spec 'scale_rows': .*has no config 'nope'"):
        _scale_spec(configs=["nope"])
    with pytest.raises(PipecheckError, match="tile size N='BLOCK_K': config BLOCK_N8-w4-s1 has no keyword"):
        KernelSpec("s", _launch_scale, _scale_ref, [Tensor("x", ("M", "N")), Tensor("y", ("M", "N"), role="output")],
                   {"N": "BLOCK_K"}, "N", autotune=scale_rows)
    with pytest.raises(PipecheckError, match="names a config keyword, but the spec has no autotune="):
        KernelSpec("s", _launch_scale, _scale_ref, [Tensor("x", ("M", "N")), Tensor("y", ("M", "N"), role="output")],
                   {"N": "BLOCK_N"}, "N")
    with pytest.raises(PipecheckError, match=r"config=.* needs a spec with autotune="):
        autotune.spec_for(KernelSpec("s", _launch_scale, _scale_ref,
                                     [Tensor("x", ("M", "N")), Tensor("y", ("M", "N"), role="output")],
                                     {"N": 8}, "N"), 0)


def test_a_bug_in_one_config_fails_that_config_only_and_names_it(pipecheck):
    spec = _scale_spec()
    for cid in IDS[:2]:
        results = pipecheck.check_kernel(spec, "M5-N40", config=cid)
        assert [(r.kernel, r.verdict) for r in results] == [(f"scale_rows[{cid}]", Verdict.PASS)] * 3
    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure) as info:
        pipecheck.check_coverage(spec, "M5-N40", config=IDS[2])
    # N=40: one full tile of 32, the partial 8 never written
    assert "scale_rows[BLOCK_N32-w2-s3] at M5-N40: coverage failed" in str(info.value)
    assert "40 of 200 (20.00%) elements never written" in str(info.value)
    assert pipecheck.results[-1].kernel == "scale_rows[BLOCK_N32-w2-s3]"
    # at a multiple of 32 the buggy config is right: a config-only bug needs the shapes of its block size
    assert pipecheck.check_coverage(spec, "M5-N64", config=IDS[2]).verdict is Verdict.PASS


def _cpu_handle():
    """A pipecheck handle of the CPU tier outside the plugin's bookkeeping (the ERROR it records stays here)."""
    import os

    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.device import TierInfo
    from pytest_pipecheck.fixture import Pipecheck

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the kernels of this module are compiled here (GPU tier): the Autotuner can benchmark")
    return Pipecheck("tests/unit/test_autotune.py::t", PipecheckConfig(), TierInfo("cpu", None, "unit test"), 1234)


@pytest.mark.parametrize("declared", [True, False], ids=["autotune_declared", "autotune_not_declared"])
def test_an_autotuned_kernel_checked_without_a_config_on_the_cpu_tier_says_to_pin_one(declared):
    """Unpinned, the Autotuner benchmarks its configs, which the interpreter cannot: Triton's bare
    "0 active drivers" on every shape. The check says which spec, why, and how to pin a config."""
    pc = _cpu_handle()
    spec = _scale_spec() if declared else KernelSpec(
        "scale_rows", _launch_scale, _scale_ref, [Tensor("x", ("M", "N"), dtype="float32"),
                                                  Tensor("y", ("M", "N"), dtype="float32", role="output")],
        {"M": ROWS, "N": 8}, "N")
    with pytest.raises(PipecheckError) as info:
        pc.check_kernel(spec, "M5-N40")
    msg = str(info.value)
    assert "Triton's Autotuner benchmarks its 3 configs on the first launch, which needs a GPU" in msg, msg
    assert "0 active drivers" in msg and "This is not a verdict on the kernel." in msg, msg
    if declared:
        assert re.search(r"spec 'scale_rows' is autotuned \(autotune=\S*_scale_rows\) and was checked without a "
                         r"config", msg), msg
        assert ("take a `config` argument in the test (one test per config: BLOCK_N8-w4-s1, BLOCK_N16-w4-s2, "
                "BLOCK_N32-w2-s3) and pass it on, pipecheck.check_kernel(scale_rows, shape, config=config), or "
                "pass config='BLOCK_N8-w4-s1'") in msg, msg
    else:
        assert re.search(r"launched the autotuned kernel \S*_scale_rows without a pinned config", msg), msg
        assert "KernelSpec(..., autotune=<the kernel>)" in msg, msg
    # an ERROR (the set-up, not the kernel), never a failure an expect_failures test would count as caught
    assert [(r.check, r.verdict) for r in pc.results] == [("coverage", Verdict.ERROR)]
    assert pc.results[0].summary == "inconclusive: an autotuned kernel without a config on the CPU tier"


def test_a_launcher_that_never_launches_the_kernel_checks_nothing(pipecheck):
    def torch_only(arrays, dims):
        arrays["y"].copy_(arrays["x"] * 2)

    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure, match=r"never launched the autotuned kernel "
                                                       r"'_scale_rows' .*so config BLOCK_N8-w4-s1 was not checked"):
        pipecheck.check_coverage(_scale_spec(launch=torch_only), "M5-N40", config=0)
    assert "run" not in vars(scale_rows)  # the pin is undone


def test_pins_do_not_nest_and_are_undone_after_an_error():
    with autotune.pinned(scale_rows, 0), pytest.raises(PipecheckError, match="already pinned"):
        with autotune.pinned(scale_rows, 1):
            pass
    with pytest.raises(RuntimeError), autotune.pinned(scale_rows, 0):
        raise RuntimeError
    assert "run" not in vars(scale_rows)


# ----------------------------------------------------------------------------- hooks


@triton.jit
def _splitk(a_ptr, b_ptr, c_ptr, M, N, K, sam, sbk, scm, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    """c[m, n] += a[m, k-range] . b[k-range, n] for one program per (m, n, split): split-K with atomics."""
    m = tl.program_id(0)
    n = tl.program_id(1)
    split = tl.program_id(2)
    acc = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in range(split * BLOCK_K, K, BLOCK_K * SPLIT_K):
        rk = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + m * sam + rk, mask=rk < K, other=0.0)
        b = tl.load(b_ptr + rk * sbk + n, mask=rk < K, other=0.0)
        acc += a * b
    tl.atomic_add(c_ptr + m * scm + n, tl.sum(acc, axis=0))


SPLITS = [triton.Config({"BLOCK_K": 8, "SPLIT_K": 1}), triton.Config({"BLOCK_K": 8, "SPLIT_K": 2}),
          triton.Config({"BLOCK_K": 16, "SPLIT_K": 3})]
splitk = triton.autotune(configs=SPLITS, key=["K"], reset_to_zero=["c_ptr"])(_splitk)
# the mutant: no reset_to_zero; its wrapper zeroes c once, so the benchmark run's sums stay in it
splitk_no_reset = triton.autotune(configs=SPLITS, key=["K"])(_splitk)


def _dev() -> str:
    """Where a kernel launched outside pipecheck's checks runs: Triton's interpreter on the CPU tier (the
    plugin sets TRITON_INTERPRET there), the GPU otherwise."""
    import os

    return "cpu" if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0") else "cuda"


def _splitk_launcher(kernel, zero_first):
    def launch(arrays, dims):
        a, b, c = arrays["a"], arrays["b"], arrays["c"]
        if zero_first:
            c.zero_()
        grid = lambda meta: (dims["M"], dims["N"], meta["SPLIT_K"])  # noqa: E731
        kernel[grid](a, b, c, dims["M"], dims["N"], dims["K"], a.stride(0), b.stride(0), c.stride(0))
    return launch


def _splitk_spec(kernel, zero_first):
    return KernelSpec("splitk", _splitk_launcher(kernel, zero_first), lambda a, d: {"c": a["a"].double() @ a["b"].double()},
                      [Tensor("a", ("M", "K"), dtype="float32"), Tensor("b", ("K", "N"), dtype="float32"),
                       Tensor("c", ("M", "N"), dtype="float32", role="output")],
                      {"K": "BLOCK_K"}, "K", autotune=kernel, deterministic=False)


def test_reset_to_zero_zeroes_the_poisoned_output_before_each_launch(pipecheck):
    spec = _splitk_spec(splitk, zero_first=False)
    for cfg in autotune.configs(splitk):
        results = pipecheck.check_kernel(spec, "M3-N2-K41", config=cfg.id)
        assert {r.check: r.verdict for r in results} == {"coverage": Verdict.PASS, "tile_probe": Verdict.PASS,
                                                         "determinism": Verdict.SKIP}


def test_a_split_k_without_reset_to_zero_keeps_the_benchmark_run_sums(pipecheck):
    spec = _splitk_spec(splitk_no_reset, zero_first=True)
    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure, match=r"splitk\[BLOCK_K8-SPLIT_K2-w4-s3\] "
                                                                               "at M3-N2-K41: coverage failed"):
        pipecheck.check_coverage(spec, "M3-N2-K41", config="BLOCK_K8-SPLIT_K2-w4-s3")
    # a call whose tuning key is cached does not benchmark: then the wrapper's own zeroing is enough
    a, b = torch.randn(3, 41, device=_dev()), torch.randn(41, 2, device=_dev())
    c = torch.full((3, 2), 7.0, device=_dev())
    with autotune.pinned(splitk_no_reset, 1, benchmark=False) as pin:
        _splitk_launcher(splitk_no_reset, zero_first=True)({"a": a, "b": b, "c": c}, {"M": 3, "N": 2, "K": 41})
    assert pin.launches == 1 and torch.allclose(c, a @ b, atol=1e-4)


@triton.jit
def _add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(x_ptr + offs, x + 1, mask=offs < n)


def test_hooks_run_in_the_autotuners_order_and_restore_value_undoes_the_benchmark_run():
    calls = []
    configs = [triton.Config({"BLOCK": 4}, pre_hook=lambda nargs: calls.append(("config", nargs["BLOCK"]))),
               triton.Config({"BLOCK": 8})]
    restored = triton.autotune(configs=configs, key=["n"], restore_value=["x_ptr"])(_add_one)
    x = torch.zeros(10, device=_dev())
    with autotune.pinned(restored, 0) as pin:
        restored[(3,)](x, 10)
    assert torch.equal(x.cpu(), torch.ones(10)) and pin.launches == 1 and calls == [("config", 4), ("config", 4)]

    forgot = triton.autotune(configs=configs, key=["n"])(_add_one)
    x = torch.zeros(10, device=_dev())
    with autotune.pinned(forgot, 0):
        forgot[(3,)](x, 10)
    assert torch.equal(x.cpu(), torch.full((10,), 2.0))  # the benchmark run's update was not undone

    seen = []
    user = triton.autotune(configs=configs, key=["n"], pre_hook=lambda a, reset_only=False: seen.append(("pre", reset_only)),
                           post_hook=lambda a, exception: seen.append(("post", exception)))(_add_one)
    with autotune.pinned(user, 1):
        user[(3,)](torch.zeros(10, device=_dev()), 10)
    assert seen == [("pre", False), ("post", None), ("pre", True)]


def test_a_config_pruned_at_these_arguments_is_not_run():
    def prune(configs, nargs, **kwargs):
        return [c for c in configs if c.kwargs["BLOCK_N"] <= nargs["N"]]

    pruned = triton.autotune(configs=CONFIGS, key=["N"], prune_configs_by={"early_config_prune": prune})(_scale_rows)
    x, y = torch.randn(4, 20, device=_dev()), torch.empty(4, 20, device=_dev())
    with pytest.raises(autotune.ConfigPruned, match="config BLOCK_N32-w2-s3 is removed by its early_config_prune"):
        with autotune.pinned(pruned, 2):
            pruned[(1,)](x, y, 4, 20, 20, 20)
    with autotune.pinned(pruned, 1) as pin:
        pruned[(1,)](x, y, 4, 20, 20, 20)
    assert pin.launches == 1 and torch.equal(y, x * 2)


def test_sanitizer_child_launches_each_config_once_instead_of_timing() -> None:
    """In a sanitizer child the Autotuner's benchmark becomes one launch per config: every config still
    runs (under the tool) and nothing is timed."""
    autotuner_mod = pytest.importorskip("triton.runtime.autotuner")
    from pytest_pipecheck.model import autotune

    Autotuner = autotuner_mod.Autotuner
    timed = Autotuner.__dict__["do_bench"]
    assert autotune.launch_each_config_once() is True
    try:
        calls: list[int] = []
        bench = Autotuner.__new__(Autotuner).do_bench
        assert bench(lambda: calls.append(1), quantiles=(0.5, 0.2, 0.8)) == [0.0, 0.0, 0.0]
        assert bench(lambda: calls.append(2)) == 0.0
        assert calls == [1, 2]  # each benchmark call launched its config exactly once
    finally:
        autotune.restore_benchmark()
    assert Autotuner.__dict__["do_bench"] is timed and "cache_results" not in Autotuner.__dict__


def test_plugin_switches_autotuning_to_one_launch_per_config_only_in_a_sanitizer_child(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through the child's real entry (``--pipecheck-child``, as the sanitizer runner starts it): the
    policy must be in force before the first test runs, in a child and only there."""
    pytest.importorskip("triton.runtime.autotuner")
    pytester.makepyfile(test_probe="""
        import inspect
        from triton.runtime.autotuner import Autotuner

        def test_probe():
            print("DO_BENCH", type(inspect.getattr_static(Autotuner, "do_bench")).__name__)
    """)
    monkeypatch.delenv("PIPECHECK_CHILD", raising=False)
    for child in ((), ("--pipecheck-child=racecheck",), ("--pipecheck-child=racecheck", "--pipecheck-child-scope=launch"),
                  ("--pipecheck", "--pipecheck-relay=relay.jsonl")):
        result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider", *child)
        out = result.stdout.str()
        assert ("DO_BENCH property" in out) is any("child" in a for a in child), (child, out)
