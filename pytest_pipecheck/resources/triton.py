"""Resources of Triton kernels: ahead of time for any target without a GPU, and live from the JIT.

Ahead of time, the kernel is compiled for ``GPUTarget("cuda", cc, 32)`` with the specialization the
JIT derives from the launch's real arguments. Triton's own binder does the deriving (pointer
alignment of 16 as ``tt.divisibility``, integers divisible by 16, integers equal to 1 as constants),
so the result is the kernel the JIT builds on that GPU: without those hints the software pipeliner
does not fire and the shared memory reads too low (an fp16 128x128x64 matmul read 32768 bytes at every
stage count instead of 65536 / 98304 / 131072 on sm_90, tests/unit/test_resources_triton.py). ``metadata.shared`` is the
dynamic shared memory; registers come from the cubin (``cuobjdump -res-usage``, shipped in Triton's
wheel). Results are cached for the run per (kernel, specialization, arch, options).

Works with the binder API of Triton 3.3 to 3.9 (``create_function_from_signature`` and
``JITFunction._pack_args``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..arch import arch_spec, base_arch
from ..results import PipecheckError
from .cubin import KernelResources, ResourceError, resources_from_cubin

__all__ = ["TritonResourceError", "live_resources", "triton_resources"]


class TritonResourceError(ResourceError):
    """A Triton kernel could not be compiled for a target, or was called with the wrong arguments."""


_CACHE: dict[Any, KernelResources] = {}
_JIT_CACHE: dict[Any, Any] = {}
_LOCK = threading.Lock()
_COMPILE_LOCK = threading.Lock()


def _python_fn(kernel: Any) -> Any:
    """The plain Python function behind a JITFunction, InterpretedFunction or Autotuner."""
    obj = kernel
    for _ in range(4):  # autotuner / heuristics wrap a JITFunction in .fn
        fn = getattr(obj, "fn", None)
        if fn is None:
            break
        obj = fn
    if not callable(obj) or not hasattr(obj, "__code__"):
        raise TritonResourceError(f"{kernel!r} is not a @triton.jit kernel")
    return obj


def _jit_function(kernel: Any) -> Any:
    """A compiling JITFunction for ``kernel``, even when TRITON_INTERPRET=1 made it an interpreter one."""
    from triton.runtime.jit import JITFunction

    if type(kernel) is JITFunction:
        return kernel
    fn = _python_fn(kernel)
    with _LOCK:
        jf = _JIT_CACHE.get(fn)
        if jf is None:
            jf = JITFunction(fn)
            _JIT_CACHE[fn] = jf
    return jf


def _cc(arch: str) -> int:
    spec = arch_spec(arch)
    return spec.major * 10 + spec.minor


def _spec_key(specialization: Any) -> str:
    return repr(specialization)


def triton_resources(kernel: Any, args: Sequence[Any] | Mapping[str, Any], *, arch: str, num_warps: int = 4,
                     num_stages: int = 3, **constexprs: Any) -> KernelResources:
    """Compile ``kernel`` ahead of time for ``arch`` from the launch's arguments; return its resources.

    ``args`` are the values the kernel is launched with (tensors, pointers' owners, ints, floats), as
    a sequence in parameter order or a mapping by name; ``constexprs`` are the remaining keyword
    arguments of the launch (``BLOCK_M=128``) and other compile options (``num_ctas``,
    ``maxnreg``...). No GPU is needed. The result has ``dynamic_smem`` = ``metadata.shared``,
    ``registers`` and ``spills`` from the cubin, ``num_warps``, ``num_stages``.

    Raises :class:`TritonResourceError` naming the kernel and target when the arguments do not fit
    the kernel or compilation fails, :class:`ArchError` for an unknown arch.
    """
    name = getattr(_python_fn(kernel), "__name__", "kernel")
    target_name = base_arch(arch)
    try:
        import triton  # noqa: F401
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource, make_backend
        from triton.compiler import compile as triton_compile
        from triton.runtime.jit import create_function_from_signature
    except ImportError as exc:
        raise TritonResourceError(f"Triton ahead-of-time compilation of {name!r} needs triton with "
                                  f"GPUTarget and the JIT binder ({exc})") from None
    jf = _jit_function(kernel)
    target = GPUTarget("cuda", _cc(target_name), 32)
    backend = make_backend(target)
    binder = create_function_from_signature(jf.signature, jf.params, backend)
    kwargs: dict[str, Any] = dict(constexprs)
    kwargs["num_warps"] = num_warps
    kwargs["num_stages"] = num_stages
    positional: list[Any] = []
    if isinstance(args, Mapping):
        kwargs.update(args)
    else:
        positional = list(args)
    try:
        bound_args, specialization, options = binder(*positional, **kwargs)
    except TypeError as exc:
        params = ", ".join(p.name for p in jf.params)
        raise TritonResourceError(f"arguments do not fit Triton kernel {name}({params}): {exc}") from None
    key = (jf.fn, target_name, _spec_key(specialization), tuple(sorted((k, repr(v)) for k, v in options.items())))
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    try:
        opts, signature, consts, attrs = jf._pack_args(backend, kwargs, bound_args, specialization, options)
    except KeyError as exc:
        raise TritonResourceError(f"Triton kernel {name}: {exc.args[0] if exc.args else exc}") from None
    src = ASTSource(jf, signature, consts, attrs)
    try:
        with _compiling(jf.fn.__globals__):
            compiled = triton_compile(src, target=target, options=opts.__dict__)
    except PipecheckError:
        raise
    except Exception as exc:  # compile errors come as many types; report them as one
        lines = [line for line in str(exc).strip().splitlines() if line.strip(" ^")]
        detail = f"{type(exc).__name__}: {' | '.join(lines[-3:])}"
        compiled = None
        if os.environ.get("TRITON_INTERPRET") == "1":
            # In a process that runs Triton's interpreter, state the interpreter left behind can still
            # break an in-process compile (seen when many interpreter tests ran first); a fresh
            # process without the interpreter is the reliable fallback.
            compiled = _compile_in_fresh_process(jf, name, positional, kwargs, target_name, num_warps,
                                                 num_stages, constexprs, detail)
        if compiled is None:
            raise TritonResourceError(f"Triton could not compile {name} for {target_name} "
                                      f"(num_warps={num_warps}, num_stages={num_stages}): {detail}") from None
    res = _from_compiled(compiled, name, target_name, num_warps, num_stages)
    with _LOCK:
        _CACHE[key] = res
    return res


def _compile_in_fresh_process(jf: Any, name: str, positional: list[Any], kwargs: dict[str, Any], arch: str,
                              num_warps: int, num_stages: int, constexprs: Mapping[str, Any],
                              first_error: str) -> Any:
    """Compile through :func:`pytest_pipecheck.inspect.triton_ir.aot_compile` (a child process)."""
    from ..inspect.triton_ir import aot_compile

    names = [p.name for p in jf.params]
    values = dict(zip(names, positional))
    values.update({k: v for k, v in kwargs.items() if k in names})
    for p in jf.params:  # a parameter the caller left at its default keeps that default
        if p.name not in values and getattr(p, "has_default", False):
            values[p.name] = p.default
    missing = [n for n in names if n not in values]
    if missing:
        raise TritonResourceError(f"Triton could not compile {name} for {arch}: {first_error}; "
                                  f"retrying in a fresh process needs every argument, missing {missing}")
    options = {k: v for k, v in constexprs.items() if k not in names}
    try:
        return aot_compile(jf, [values[n] for n in names], arch=arch, num_warps=num_warps,
                           num_stages=num_stages, **options)
    except PipecheckError as exc:
        raise TritonResourceError(f"Triton could not compile {name} for {arch} (num_warps={num_warps}, "
                                  f"num_stages={num_stages}): {first_error}; in a fresh process: {exc}") from None


@contextlib.contextmanager
def _compiling(fn_globals: dict[str, Any]) -> Iterator[None]:
    """Compile for real even when the run uses Triton's interpreter (TRITON_INTERPRET=1, the CPU tier).

    The interpreter flag makes the code generator take interpreter paths; it is switched off for the
    duration of the compile (Triton's knobs where they exist, else the environment variable) and
    restored afterwards. Compiles are serialized so the flag is never observed half-set. Functions
    that ``@triton.jit`` turned into interpreter functions when the flag was on at import (Triton's own
    ``tl.cdiv``, the user's helpers) are swapped for compiling ones for the same duration.
    """
    with _COMPILE_LOCK:
        knobs = None
        try:
            from triton import knobs as _knobs

            knobs = _knobs
        except ImportError:
            pass
        saved_env = os.environ.get("TRITON_INTERPRET")
        saved_knob = None
        if knobs is not None and hasattr(knobs, "runtime"):
            saved_knob = knobs.runtime.interpret
            knobs.runtime.interpret = False
        os.environ["TRITON_INTERPRET"] = "0"
        swapped = _swap_interpreted(fn_globals)
        try:
            yield
        finally:
            for namespace, name, value in swapped:
                namespace[name] = value
            if saved_env is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = saved_env
            if knobs is not None and hasattr(knobs, "runtime"):
                knobs.runtime.interpret = saved_knob


def _swap_interpreted(fn_globals: dict[str, Any]) -> list[tuple[dict[str, Any], str, Any]]:
    """Replace InterpretedFunction objects reachable from the kernel with JITFunctions; return undo list."""
    import sys

    from triton.runtime.jit import JITFunction

    namespaces: list[dict[str, Any]] = [fn_globals]
    for mod_name in ("triton.language", "triton.language.standard", "triton.language.math",
                     "triton.language.extra.cuda", "triton.language.extra.libdevice"):
        mod = sys.modules.get(mod_name)
        if mod is not None:
            namespaces.append(vars(mod))
    undo: list[tuple[dict[str, Any], str, Any]] = []
    seen: set[int] = set()
    while namespaces:
        ns = namespaces.pop()
        if id(ns) in seen:
            continue
        seen.add(id(ns))
        for name, value in list(ns.items()):
            if type(value).__name__ != "InterpretedFunction":
                continue
            inner = getattr(value, "fn", None)
            if inner is None:
                continue
            jit = _JIT_CACHE.get(inner)
            if jit is None:
                jit = JITFunction(inner)
                _JIT_CACHE[inner] = jit
            undo.append((ns, name, value))
            ns[name] = jit
            helper_globals = getattr(inner, "__globals__", None)
            if isinstance(helper_globals, dict):
                namespaces.append(helper_globals)
    return undo


def _from_compiled(compiled: Any, name: str, arch: str, num_warps: int, num_stages: int) -> KernelResources:
    md = compiled.metadata
    shared = int(_md(md, "shared", 0))
    kernel_name = str(_md(md, "name", name))
    cubin = compiled.asm.get("cubin") if hasattr(compiled, "asm") else None
    registers = 0
    stack = 0
    origin = "triton-aot"
    if cubin:
        found = resources_from_cubin(bytes(cubin), arch, origin=origin)
        entry = found.get(kernel_name) or (next(iter(found.values())) if len(found) == 1 else None)
        if entry is not None:
            registers = entry.registers
            stack = entry.stack_frame
    return KernelResources(
        name=name,
        mangled=kernel_name,
        arch=arch,
        registers=registers,
        static_smem=0,
        # ahead of time only the stack frame is known (spills are part of it); Triton reports
        # n_spills only for a kernel loaded on a GPU
        stack_frame=stack,
        barriers=None,
        dynamic_smem=shared,
        num_warps=int(_md(md, "num_warps", num_warps)),
        num_stages=num_stages,
        origin=origin,
        extra={"spills_known": False},
    )


def _md(md: Any, key: str, default: Any) -> Any:
    if isinstance(md, Mapping):
        return md.get(key, default)
    return getattr(md, key, default)


def live_resources(compiled: Any, arch: str | None = None) -> KernelResources:
    """Resources of a kernel the JIT compiled and loaded on this GPU (``kernel[grid](...)`` returns it).

    Reads ``metadata.shared``, ``n_regs``, ``n_spills`` and ``metadata.num_warps``. Raises
    :class:`TritonResourceError` when the object has not been loaded on a GPU (no ``n_regs``).
    """
    md = getattr(compiled, "metadata", None)
    if md is None:
        raise TritonResourceError(f"{compiled!r} is not a compiled Triton kernel")
    # n_regs exists once the module is loaded; touching .function loads it on Triton versions that
    # load lazily
    try:
        getattr(compiled, "function", None)
    except Exception as exc:  # loading needs a GPU
        raise TritonResourceError(f"compiled Triton kernel could not be loaded: {exc}") from None
    n_regs = getattr(compiled, "n_regs", None)
    if n_regs is None:
        raise TritonResourceError("compiled Triton kernel has no n_regs (not loaded on a GPU)")
    if arch is None:
        target = _md(md, "target", None)
        cc = getattr(target, "arch", None) if target is not None else None
        if cc is None:
            raise PipecheckError("give arch= for live Triton resources (metadata has no target)")
        arch = base_arch(str(cc))
    spills = int(getattr(compiled, "n_spills", 0) or 0)
    return KernelResources(
        name=str(_md(md, "name", "kernel")),
        mangled=str(_md(md, "name", "kernel")),
        arch=base_arch(arch),
        registers=int(n_regs),
        static_smem=0,
        spill_stores=spills,
        spill_loads=0,
        dynamic_smem=int(_md(md, "shared", 0)),
        num_warps=int(_md(md, "num_warps", 4)),
        num_stages=_md(md, "num_stages", None),
        origin="triton-live",
    )
