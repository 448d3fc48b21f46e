"""Kernel resources (registers, shared memory, spills) per architecture, from every backend.

- :mod:`.cubin`: CUDA C++ through nvcc or NVRTC (``compile_resources``, ``compile_cubin``,
  ``KernelResources``, ``CompileError``)
- :mod:`.triton`: Triton, ahead of time for any target (``triton_resources``) and live (``live_resources``)
- :mod:`.cupy`: CuPy RawKernel attributes, live (``cupy_resources``)

Submodules are imported on use; this package imports nothing heavy.
"""
