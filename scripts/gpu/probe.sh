#!/usr/bin/env bash
# Records what a GPU machine offers (versions, tools, APIs) so pipecheck's code can target it.
out=${1:-/tmp/probe}; mkdir -p "$out"
{
  date -u; nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version,uuid --format=csv,noheader,nounits
  which python3 nvcc compute-sanitizer cuobjdump nvdisasm ncu; python3 --version; nvcc --version | tail -1
  compute-sanitizer --version
  python3 -m pip list 2>/dev/null | grep -iE "^(torch|triton|cupy|cuda|pytest|setuptools|numpy|scipy|matplotlib|nvidia-cuda-nvrtc|hypothesis) "
  python3 - <<'PY'
import inspect, triton, torch
from triton.compiler import ASTSource
print("ASTSource sig:", inspect.signature(ASTSource.__init__))
import triton.runtime.jit as j
print("has specialize_impl:", hasattr(j, "specialize_impl"), "create_specialize_impl" in dir(j))
try:
    from triton.backends.compiler import AttrsDescriptor; print("AttrsDescriptor present")
except Exception as e: print("no AttrsDescriptor", e)
p = torch.cuda.get_device_properties(0)
print("props:", {k: getattr(p, k) for k in dir(p) if not k.startswith("_") and not callable(getattr(p, k))})
import cupy, os
print("cupy", cupy.__version__, cupy.cuda.runtime.runtimeGetVersion(), cupy.cuda.runtime.driverGetVersion())
base = os.path.dirname(cupy.__file__)
for root, dirs, files in os.walk(base):
    if "pipeline" in files and root.endswith("cuda"):
        print("cccl cuda/pipeline at", root)
a = cupy.cuda.runtime.getDeviceProperties(0)
print("cupy props keys:", sorted(a.keys()))
print({k: a[k] for k in ("sharedMemPerMultiprocessor","sharedMemPerBlockOptin","reservedSharedMemPerBlock","regsPerMultiprocessor","maxThreadsPerMultiProcessor","multiProcessorCount","l2CacheSize") if k in a})
PY
} > "$out/probe.txt" 2>&1
cat "$out/probe.txt"
