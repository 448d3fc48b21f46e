"""The ``pipecheck`` fixture: a test's entry point to every check.

It owns the test's resolved configuration, the tier (GPU or CPU, and why), a seed derived from
the run seed and the test's node id, and the list of check results that end up in the summary,
the JSON and the JUnit properties. The check methods are thin: each imports its module lazily,
so a test that only asks for occupancy never imports torch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import random
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from .config import PipecheckConfig
from .device import TierInfo
from .results import CheckResult, Verdict

if TYPE_CHECKING:  # pragma: no cover
    from .spec import KernelSpec

__all__ = ["Pipecheck", "derive_seed"]


def derive_seed(run_seed: int, nodeid: str) -> int:
    """A test's seed: stable for a given run seed and node id, independent of test order."""
    digest = hashlib.blake2b(f"{run_seed}:{nodeid}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


class Pipecheck:
    """Per-test handle returned by the ``pipecheck`` fixture."""

    def __init__(self, nodeid: str, config: PipecheckConfig, tier: TierInfo, run_seed: int) -> None:
        self.nodeid = nodeid
        self.config = config
        self.tier = tier
        self.run_seed = run_seed
        self.seed = derive_seed(run_seed, nodeid)
        self.random = random.Random(self.seed)
        self.results: list[CheckResult] = []
        # where relative paths in the configuration (baseline_dir) are resolved; the plugin sets
        # the pytest rootdir here
        self.rootdir: str = "."
        self._expecting = config.expect_failures

    # ------------------------------------------------------------------ basics
    @property
    def spec(self) -> Any:
        """The KernelSpec named by the test's ``pipecheck(spec=...)`` marker, or None."""
        return self.config.spec

    @property
    def has_gpu(self) -> bool:
        return self.tier.has_gpu

    @property
    def device(self) -> str:
        """``"cuda"`` on the GPU tier, ``"cpu"`` otherwise (the Triton interpreter tier)."""
        return "cuda" if self.tier.has_gpu else "cpu"

    @property
    def reproduce(self) -> str:
        """One command line that replays this test with the same seed."""
        return f"pytest '{self.nodeid}' --pipecheck-seed={self.run_seed}"

    def torch_generator(self, device: str | None = None, offset: int = 0) -> Any:
        """A ``torch.Generator`` seeded from this test's seed (plus ``offset``)."""
        import torch

        gen = torch.Generator(device=device or "cpu")
        gen.manual_seed((self.seed + offset) & (2**63 - 1))
        return gen

    def numpy_rng(self, offset: int = 0) -> Any:
        """A ``numpy.random.Generator`` seeded from this test's seed (plus ``offset``)."""
        import numpy as np

        return np.random.default_rng((self.seed + offset) & (2**63 - 1))

    def record(self, result: CheckResult) -> CheckResult:
        """Record a check's result for the summary and reports; returns it.

        Fills in the test's node id, the marker's kernel name and, on the GPU tier, which GPU
        ran it (under xdist each worker has its own).
        """
        changes: dict[str, Any] = {}
        if not result.nodeid:
            changes["nodeid"] = self.nodeid
        if result.kernel is None and self.config.kernel:
            changes["kernel"] = self.config.kernel
        if self._expecting and result.verdict == Verdict.FAIL and not result.expected:
            changes["expected"] = True
        dev = self.tier.device
        if dev is not None and "gpu" not in result.details:
            changes["details"] = {**result.details, "gpu": f"{dev.name} (index {dev.index}, {dev.uuid})"}
        if changes:
            result = dataclasses.replace(result, **changes)
        self.results.append(result)
        return result

    @contextlib.contextmanager
    def expecting_failures(self) -> Iterator[None]:
        """Inside this block, check failures are expected (a mutant being caught).

        They are still raised and recorded, but the summary counts them as *caught* rather than
        as failures of the code under test. The marker keyword ``expect_failures=True`` does the
        same for a whole test.
        """
        previous, self._expecting = self._expecting, True
        try:
            yield
        finally:
            self._expecting = previous

    def skip_check(self, check: str, reason: str, kernel: str | None = None) -> CheckResult:
        """Record that ``check`` did not run, and why; the test itself goes on."""
        return self.record(CheckResult(check, Verdict.SKIP, reason, kernel=kernel, details={"reason": reason}))

    def require_gpu(self, check: str = "gpu", kernel: str | None = None) -> None:
        """Skip the whole test, with the reason, when no CUDA device is usable."""
        __tracebackhide__ = True
        if not self.tier.has_gpu:
            reason = f"{check} needs a CUDA GPU: {self.tier.reason}"
            self.skip_check(check, reason, kernel=kernel)
            pytest.skip(reason)

    # ------------------------------------------------------------------ checks
    # Each delegates to its module; keyword arguments are documented there.

    def shapes(self, spec: KernelSpec, level: str | None = None, **kwargs: Any) -> list[Any]:
        """Ragged and boundary shapes for ``spec`` (see :func:`pytest_pipecheck.shapes.generate`)."""
        from . import shapes

        # a stages= override from the marker also moves the generated loop trip counts
        kwargs.setdefault("stages", self.config.stages)
        return shapes.generate(spec, level=level or self.config.shape_level, **kwargs)

    def check_coverage(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> CheckResult:
        """Poisoned outputs, guard bands and comparison against the reference at one shape."""
        __tracebackhide__ = True
        from .checks import coverage

        return coverage.check_coverage(self, spec, shape, **kwargs)

    def check_tile_probe(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> CheckResult:
        """Run once per loop tile with inputs zero elsewhere; each tile must count exactly once."""
        __tracebackhide__ = True
        from .checks import coverage

        return coverage.check_tile_probe(self, spec, shape, **kwargs)

    def check_determinism(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> CheckResult:
        """Repeated runs on the same inputs must be bitwise equal."""
        __tracebackhide__ = True
        from .checks import coverage

        return coverage.check_determinism(self, spec, shape, **kwargs)

    def check_kernel(self, spec: KernelSpec, shape: Any, **kwargs: Any) -> list[CheckResult]:
        """Every selected correctness check for ``spec`` at ``shape``."""
        __tracebackhide__ = True
        from .checks import coverage

        return coverage.check_all(self, spec, shape, **kwargs)

    def check_occupancy(self, *args: Any, **kwargs: Any) -> CheckResult:
        """Assert a kernel reaches the blocks/SM floor on every target architecture."""
        __tracebackhide__ = True
        from .checks import occupancy_check

        return occupancy_check.check_occupancy(self, *args, **kwargs)

    def check_sass(self, *args: Any, **kwargs: Any) -> CheckResult:
        """Assert what the compiled code contains (async copies, overlap, MMA kind, no spills)."""
        __tracebackhide__ = True
        from .checks import inspect_check

        return inspect_check.check_sass(self, *args, **kwargs)

    def check_perf(self, *args: Any, **kwargs: Any) -> CheckResult:
        """Time a kernel on the device and gate it against its stored baseline."""
        __tracebackhide__ = True
        from .perf import gate

        return gate.check_perf(self, *args, **kwargs)

    def check_stage_sweep(self, run: Callable[[int], Any], stages: Iterable[int], *, chosen: int | None = None,
                          max_loss: float = 0.05, kernel: str | None = None, flops: float | None = None,
                          load_only: Any = None, compute_only: Any = None, tiles: int | None = None,
                          resources: Any = None, arch: str | None = None, timer: Callable[..., Any] | None = None,
                          **timing: Any) -> CheckResult:
        """Time ``run(s)`` at each stage count; fail when ``chosen`` is more than ``max_loss`` slower than the best.

        See :func:`pytest_pipecheck.checks.stage_sweep.check_stage_sweep` for the prediction
        (``load_only``, ``compute_only``, ``tiles``), blocks/SM per stage count (``resources``,
        ``arch``), ``timer`` (replaces the device timing, for tests) and the timing keywords.
        """
        __tracebackhide__ = True
        from .checks import stage_sweep

        return stage_sweep.check_stage_sweep(self, run, stages, chosen=chosen, max_loss=max_loss, kernel=kernel,
                                             flops=flops, load_only=load_only, compute_only=compute_only,
                                             tiles=tiles, resources=resources, arch=arch, timer=timer, **timing)
