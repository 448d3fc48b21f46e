"""pytest-pipecheck: a pytest plugin and regression harness for pipelined GPU kernels.

The public API is small and imported lazily, so ``import pytest_pipecheck`` never pulls in torch,
triton or cupy:

- :func:`occupancy` -- blocks per SM, limiters and shared-memory cliffs for any architecture
- :class:`KernelSpec`, :class:`Tensor` -- describe a kernel once (a launcher, or the wrapper as
  shipped with ``call=``); checks are driven from it
- :class:`Divisible`, :class:`Range` -- preconditions on a dimension
- :class:`Shape`, :func:`generate` -- one shape (``M129-N65-K200``); the ragged shapes generated for a spec
- :mod:`autotune` -- the configs of a ``triton.autotune`` kernel, and pinning one of them
- :class:`Pipecheck` -- the object the ``pipecheck`` fixture returns
- :class:`CheckResult`, :class:`Verdict` -- what every check records
- :class:`OutsideCheck` -- a team's own check, registered through the hook ``pytest_pipecheck_checks``
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    # the submodule itself: it is callable (``pytest_pipecheck.occupancy(arch, ...)``) and also
    # exposes ``Occupancy``, so the name means the same thing in every import order
    "occupancy": ("pytest_pipecheck.occupancy", ""),
    "Occupancy": ("pytest_pipecheck.occupancy", "Occupancy"),
    "KernelSpec": ("pytest_pipecheck.model.spec", "KernelSpec"),
    "Tensor": ("pytest_pipecheck.model.tensor", "Tensor"),
    "Divisible": ("pytest_pipecheck.model.preconditions", "Divisible"),
    "Range": ("pytest_pipecheck.model.preconditions", "Range"),
    "Shape": ("pytest_pipecheck.model.shape", "Shape"),
    "generate": ("pytest_pipecheck.model.shapes", "generate"),
    "autotune": ("pytest_pipecheck.model.autotune", ""),
    "Pipecheck": ("pytest_pipecheck.fixture", "Pipecheck"),
    "OutsideCheck": ("pytest_pipecheck.outside", "OutsideCheck"),
    "CheckResult": ("pytest_pipecheck.results", "CheckResult"),
    "Verdict": ("pytest_pipecheck.results", "Verdict"),
    "PipecheckFailure": ("pytest_pipecheck.results", "PipecheckFailure"),
    "PipecheckError": ("pytest_pipecheck.results", "PipecheckError"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'pytest_pipecheck' has no attribute {name!r}") from None
    import importlib

    mod = importlib.import_module(module)
    value = getattr(mod, attr) if attr else mod
    globals()[name] = value
    return value
