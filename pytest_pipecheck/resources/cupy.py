"""Resources of CuPy ``RawKernel`` / ``RawModule`` functions, read live from the driver (GPU only)."""

from __future__ import annotations

from typing import Any

from ..arch import base_arch
from .cubin import KernelResources, ResourceError

__all__ = ["cupy_resources"]


def cupy_resources(kernel: Any, *, arch: str | None = None, name: str | None = None) -> KernelResources:
    """Registers, static shared memory and local memory of a compiled CuPy ``RawKernel``.

    ``kernel.attributes`` compiles and loads the kernel, so this needs a GPU; ``arch`` defaults to the
    current device's. Raises :class:`ResourceError` when the object has no attributes or no GPU is
    usable.
    """
    try:
        attrs = kernel.attributes
    except AttributeError:
        raise ResourceError(f"{kernel!r} is not a CuPy RawKernel (no .attributes)") from None
    except Exception as exc:  # CUDA errors: no device, compile failure
        raise ResourceError(f"could not read CuPy kernel attributes: {type(exc).__name__}: {exc}") from None
    if arch is None:
        try:
            import cupy

            cc = cupy.cuda.Device().compute_capability  # "90"
        except Exception as exc:
            raise ResourceError(f"cannot tell the current GPU's architecture: {exc}") from None
        arch = f"sm_{cc}"
    kname = name or getattr(kernel, "name", None) or "kernel"
    return KernelResources(
        name=str(kname),
        mangled=str(kname),
        arch=base_arch(arch),
        registers=int(attrs.get("num_regs", 0)),
        static_smem=int(attrs.get("shared_size_bytes", 0)),
        stack_frame=int(attrs.get("local_size_bytes", 0)),
        const_bytes=int(attrs.get("const_size_bytes", 0)),
        origin="cupy-live",
        extra={"max_threads_per_block": attrs.get("max_threads_per_block"),
               "max_dynamic_shared_size_bytes": attrs.get("max_dynamic_shared_size_bytes")},
    )
