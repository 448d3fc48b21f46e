"""A small Gluon kernel for ConSan, with and without an ordering bug.

``overwrite_in_flight`` copies a 32x32 fp32 tile of ``src`` into shared memory with ``cp.async``,
then copies it again into the same buffer and stores the buffer to ``dst``. With ``RACE=False`` it
waits for the first copy before issuing the second; with ``RACE=True`` the second copy writes the
buffer while the first may still be writing it, which ConSan reports ("Accessing buffer with pending
access", a device assert). The result is the same tile either way, so only a race checker sees it.

Written for Triton 3.6 (``async_copy_global_to_shared``) and 3.9 (``async_load``; the old name raises
there): the copy is bound once below. :func:`compile_aot` compiles it for a GPU without one.
"""

from __future__ import annotations

from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy

_copy = getattr(async_copy, "async_load", None) or async_copy.async_copy_global_to_shared

TILE = 32


@gluon.jit
def overwrite_in_flight(src, dst, RACE: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1, 4], [8, 4], [4, 1], [1, 0])
    smem_layout: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0])
    rows = gl.arange(0, 32, layout=gl.SliceLayout(1, layout))[:, None]
    cols = gl.arange(0, 32, layout=gl.SliceLayout(0, layout))[None, :]
    offs = rows * 32 + cols
    buf = gl.allocate_shared_memory(gl.float32, [32, 32], smem_layout)
    _copy(buf, src + offs)
    async_copy.commit_group()
    if not RACE:
        async_copy.wait_group(0)
    _copy(buf, src + offs)  # with RACE: the first copy may still be writing buf
    async_copy.commit_group()
    async_copy.wait_group(0)
    gl.store(dst + offs, buf.load(layout))


def launch(src: Any, dst: Any, race: bool) -> None:
    """One program of 4 warps on CUDA tensors of TILE * TILE fp32 elements."""
    overwrite_in_flight[(1,)](src, dst, RACE=race, num_warps=4)


def compile_aot(race: bool, arch: int = 90, mode: str = "") -> Any:
    """Compile ahead of time for ``sm_{arch}`` with ``instrumentation_mode=mode``; Triton's CompiledKernel.

    Triton 3.6 runs the ConSan pass only when the knob (``TRITON_INSTRUMENTATION_MODE``, read at import)
    says so; 3.9 follows the option. Callers that want ConSan set both."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import compile as triton_compile
    from triton.experimental.gluon._runtime import GluonASTSource

    signature = {"src": "*fp32", "dst": "*fp32", "RACE": "constexpr"}
    attrs = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]}
    options: dict[str, Any] = {"num_warps": 4}
    if mode:
        options["instrumentation_mode"] = mode
    source = GluonASTSource(overwrite_in_flight, signature, {(2,): race}, attrs)
    return triton_compile(source, target=GPUTarget("cuda", arch, 32), options=options)
