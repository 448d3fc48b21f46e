"""Shared set-up for the examples: a stand-in for one gap of Triton's interpreter.

Compiled Triton passes a Python ``float`` kernel argument as an fp32 scalar, so kernels call
``eps.to(tl.float32)`` on it; Triton's interpreter (3.9 and earlier) passes the bare ``float`` and
the kernel raises ``AttributeError: 'float' object has no attribute 'to'`` on the CPU tier only.
Several library kernels do this (liger-kernel's RMSNorm, LayerNorm and SwiGLU). The interpreter
does not implement libdevice calls either (``libdevice.rsqrt`` returns nothing). Under
``TRITON_INTERPRET=1`` this conftest wraps float arguments as fp32 scalars, as the compiler does,
and routes the libdevice functions that ``tl.math`` also provides to it; FINDINGS.md has the
reproducers. Autotuned kernels run every config once instead of timing them (no driver on the
CPU). Nothing changes when the kernels are compiled for a GPU.
"""

from __future__ import annotations

import os

import pytest


def _wrap_float_scalars_in_the_interpreter() -> None:
    try:
        import numpy as np
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:  # the examples skip on their own when Triton is missing
        return
    original = interpreter._implicit_cvt
    if getattr(original, "_pipecheck_examples", False):
        return

    def implicit_cvt(arg):  # type: ignore[no-untyped-def]
        if isinstance(arg, float):
            return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
        return original(arg)

    implicit_cvt._pipecheck_examples = True  # type: ignore[attr-defined]
    interpreter._implicit_cvt = implicit_cvt


def _libdevice_through_tl_math_in_the_interpreter() -> None:
    """libdevice calls (``extern_elementwise``) are not implemented by the interpreter; the ones that
    ``tl.math`` also has (rsqrt, exp, log, sqrt, ...) are routed to it. Must run before a library
    imports ``from triton.language.extra.libdevice import rsqrt``."""
    try:
        import triton.language as tl
        from triton.language.extra import libdevice
    except ImportError:
        return
    modules = [libdevice]
    try:
        from triton.language.extra.cuda import libdevice as cuda_libdevice

        modules.append(cuda_libdevice)
    except ImportError:
        pass
    for module in modules:
        for name in dir(tl.math):
            if name.startswith("_") or not hasattr(module, name):
                continue

            def routed(*args, _name=name, _semantic=None, **kwargs):  # type: ignore[no-untyped-def]
                # looked up when called: the interpreter patches tl.math while a kernel runs
                return getattr(tl.math, _name)(*args, **kwargs)

            setattr(module, name, routed)


def _autotune_without_a_driver_in_the_interpreter() -> None:
    """``triton.autotune`` with several configs times them with the GPU driver's ``do_bench``, which
    does not exist on the CPU tier. In the interpreter every config is run once (so each one still
    executes) and the first is kept; timings mean nothing there."""
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return
    if getattr(Autotuner, "_pipecheck_examples", False):
        return

    def run_once(fn, quantiles=None, **kwargs):  # type: ignore[no-untyped-def]
        fn()
        return [0.0, 0.0, 0.0] if quantiles else 0.0

    Autotuner.do_bench = property(lambda self: run_once)  # type: ignore[assignment,method-assign]
    Autotuner._pipecheck_examples = True  # type: ignore[attr-defined]


@pytest.hookimpl(trylast=True)  # after the plugin has chosen the tier (it sets TRITON_INTERPRET on the CPU)
def pytest_configure(config) -> None:  # type: ignore[no-untyped-def]
    if os.environ.get("TRITON_INTERPRET") == "1":
        _wrap_float_scalars_in_the_interpreter()
        _libdevice_through_tl_math_in_the_interpreter()
        _autotune_without_a_driver_in_the_interpreter()
