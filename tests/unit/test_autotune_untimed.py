"""``autotune.each_config_launched_once`` and the sanitizer child's policy: each config launched once, untimed.

A real ``triton.autotune`` Autotuner whose kernel is a stand-in (it records each launch's config) runs its own
``run``: inside the context every config is launched once instead of timed, the first is the one kept, the tuning
keys first met inside are forgotten on the way out (a later launch there benchmarks again), and nothing is kept on
disk for a kernel that asks for it (``cache_results``): the winner of a benchmark that timed nothing must never
reach the Triton cache that later runs read.
"""

from __future__ import annotations

from typing import Any

import pytest

triton = pytest.importorskip("triton")

from triton.runtime.autotuner import Autotuner  # noqa: E402

from pytest_pipecheck.model import autotune  # noqa: E402

# the session of the CPU job times nothing with Triton; the GPU tier's sanitizer children untime the Autotuner for
# the whole process, where these would see it untimed already
pytestmark = pytest.mark.cpu_only


class StandIn:
    """What the Autotuner launches: records the config of each launch."""

    def __init__(self) -> None:
        self.launches: list[int] = []

    def run(self, *args: Any, grid: Any = None, BLOCK: int = 0, **kwargs: Any) -> str:
        self.launches.append(BLOCK)
        return f"ran BLOCK={BLOCK}"


def _tuner(cache_results: bool = False) -> tuple[Any, StandIn]:
    @triton.jit
    def kernel(x, n, BLOCK: triton.language.constexpr):
        pass

    tuner = triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64, 128)], key=["n"],
                            cache_results=cache_results)(kernel)
    tuner.cache_results = cache_results  # Triton turns it off under its interpreter; these tests say what is asked
    stand_in = StandIn()
    tuner.fn = stand_in
    return tuner, stand_in


def _timed(monkeypatch: pytest.MonkeyPatch, tuner: Any, fastest: int) -> list[int]:
    """The Autotuner's own benchmark, timing each config as ``fastest`` wins."""
    timed: list[int] = []

    def bench(kernel_call: Any, quantiles: Any) -> list[float]:
        before = len(tuner.fn.launches)
        kernel_call()
        block = tuner.fn.launches[before]
        timed.append(block)
        t = 1.0 if block == fastest else 2.0
        return [t, t, t]

    monkeypatch.setattr(tuner, "_do_bench", bench)
    return timed


def test_inside_each_config_runs_once_the_first_is_kept_and_the_key_is_forgotten_after(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tuner, kernel = _tuner()
    timed = _timed(monkeypatch, tuner, fastest=128)
    with autotune.each_config_launched_once() as untimed:
        assert untimed
        assert tuner.run("x", 100, grid=(1,)) == "ran BLOCK=32"  # the first config, kept
        assert kernel.launches == [32, 64, 128, 32] and timed == []  # one launch each, nothing timed
        assert tuner.run("x", 100, grid=(1,)) == "ran BLOCK=32"  # the key is known inside
        assert kernel.launches[4:] == [32]
    assert (100,) not in tuner.cache  # forgotten: the choice was no timing's
    assert "run" not in Autotuner.__dict__ or Autotuner.__dict__["run"].__name__ == "run"
    assert tuner.run("x", 100, grid=(1,)) == "ran BLOCK=128"  # benchmarked as always: the fastest wins
    assert timed == [32, 64, 128]


def test_a_key_tuned_before_keeps_its_winner(monkeypatch: pytest.MonkeyPatch) -> None:
    tuner, kernel = _tuner()
    _timed(monkeypatch, tuner, fastest=64)
    assert tuner.run("x", 7, grid=(1,)) == "ran BLOCK=64"
    with autotune.each_config_launched_once():
        assert tuner.run("x", 7, grid=(1,)) == "ran BLOCK=64"  # known before: no launch of every config
    assert kernel.launches == [32, 64, 128, 64, 64]
    assert tuner.cache[(7,)].kwargs == {"BLOCK": 64}


def test_untimed_launches_keep_nothing_on_disk_and_the_kernels_own_setting_comes_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    tuner, _ = _tuner(cache_results=True)
    kept: list[Any] = []
    monkeypatch.setattr(tuner, "check_disk_cache", lambda *a, **k: kept.append(a) or False)
    with autotune.each_config_launched_once():
        assert tuner.cache_results is False
        made_inside, _ = _tuner(cache_results=True)  # an Autotuner made while untimed
        assert made_inside.cache_results is False
        tuner.run("x", 3, grid=(1,))
    assert kept == []  # the untimed choice never reached the disk cache
    assert tuner.cache_results is True and made_inside.cache_results is True  # their own setting again
    assert "cache_results" not in Autotuner.__dict__


def test_the_sanitizer_childs_policy_keeps_nothing_on_disk_either(monkeypatch: pytest.MonkeyPatch) -> None:
    tuner, _ = _tuner(cache_results=True)
    kept: list[Any] = []
    monkeypatch.setattr(tuner, "check_disk_cache", lambda *a, **k: kept.append(a) or False)
    assert autotune.launch_each_config_once()
    try:
        assert tuner.run("x", 5, grid=(1,)) == "ran BLOCK=32" and kept == []
        with autotune.each_config_launched_once() as untimed:  # untimed already: left as it is
            assert untimed
        assert tuner.cache_results is False  # still the child's policy
    finally:
        autotune.restore_benchmark()
    assert tuner.cache_results is True
    assert (5,) in tuner.cache  # the child keeps its choice: it judges nothing by it
