"""Whether this process's CUDA context still works, asked without ever creating one.

An illegal or misaligned address, a launch failure or a device-side trap leaves a *sticky* error in the
process's CUDA context: every later CUDA call in that process fails with the same error. pipecheck asks
after every test phase (:mod:`.containment`) and after every test of a sanitizer child
(:mod:`.sanitizer.child_plugin`), through the frameworks the tests already imported.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["cupy_context", "probe_context"]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


#: words of the errors a dead CUDA context raises (torch's AcceleratorError/RuntimeError, CuPy's
#: CUDARuntimeError/CUDADriverError); any other exception from a probe is not taken as a fault
_CUDA_ERROR_WORDS = ("cuda", "illegal", "misaligned", "launch failure", "unspecified launch",
                     "device-side assert", "trap", "hardware exception", "ecc")


def _is_cuda_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an error CUDA raised, not one of a stand-in module (a test's fake ``torch``)."""
    name = type(exc).__name__
    if name in ("CUDARuntimeError", "CUDADriverError", "AcceleratorError"):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(word in text for word in _CUDA_ERROR_WORDS)


def _installed(module: Any) -> bool:
    """A framework really imported from disk (tests replace ``sys.modules['torch']`` with fakes)."""
    return isinstance(getattr(module, "__file__", None), str)


def cupy_context(cupy: Any) -> bool:
    """Whether this thread has a current CUDA context (made by CuPy, torch, Triton or anything else).
    False where CUDA was never initialized in this process (CUDA_ERROR_NOT_INITIALIZED: a sanitizer child
    imports CuPy itself, to turn its pools off, whatever the test uses); any other error is raised."""
    try:
        return bool(cupy.cuda.driver.ctxGetCurrent())
    except Exception as exc:
        if "NOT_INITIALIZED" in str(exc):
            return False
        raise


def probe_context() -> str | None:
    """The error a trivial CUDA operation raises in this process, or None when it succeeds.

    Only frameworks the tests already imported are asked, and only when they already created a CUDA
    context: the probe never initializes CUDA (the parent of a sanitizer child must not hold one it did
    not need). A sticky error (illegal address, launch failure, trap) makes every call fail, so one
    synchronize plus one tiny kernel and copy back tell a dead context from a live one. Only an error
    that CUDA raised counts: a test that swapped ``torch`` for a stand-in (an AttributeError from a fake
    ``torch.cuda``) has not faulted. A missed fault cannot pass anything: the later tests then fail on
    the same sticky error.
    """
    torch = sys.modules.get("torch")
    if torch is not None and _installed(torch):
        try:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
                probe = torch.ones(1, device="cuda") + 1
                if float(probe.item()) != 2.0:
                    return "torch: a one-element kernel returned a wrong value"
        except Exception as exc:
            if _is_cuda_error(exc):
                return "torch: " + _first_line(exc)
    cupy = sys.modules.get("cupy")
    if cupy is not None and _installed(cupy):
        try:
            if cupy_context(cupy):
                cupy.cuda.runtime.deviceSynchronize()
                if float((cupy.ones(1) + 1).get()[0]) != 2.0:
                    return "cupy: a one-element kernel returned a wrong value"
        except Exception as exc:
            if _is_cuda_error(exc):
                return "cupy: " + _first_line(exc)
    return None
