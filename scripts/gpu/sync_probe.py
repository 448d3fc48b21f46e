"""A pytest plugin for measuring how a sanitizer child waits for its GPU (``-p sync_probe``).

CUDA's default scheduling (``CU_CTX_SCHED_AUTO``) spins a CPU core in every synchronize while a process has
fewer contexts than the machine has cores. Under a sanitizer tool, whose kernels run for seconds, each child
that waits may burn a core that another process needed. With ``SYNC_PROBE_MODE=spin|yield|block`` in the
environment, this plugin sets that scheduling on every GPU's primary context (the one torch, CuPy and Triton
share) in each sanitizer child, before anything in it touches CUDA; with ``SYNC_PROBE_WHERE=all``, in every
process of the run, its xdist workers too. With the variable unset it does nothing. Each child appends one
line to ``SYNC_PROBE_LOG`` (when set): its pid, the mode, the driver's return codes and the flags read back.

Measured on 2x H200 (docs/validation/2026-11-27-h200x2-1234.md): blocking saved CPU seconds (933 to 683 under
-n 0) but not wall time, so pipecheck keeps CUDA's default.
"""

from __future__ import annotations

import ctypes
import os

import pytest

MODES = {"spin": 0x1, "yield": 0x2, "block": 0x4}


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    mode = os.environ.get("SYNC_PROBE_MODE")
    everywhere = os.environ.get("SYNC_PROBE_WHERE") == "all"  # the run and its xdist workers too
    if not mode or not (everywhere or config.getoption("pipecheck_child", default=None)):
        return
    cuda = ctypes.CDLL("libcuda.so.1")
    set_flags = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or cuda.cuDevicePrimaryCtxSetFlags
    codes = [cuda.cuInit(0)]
    count = ctypes.c_int(0)
    codes.append(cuda.cuDeviceGetCount(ctypes.byref(count)))
    read_back = []
    for i in range(count.value):
        dev = ctypes.c_int(0)
        codes.append(cuda.cuDeviceGet(ctypes.byref(dev), i))
        codes.append(set_flags(dev, ctypes.c_uint(MODES[mode])))
        flags, active = ctypes.c_uint(0), ctypes.c_int(0)
        codes.append(cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)))
        read_back.append((flags.value, active.value))
    log = os.environ.get("SYNC_PROBE_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {mode} codes={codes} flags,active={read_back}\n")
