"""The fixture's check methods state their keywords and forward each one to the check they call."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from pytest_pipecheck.checks import inspect_check, occupancy_check
from pytest_pipecheck.config import PipecheckConfig
from pytest_pipecheck.device import TierInfo
from pytest_pipecheck.fixture import Pipecheck
from pytest_pipecheck.perf import gate


def _named(fn: Callable[..., Any], skip: int) -> dict[str, inspect.Parameter]:
    params = list(inspect.signature(fn).parameters.values())[skip:]
    return {p.name: p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


@pytest.mark.parametrize(("method", "check", "extra"), [
    (Pipecheck.check_occupancy, occupancy_check.check_occupancy,
     {"args", "options", "include_dirs", "defines", "num_warps", "num_stages"}),
    (Pipecheck.check_sass, inspect_check.check_sass, {"args", "options", "include_dirs", "defines"}),
    (Pipecheck.check_perf, gate.check_perf, set(gate._TIMING_KEYWORDS)),
])
def test_methods_name_every_keyword_of_their_check(method: Callable[..., Any], check: Callable[..., Any],
                                                    extra: set[str]) -> None:
    mine, theirs = _named(method, 1), _named(check, 1)  # without self / pc
    assert not any(p.kind is p.VAR_POSITIONAL for p in inspect.signature(method).parameters.values())
    assert set(mine) == set(theirs) | extra
    for name, p in theirs.items():
        assert mine[name].kind == p.kind, name
        if name not in extra and p.default is not p.empty:
            assert mine[name].default == p.default, name


@pytest.fixture
def pc() -> Pipecheck:
    return Pipecheck("t::x", PipecheckConfig(), TierInfo("cpu", None, "no GPU here"), 1)


def _capture(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def fake(pc: Pipecheck, *args: Any, **kwargs: Any) -> str:
        seen.update(kwargs, _args=args)
        return "result"

    monkeypatch.setattr(module, name, fake)
    return seen


def test_only_given_keywords_reach_the_check(pc: Pipecheck, monkeypatch: pytest.MonkeyPatch) -> None:
    """A keyword left out keeps the check's own default; a Triton constexpr is passed on as given."""
    seen = _capture(monkeypatch, occupancy_check, "check_occupancy")
    assert pc.check_occupancy("k", arch="sm_90", args=(1,), BLOCK=64) == "result"  # type: ignore[comparison-overlap]
    assert seen["args"] == (1,) and seen["BLOCK"] == 64 and seen["_args"] == ("k",)
    assert not {"options", "include_dirs", "defines", "num_warps", "num_stages"} & set(seen)

    seen = _capture(monkeypatch, gate, "check_perf")
    pc.check_perf(lambda: None, samples=[1.0], n_samples=5)
    assert seen["n_samples"] == 5 and not {"warmup_s", "max_time_s", "n_inputs", "reps", "settle_s"} & set(seen)

    seen = _capture(monkeypatch, inspect_check, "check_sass")
    pc.check_sass(b"cubin", expect="pipelined", defines={"S": 3})
    assert seen["expect"] == "pipelined" and seen["defines"] == {"S": 3} and "options" not in seen


def test_a_misspelt_keyword_is_refused_by_name(pc: Pipecheck) -> None:
    with pytest.raises(TypeError, match="n_sample"):
        pc.check_perf(lambda: None, n_sample=5)  # type: ignore[call-arg]
