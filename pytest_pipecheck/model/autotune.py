"""Check every config of a ``triton.autotune`` kernel, one at a time, with the autotuner's hooks.

An autotuned kernel runs whichever config won the benchmark on the machine at hand, so a bug present in
one config only (a block size whose last tile is mishandled, a split-K config that forgets to zero its
output) shows on some GPUs and not others. pipecheck checks each config on its own::

    from pytest_pipecheck.model import autotune

    autotune.configs(matmul_kernel)           # [AutotuneConfig('BLOCK_M64-BLOCK_N32-w4-s3'), ...]
    with autotune.pinned(matmul_kernel, "BLOCK_M64-BLOCK_N32-w4-s3"):
        c = my_matmul(a, b)                   # the wrapper launches matmul_kernel[grid](...) as usual

In a spec, ``KernelSpec(autotune=matmul_kernel)`` (optionally ``configs=`` naming a subset) and a test
that takes a ``config`` argument: the plugin parametrizes it with the ids, and
``pipecheck.check_kernel(SPEC, shape, config=config)`` runs every check with that config pinned; its
verdicts carry the kernel name ``spec[config id]``.

What a pinned launch does, in the order the Autotuner does it on the first call of a tuning key when
that config wins (the only call that runs every hook):

1. ``early_config_prune`` (from ``prune_configs_by``) is asked with the launch's arguments; a config it
   removes is never run by Triton at these arguments, so the launch raises :class:`ConfigPruned`
   (the check reports it as a failure naming the config; leave such configs out with ``configs=``, or
   use shapes where it is kept). ``perf_model``/``top_k`` only rank configs and are not applied: a
   config ranked out on one GPU is the winner on another.
2. when the Autotuner would benchmark (more than one config survives pruning), one benchmark launch:
   the config's ``pre_hook``, the Autotuner's pre-hook (``reset_to_zero`` zeroes those arguments and
   ``restore_value`` saves those, or the user's ``pre_hook=``), the kernel, then the post-hook
   (``restore_value`` puts the saved values back, or the user's ``post_hook=``). A kernel that
   accumulates into an output without ``reset_to_zero``, or updates an input in place without
   ``restore_value``, gets the wrong result here as it does on the GPU after tuning;
3. the Autotuner's pre-hook with ``reset_only=True`` (``reset_to_zero`` again), the config's
   ``pre_hook``, and the launch whose result is checked.

``pinned(..., benchmark=False)`` skips step 2 (a call whose tuning key is already cached); ``True``
forces it. Nothing is timed: under the Triton interpreter (the CPU tier) the Autotuner cannot
benchmark at all, so an autotuned kernel with several configs runs there only pinned.

Only Triton's public ``Autotuner`` attributes common to Triton 3.x are used (``configs``,
``arg_names``, ``fn.run``, ``pre_hook``, ``post_hook``, ``early_config_prune``, ``Config.all_kwargs``);
a kernel without them is refused with a :class:`~pytest_pipecheck.results.PipecheckError` saying what
is missing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..results import PipecheckError

__all__ = ["AutotuneConfig", "ConfigPruned", "Pin", "autotuner", "config_id", "configs", "pinned", "resolve",
           "spec_for"]

_REQUIRED = ("configs", "arg_names", "fn")
_pin_lock = threading.Lock()


class ConfigPruned(PipecheckError):
    """The pinned config is removed by the kernel's ``early_config_prune`` at these arguments."""


@dataclass(frozen=True)
class AutotuneConfig:
    """One config of an autotuned kernel: its readable ``id``, its position and Triton's ``Config``."""

    #: readable and unique among the kernel's configs, e.g. ``BLOCK_M64-BLOCK_N32-w4-s3``
    id: str
    #: position in the Autotuner's ``configs``
    index: int
    #: the ``triton.Config`` itself
    config: Any

    @property
    def kwargs(self) -> dict[str, Any]:
        """The config's meta-parameters (``{"BLOCK_M": 64, ...}``)."""
        return dict(getattr(self.config, "kwargs", {}) or {})

    @property
    def num_stages(self) -> int | None:
        return getattr(self.config, "num_stages", None)

    def __str__(self) -> str:
        return self.id


def _name(kernel: Any) -> str:
    fn = kernel
    for _ in range(8):
        name = getattr(fn, "__name__", None)
        if isinstance(name, str):
            return name
        fn = getattr(fn, "fn", None)
        if fn is None:
            break
    return type(kernel).__name__


def autotuner(kernel: Any) -> Any:
    """The ``triton.autotune`` Autotuner of ``kernel`` (itself, or under ``triton.heuristics`` wrappers).

    Raises PipecheckError when ``kernel`` is not autotuned or lacks an attribute pinning relies on.
    """
    obj = kernel
    for _ in range(8):
        if obj is None:
            break
        if type(obj).__name__ == "Autotuner" or (hasattr(obj, "configs") and hasattr(obj, "arg_names")
                                                and hasattr(obj, "fn")):
            missing = [a for a in _REQUIRED if not hasattr(obj, a)]
            if missing:
                raise PipecheckError(f"autotuned kernel {_name(kernel)!r}: this Triton's Autotuner has no "
                                     f"{', '.join(missing)}; pipecheck cannot pin its configs")
            return obj
        obj = getattr(obj, "fn", None)
    raise PipecheckError(f"{_name(kernel)!r} is not a triton.autotune kernel (no Autotuner with configs found "
                         f"in it, a {type(kernel).__name__})")


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v).replace("-", "m").replace(" ", "")


def config_id(config: Any) -> str:
    """A readable id of a ``triton.Config``: its meta-parameters, then ``w``arps and ``s``tages
    (``BLOCK_M64-BLOCK_N32-w4-s3``), with ``c``tas and ``r``egisters when they are set."""
    parts = [f"{k}{_value(v)}" for k, v in (getattr(config, "kwargs", {}) or {}).items()]
    for attr, tag in (("num_warps", "w"), ("num_stages", "s")):
        if getattr(config, attr, None) is not None:
            parts.append(f"{tag}{getattr(config, attr)}")
    if getattr(config, "num_ctas", 1) not in (None, 1):
        parts.append(f"c{config.num_ctas}")
    if getattr(config, "maxnreg", None) is not None:
        parts.append(f"r{config.maxnreg}")
    return "-".join(parts) or "default"


def configs(kernel: Any, only: Sequence[str | int] | None = None) -> list[AutotuneConfig]:
    """The configs of an autotuned ``kernel`` with readable ids, in the Autotuner's order.

    ``only`` names a subset by id or index. Two configs that would read the same (they differ only in a
    ``pre_hook``) get ``#1``, ``#2``... appended. Raises PipecheckError for a kernel that is not autotuned
    or a name in ``only`` that is not one of its configs (the message lists them).
    """
    tuner = autotuner(kernel)
    raw = list(tuner.configs)
    ids = [config_id(c) for c in raw]
    out = []
    for i, (cid, cfg) in enumerate(zip(ids, raw, strict=True)):
        if ids.count(cid) > 1:
            cid = f"{cid}#{ids[:i].count(cid) + 1}"
        out.append(AutotuneConfig(cid, i, cfg))
    if only is None:
        return out
    picked: list[AutotuneConfig] = []
    for want in only:
        found = _find(out, want)
        if found is None:
            raise PipecheckError(f"autotuned kernel {_name(kernel)!r} has no config {want!r} (its configs: "
                                 f"{', '.join(c.id for c in out)})")
        if found not in picked:
            picked.append(found)
    if not picked:
        raise PipecheckError(f"autotuned kernel {_name(kernel)!r}: the subset of configs to check is empty")
    return picked


def _find(known: Sequence[AutotuneConfig], want: Any) -> AutotuneConfig | None:
    if isinstance(want, AutotuneConfig):
        want = want.id if want.config is None else want.config
    if isinstance(want, bool):
        return None
    if isinstance(want, int):
        return known[want] if 0 <= want < len(known) else None
    if isinstance(want, str):
        return next((c for c in known if c.id == want), None)
    return next((c for c in known if c.config is want), None)


def resolve(kernel: Any, config: Any) -> AutotuneConfig:
    """``config`` (an id, an index, an :class:`AutotuneConfig` or one of the kernel's ``triton.Config``)
    as the kernel's :class:`AutotuneConfig`; raises PipecheckError listing the configs when unknown."""
    known = configs(kernel)
    found = _find(known, config)
    if found is None:
        raise PipecheckError(f"autotuned kernel {_name(kernel)!r} has no config {config!r} (its configs: "
                             f"{', '.join(c.id for c in known)})")
    return found


@dataclass
class Pin:
    """What happened while a config was pinned: how many launches went through it."""

    kernel: str
    config: AutotuneConfig
    launches: int = 0


@contextlib.contextmanager
def pinned(kernel: Any, config: Any, *, benchmark: bool | None = None) -> Iterator[Pin]:
    """Inside this block every launch of the autotuned ``kernel`` runs ``config`` with the Autotuner's
    hooks, as described in the module docstring; no benchmark is timed.

    ``benchmark``: replay the one benchmark launch of a first call before the checked launch
    (``None``: when Triton would, i.e. when more than one config survives ``early_config_prune``).
    Yields a :class:`Pin` counting the launches (a check whose launcher never launched the kernel is
    not a check of the config). Raises PipecheckError for an unknown config or a kernel already pinned;
    a launch of a config that ``early_config_prune`` removes raises :class:`ConfigPruned`.
    """
    tuner = autotuner(kernel)
    chosen = resolve(tuner, config)
    name = _name(kernel)
    pin = Pin(name, chosen)
    cfg = chosen.config
    if not hasattr(cfg, "all_kwargs"):
        raise PipecheckError(f"autotuned kernel {name!r}: this Triton's Config has no all_kwargs(); "
                             "pipecheck cannot pin its configs")

    def run(*args: Any, **kwargs: Any) -> Any:
        nargs = dict(zip(tuner.arg_names, args, strict=False))
        tuner.nargs = nargs  # prune_configs and the hooks read it, as in Autotuner.run
        try:
            survivors = list(tuner.configs)
            prune = getattr(tuner, "early_config_prune", None)
            if prune is not None and len(survivors) > 1:
                survivors = list(prune(survivors, nargs, **kwargs))
                if not any(c is cfg for c in survivors):
                    raise ConfigPruned(f"autotuned kernel {name!r}: config {chosen.id} is removed by its "
                                       "early_config_prune at these arguments, so Triton never runs it here "
                                       "(leave it out with configs=, or check it at shapes where it is kept)")
            bench = len(survivors) > 1 if benchmark is None else benchmark
            meta = cfg.all_kwargs()
            conflicts = sorted(set(kwargs) & set(getattr(cfg, "kwargs", {}) or {}))
            if conflicts:
                raise PipecheckError(f"autotuned kernel {name!r}: the launch passes {', '.join(conflicts)}, which "
                                     f"config {chosen.id} sets (Triton refuses this too)")
            full = {**nargs, **kwargs, **meta}
            pre = getattr(tuner, "pre_hook", None)
            post = getattr(tuner, "post_hook", None)
            if bench:
                if cfg.pre_hook is not None:
                    cfg.pre_hook(full)
                if pre is not None:
                    pre(full)
                try:
                    tuner.fn.run(*args, **kwargs, **meta)
                except Exception as exc:
                    if post is not None:
                        post(full, exception=exc)
                    raise
                if post is not None:
                    post(full, exception=None)
                if pre is not None:
                    pre(full, reset_only=True)
            if cfg.pre_hook is not None:
                cfg.pre_hook(full)
            pin.launches += 1
            return tuner.fn.run(*args, **kwargs, **meta)
        finally:
            tuner.nargs = None

    with _pin_lock:
        if "run" in vars(tuner):
            raise PipecheckError(f"autotuned kernel {name!r} is already pinned (or its run was replaced); "
                                 "pins do not nest")
        tuner.run = run  # an instance attribute: kernel[grid](...) calls self.run
    try:
        yield pin
    finally:
        with _pin_lock:
            del tuner.run


def spec_for(spec: Any, config: Any, on_pruned: Any = None) -> Any:
    """``spec`` checking one config of its ``autotune`` kernel: named ``spec[config id]`` (so every verdict
    and message names the config), with that config's tile sizes and ``num_stages``, and a launcher (or
    call) that runs inside :func:`pinned`.

    A launch during which the kernel was never launched raises PipecheckError: the launcher does not
    use ``spec.autotune``, and a check of it would say nothing about the config. ``on_pruned(exc)`` is
    called when the config is pruned at the launch's arguments (the fixture skips the test there);
    without it :class:`ConfigPruned` propagates. Raises PipecheckError naming the spec for a spec without
    ``autotune`` or a config not among those it checks.
    """
    import dataclasses
    import functools

    if spec.autotune is None:
        raise PipecheckError(f"spec {spec.name!r}: config={config!r} needs a spec with autotune= (the autotuned "
                             "kernel whose config to pin)")
    chosen = _find(spec.autotune_configs, config)
    if chosen is None:
        raise PipecheckError(f"spec {spec.name!r}: config {config!r} is not one of the configs it checks "
                             f"({', '.join(c.id for c in spec.autotune_configs)})")
    kernel = spec.autotune
    user = spec.launch if spec.launch is not None else spec.call
    what = "launch()" if spec.launch is not None else "call"
    name = f"{spec.name}[{chosen.id}]"

    @functools.wraps(user)
    def run_pinned(*args: Any, **kwargs: Any) -> Any:
        try:
            with pinned(kernel, chosen) as pin:
                out = user(*args, **kwargs)
        except ConfigPruned as exc:
            if on_pruned is None:
                raise
            on_pruned(exc)
            raise
        if pin.launches == 0:
            raise PipecheckError(f"spec {name!r}: its {what} never launched the autotuned kernel "
                                 f"{_name(kernel)!r} (autotune=), so config {chosen.id} was not checked")
        return out

    raw_tiles = {d: spec.tile_keys.get(d, sizes) for d, sizes in spec.tile_sizes.items()}
    changes: dict[str, Any] = {"name": name, "tiles": raw_tiles, "configs": (chosen.id,),
                               "launch" if spec.launch is not None else "call": run_pinned}
    if isinstance(chosen.num_stages, int):
        changes["stages"] = chosen.num_stages
    return dataclasses.replace(spec, **changes)


def _launch_once(fn: Any, quantiles: Any = None, **_ignored: Any) -> Any:
    fn()
    return [0.0, 0.0, 0.0] if quantiles else 0.0


def launch_each_config_once() -> bool:
    """Make every ``triton.autotune`` kernel of this process launch each config once instead of timing it.

    Called in a sanitizer child: there the Autotuner's benchmark (about a hundred timed launches per
    config, every one instrumented) is the whole cost of a test and judges nothing: a kernel with 48
    configs takes minutes under racecheck that way, seconds with one launch per config
    (docs/validation/2026-11-26-h200-2354.md). With one launch per config, every config still runs under the tool (more than the one
    config the timing would have kept), then the first config is kept for the test's own launches. The
    parent process, which judges correctness and timing, is untouched.

    Replaces the Autotuner's ``do_bench`` for every instance (the benchmarker it uses; a kernel's own
    ``do_bench=`` too) until :func:`restore_benchmark`. Returns False where Triton or that attribute is
    missing."""
    try:
        from triton.runtime.autotuner import Autotuner
    except Exception:  # no Triton (or a broken install): nothing is autotuned in this process
        return False
    if not hasattr(Autotuner, "do_bench"):
        return False
    if Autotuner.__dict__.get("do_bench") is _UNTIMED:
        return True  # in place already: whoever put it there takes it back
    _SAVED_BENCH.append({name: Autotuner.__dict__.get(name) for name in ("do_bench", "cache_results")})
    Autotuner.do_bench = _UNTIMED
    # A kernel that keeps its tuning results on disk (``cache_results=True``, or Triton's knob for all) would
    # write the first config as the winner of the benchmark that did not time anything, into the Triton cache
    # the parent and later runs read: while the launches are not timed, no result is kept (an instance's own
    # value goes to its __dict__, where it is found again once this is taken back)
    Autotuner.cache_results = _NO_DISK
    return True


def _keep_cache_results(self: Any, value: Any) -> None:
    self.__dict__["cache_results"] = value


#: what :func:`launch_each_config_once` puts in the place of the Autotuner's ``do_bench`` and ``cache_results``
_UNTIMED = property(lambda self: _launch_once)
_NO_DISK = property(lambda self: False, _keep_cache_results)


#: the Autotuner's own ``do_bench`` and ``cache_results`` (class attributes, or None) while
#: :func:`launch_each_config_once` replaces them
_SAVED_BENCH: list[dict[str, Any]] = []


def restore_benchmark() -> None:
    """Undo :func:`launch_each_config_once`: a session that ends in a process that goes on (pytest run in
    process, as pipecheck's own tests do) must not leave every later Autotuner launching once per config."""
    if not _SAVED_BENCH:
        return
    from triton.runtime.autotuner import Autotuner

    for name, saved in _SAVED_BENCH.pop().items():
        if saved is None:
            if name in Autotuner.__dict__:
                delattr(Autotuner, name)
        else:
            setattr(Autotuner, name, saved)


@contextlib.contextmanager
def each_config_launched_once() -> Iterator[bool]:
    """Inside, every ``triton.autotune`` kernel of this process launches each config once instead of timing it
    (:func:`launch_each_config_once`), and the tuning keys its Autotuner first meets inside are forgotten on the
    way out: a later launch at one of them benchmarks as the Autotuner always does. Yields whether the
    launches are untimed inside (False: no Triton, or one without ``do_bench``).

    For a check that launches at shapes of its own and judges what they compute, not how fast (the extent
    probe's one program and the coverage where a program's last chunk ends): each new shape is a new tuning
    key, and the benchmark of every config at each (about a hundred timed launches a config) was most of the
    check's time (fla-core's l2norm, 25 configs: 8.5 s on an H100). The config whose result is judged is then
    the first that runs, on every GPU, rather than whichever won a timing. Where the launches are untimed
    already (a sanitizer child), nothing changes."""
    try:
        from triton.runtime.autotuner import Autotuner
    except Exception:
        yield False
        return
    if Autotuner.__dict__.get("do_bench") is _UNTIMED:
        yield True  # untimed for the whole process already: whoever put that in place takes it back
        return
    run = Autotuner.__dict__.get("run")
    if run is None or not launch_each_config_once():
        yield False
        return
    met: list[tuple[Any, Any]] = []

    def tracking_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        cache = getattr(self, "cache", None)
        before = set(cache) if isinstance(cache, dict) else set()
        try:
            return run(self, *args, **kwargs)
        finally:
            if isinstance(cache, dict):
                met.extend((self, key) for key in set(cache) - before)

    tracking_run.__wrapped__ = run  # type: ignore[attr-defined]
    Autotuner.run = tracking_run
    try:
        yield True
    finally:
        if Autotuner.__dict__.get("run") is tracking_run:
            Autotuner.run = run
        restore_benchmark()
        for tuner, key in met:
            tuner.cache.pop(key, None)


# --------------------------------------------------------------------------- configs compiled side by side

#: the Autotuner's own ``prune_configs`` while :func:`compile_configs_side_by_side` wraps it
_SAVED_PRUNE: list[Any] = []
#: at most this many compiles at once in one process
MAX_COMPILE_THREADS = 8


def compile_configs_side_by_side(threads: int | None = None) -> bool:
    """Make every ``triton.autotune`` kernel of this process compile the configs it is about to benchmark
    side by side, on up to ``threads`` threads (default: the cores it may use, at most :data:`MAX_COMPILE_THREADS`),
    before its benchmark launches them one after another.

    The Autotuner compiles a config when the benchmark first launches it, so the configs of a new tuning key
    compile one at a time: fla-core's l2norm (25 configs) spent 49 s of a 51 s test compiling them, under
    racecheck and in a plain run alike. Triton compiles on threads (``AsyncCompileMode``: its passes and
    ptxas run without the GIL), and a compiled kernel is what the launch would have compiled, from the same
    arguments: nothing the checks see changes, neither which config wins nor what each launch computes.

    Wraps ``Autotuner.prune_configs``, which ``run`` calls once per new tuning key just before the benchmark
    (and ``warmup`` once), with the launch's arguments in ``nargs``. A config whose compile fails is left to
    the benchmark, which compiles it again and meets the error as the Autotuner always does (a config out of
    resources is timed as infinitely slow). A Triton without ``AsyncCompileMode``, or a process where one is
    already active, compiles as before. Until :func:`restore_compile`. Returns whether this call put it in place
    (False: not possible here, or in place already)."""
    try:
        from triton.runtime import _async_compile
        from triton.runtime.autotuner import Autotuner
    except Exception:  # no Triton, or one without asynchronous compiles
        return False
    original = Autotuner.__dict__.get("prune_configs")
    if original is None or not hasattr(_async_compile, "AsyncCompileMode"):
        return False
    if _SAVED_PRUNE:
        return False  # in place already: whoever put it there takes it back
    from ..device import usable_cores

    workers = max(1, threads if threads is not None else min(usable_cores(), MAX_COMPILE_THREADS))

    def prune_configs(self: Any, *args: Any, **kwargs: Any) -> Any:
        chosen = original(self, *args, **kwargs)
        launch = args[0] if args and isinstance(args[0], dict) else kwargs.get("kwargs")
        _compile_all(self, chosen, launch, workers, _async_compile)
        return chosen

    prune_configs.__wrapped__ = original  # type: ignore[attr-defined]
    _SAVED_PRUNE.append(original)
    Autotuner.prune_configs = prune_configs
    return True


def _compile_all(tuner: Any, chosen: Any, launch: Any, workers: int, async_compile: Any) -> None:
    """Compile each of ``chosen`` (the configs about to be benchmarked) for the launch's arguments, side by side.
    Never raises: whatever goes wrong here, the benchmark compiles what is missing itself."""
    try:
        nargs = getattr(tuner, "nargs", None)
        if not isinstance(nargs, dict) or not isinstance(launch, dict) or len(chosen) < 2 or workers < 2:
            return
        if async_compile.active_mode.get() is not None:
            return  # the caller compiles asynchronously already
        from concurrent.futures import ThreadPoolExecutor

        common = {**nargs, **{k: v for k, v in launch.items() if k != "warmup"}}
        common.setdefault("grid", (1,))
        with ThreadPoolExecutor(min(workers, len(chosen)), thread_name_prefix="pipecheck-compile") as pool, \
                async_compile.AsyncCompileMode(pool, ignore_errors=True):
            for config in chosen:
                try:
                    tuner.fn.run(warmup=True, **common, **config.all_kwargs())
                except Exception:
                    continue  # binding or compiling it failed here: the benchmark meets it again
    except Exception:
        return


def restore_compile() -> None:
    """Undo :func:`compile_configs_side_by_side` (a session that ends in a process that goes on)."""
    if not _SAVED_PRUNE:
        return
    from triton.runtime.autotuner import Autotuner

    Autotuner.prune_configs = _SAVED_PRUNE.pop()
