"""What times a sample in compare mode: the device timer, or the test seam's fake one."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ... import envvars
from ..stats import Samples
from .errors import CompareError

if TYPE_CHECKING:  # pragma: no cover
    pass

#: the test seam: ``return`` makes both processes time a sample as the number the callable returns (us)
FAKE_TIMER_ENV = "PIPECHECK_TEST_FAKE_TIMER"


def fake_timer() -> bool:
    """Whether the test seam is on (``PIPECHECK_TEST_FAKE_TIMER=return``)."""
    return bool(envvars.value(FAKE_TIMER_ENV))


class FakeSampler:
    """The test seam's sampler: a sample is the number the callable returns (us). Touches no device."""

    def __init__(self, fn: Callable[..., Any], *, n_inputs: int | None = None, **_ignored: Any) -> None:
        self.fn = fn
        self.n_inputs = n_inputs
        self.calls = 0
        self.anchor_call = None
        self.anchor_def = None
        self.settle_s = 0.0

    def settle(self, seconds: float) -> int:
        self.settle_s += seconds
        return 0

    def arm(self) -> None:
        pass

    def one(self) -> tuple[float, float | None]:
        value = self.fn(self.calls % self.n_inputs) if self.n_inputs else self.fn()
        self.calls += 1
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise CompareError(f"{FAKE_TIMER_ENV}=return: the timed callable must return its time in us (a number "
                               f"> 0), it returned {value!r}")
        return float(value), None

    def meta(self, requested: int) -> dict[str, Any]:
        return {"mode": "fake", "timer": f"{FAKE_TIMER_ENV}=return", "requested_samples": requested,
                "settle_s": self.settle_s}

    def samples(self, times: list[float], anchor_times: list[float] | None, requested: int) -> Samples:
        return Samples(tuple(times), self.meta(requested))


def make_sampler(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """A :class:`.timing.Sampler` of ``fn``, or the seam's :class:`FakeSampler` when it is on."""
    if fake_timer():
        return FakeSampler(fn, **kwargs)
    from ..timing import Sampler

    return Sampler(fn, **kwargs)
