"""Describe a kernel once; every correctness check is driven from the description.

The API (stable; other modules and kernel packages are written against it)::

    KernelSpec(
        name,                # shown in messages and the summary, e.g. "triton_gemm"
        launch,              # launch(arrays, dims) -> None: writes the outputs in place
        reference,           # reference(arrays, dims) -> {output name: array}, higher precision
        tensors,             # sequence of Tensor(...): inputs and outputs with named dims
        tiles,               # {"M": 128, "N": 128, "K": 64}: tile size per dimension, or several
                             # sizes of one dimension: {"N": (64, 128)} (BLOCK_M and BLOCK_N on it)
        loop_dim,            # the pipelined loop dimension, e.g. "K"
        stages=1,            # pipeline depth (num_stages); drives the generated trip counts
        backend="torch",     # "torch" (CPU or CUDA tensors) or "cupy"
        preconditions=(),    # Divisible("K", 8), Range("M", 1, 2**20), or callables(dims) -> str | None
        deterministic=True,  # False: repeated runs may differ bitwise (atomics, split-K)
        flops=None,          # flops(dims) -> float, for perf reports
        bytes_moved=None,    # bytes_moved(dims) -> float, for perf reports
        description="",
        rtol=None, atol=None,      # tolerance overrides (float, or {output name: float})
        same_precision=None,       # same_precision(arrays, dims) -> outputs in the output dtype:
                                   # enables the calibrated tolerance mode
        calibration_k=2.0,         # calibrated mode: error <= k * same-precision error
        values=None,               # value patterns generated for it (default: pytest_pipecheck.model.values.DEFAULT)
        blocks_per_program=None,   # {"K": 4}: one program covers 4 tiles of K (drives the shapes)
        autotune=None,             # a triton.autotune kernel: tests taking `config` check each config
        configs=None,              # a subset of its configs, by id or index (default: all)
        constants=None,            # {"group": 128}: named integers the dimension expressions may use
    )

    Tensor(name, dims, dtype="float16", role="input", init="randn",
           layout=None)        # "contiguous", "padded", ... or a tuple: the first is the base
                               # layout, the others are generated variants (pytest_pipecheck.model.layouts)

The wrapper form checks the Python entry point as shipped instead of a launcher::

    KernelSpec(name, call=my_op, reference=..., tensors=..., tiles=..., loop_dim=...,
               returns=("y",))     # names of the call's return values (default: the outputs, in order)

``call(*inputs)`` gets the inputs and inouts positionally, in declared order, and returns its outputs
(an inout is updated in place; an output of the wrapper form cannot take ``init="zeros"``); the
allocations it makes through torch (``torch.empty``, ``empty_like``, ...) are poisoned and guarded
(:mod:`pytest_pipecheck.checks.wrapper` says exactly what is and is not intercepted).

* ``rtol``/``atol`` may also be callables of the shape, ``rtol=lambda dims: 1e-3 * (dims["K"] // 256 + 1)``,
  returning a float or ``{output name: float}`` (split-K rounds once per split). Without them the
  default atol grows with the length of the loop dimension, as an fp32 accumulator's rounding error
  does (:mod:`pytest_pipecheck.model.tolerance`); one that is given is used as given.
* ``tiles`` for a kernel whose block is ``triton.next_power_of_2(N)`` (one program per row, whatever
  N is): there is no fixed tile. Declare a small power of two, ``tiles={"M": 1, "N": 32}``: the
  generated N (17, 32, 63, 64, 95, 159, ...) fall just under, on and between powers of two, where the
  block fits exactly or masks up to half of itself, and the tile probe steps through the row by 32.
* ``launch`` gets ``arrays`` (name -> torch tensor on the test's device, or CuPy array when
  ``backend="cupy"``) and ``dims`` (name -> int). Arrays may be *strided views* into larger guarded
  allocations: a launcher must take strides from the arrays, never assume contiguity. A launcher
  that accepts a ``stages`` keyword lets the ``stages=`` marker/config override reach the kernel.
* ``reference`` returns every output, computed from the inputs in higher precision (float32 or
  float64 for 16-bit outputs), with the output's shape. It may return torch, CuPy or NumPy arrays.

Bad specs raise :class:`~pytest_pipecheck.results.PipecheckError` with a one-line message that
names the spec (``spec 'triton_gemm': loop_dim 'Q' is not a dimension of any input (a, b)``).
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..results import PipecheckError
from . import autotune, dimexpr, names, tolerance
from .preconditions import Divisible, Precondition, Range, _check_precondition, _Implied
from .shape import Shape, as_shape
from .tensor import DTYPES, INITS, OUTPUT_INITS, PROBES, ROLES, Tensor, normalize_dtype

__all__ = [
    "BACKENDS",
    "DTYPES",
    "Divisible",
    "KernelSpec",
    "Precondition",
    "Range",
    "Shape",
    "Tensor",
]

BACKENDS = ("torch", "cupy")


def _expr(text: str) -> Any:
    """The parsed dimension ``text`` (:class:`pytest_pipecheck.model.dimexpr.DimExpr`); raises ValueError."""
    return dimexpr.parse(text)


def _shape_text(shape: Mapping[str, int]) -> str:
    return str(shape) if isinstance(shape, Shape) else "-".join(f"{k}{v}" for k, v in shape.items())


# ----------------------------------------------------------------------------- the spec


class _Tiles(dict[str, int]):
    """``KernelSpec.tiles``: the smallest tile size of each dimension, remembering the sizes as given
    (several sizes of one dimension, config keywords), so that ``dataclasses.replace(spec, ...)``, which
    builds the spec again from ``tiles``, keeps every tile size instead of the smallest alone."""

    given: dict[str, Any]


@dataclass(frozen=True)
class KernelSpec:
    """A kernel described once: launch, reference, tensors with named dims, tiles, loop dim, stages."""

    #: shown in messages and the summary, e.g. ``"triton_gemm"``
    name: str
    #: ``launch(arrays, dims)``: writes the outputs into the arrays pipecheck allocated (the spec form);
    #: leave it out and give ``call`` for the wrapper form
    launch: Callable[..., Any] | None = None
    #: ``reference(arrays, dims) -> {output name: array}`` in higher precision (float32/float64)
    reference: Callable[..., Any] | None = None
    #: the kernel's inputs and outputs, each a :class:`Tensor` with named dims
    tensors: Sequence[Tensor] = ()
    #: tile size per dimension, e.g. ``{"M": 128, "N": 128, "K": 64}``, or several sizes of one dimension,
    #: ``{"N": (64, 128)}`` (BLOCK_M and BLOCK_N both on it): shapes get ragged trip counts for each; with
    #: ``autotune``, a config keyword (``{"M": "BLOCK_M"}``) stands for its sizes over the checked configs.
    #: A block of ``triton.next_power_of_2(N)`` has no fixed size: declare a small power of two (``{"N": 32}``),
    #: and the generated N fall just under, on and between powers of two (docs/tutorial.md)
    tiles: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    #: the pipelined loop dimension (its tiles are probed one by one)
    loop_dim: str = ""
    #: pipeline depth (num_stages); drives the generated loop trip counts
    stages: int = 1
    #: ``"torch"`` (CPU or CUDA tensors) or ``"cupy"``
    backend: str = "torch"
    #: ``Divisible("K", 8)``, ``Range("M", 1, 2**20)``, or callables ``(dims) -> str | None``
    preconditions: Sequence[Precondition] = ()
    #: False: repeated runs may differ bitwise (atomics, split-K); the determinism check is skipped
    deterministic: bool = True
    #: ``flops(dims) -> float``, for perf reports
    flops: Callable[[Mapping[str, int]], float] | None = None
    #: ``bytes_moved(dims) -> float``, for perf reports
    bytes_moved: Callable[[Mapping[str, int]], float] | None = None
    #: one line on what the kernel computes
    description: str = ""
    #: relative tolerance override: a float, ``{output name: float}``, or a callable of the shape's sizes
    #: returning either (``lambda dims: 1e-3 * (dims["K"] // 256 + 1)``)
    rtol: float | Mapping[str, float] | None = None
    #: absolute tolerance override: a float, ``{output name: float}``, or a callable of the shape's sizes;
    #: default: the dtype's, raised for a long loop (it grows like sqrt(loop_dim), as an fp32 accumulator's
    #: rounding error does: :mod:`pytest_pipecheck.model.tolerance`)
    atol: float | Mapping[str, float] | None = None
    #: ``same_precision(arrays, dims) -> outputs`` in the output dtype: enables the calibrated tolerance
    #: (coverage and tile probe)
    same_precision: Callable[..., Any] | None = None
    #: calibrated mode: the error may be at most ``calibration_k`` times the same-precision error (never less
    #: than the accumulation bound of the loop: :func:`pytest_pipecheck.model.tolerance.at_least_accumulation`)
    calibration_k: float = 2.0
    #: value patterns generated for it (``("normal", "negative", ...)``, see :mod:`pytest_pipecheck.model.values`);
    #: default: the non-extreme patterns. Extreme ones (``nan``, ``inf``, ``max``, ``denormal``) are opt-in
    values: Sequence[str] | None = None
    #: ``{"K": 4}``: one program covers 4 tiles of K (guards and generated shapes count the program's extent)
    blocks_per_program: Mapping[str, int] | None = None
    #: the wrapper form: ``call(*inputs) -> outputs``, the user's entry point as shipped; its torch
    #: allocations are poisoned and guarded (see :mod:`pytest_pipecheck.checks.wrapper`)
    call: Callable[..., Any] | None = None
    #: the wrapper form: names of the call's return values in order (``None`` skips one);
    #: default: the outputs in declared order. A returned dict is matched by name. An inout may be
    #: named too (a call that returns the tensor it updated in place)
    returns: Sequence[str | None] | None = None
    #: a ``triton.autotune`` kernel that ``launch``/``call`` launches: a test taking a ``config`` argument runs
    #: once per config, pinned (see :mod:`pytest_pipecheck.model.autotune`); ``tiles`` may then name a config
    #: keyword (``{"M": "BLOCK_M"}``) and ``stages`` left at 1 becomes the deepest config's ``num_stages``
    autotune: Any = None
    #: the configs of ``autotune`` to check, by id (``"BLOCK_M64-BLOCK_N32-w4-s3"``) or index; default: all
    configs: Sequence[str | int] | None = None
    #: named integers the tensors' dimension expressions may use, ``{"group": 128}`` for ``Tensor("scales",
    #: ("K/group", "N"))``; not dimensions: the shapes neither vary nor name them (``launch`` and ``reference``
    #: get the shape's sizes only)
    constants: Mapping[str, int] | None = None
    #: derived from ``tiles``: every tile size of each dimension, smallest first (``{"N": (64, 128)}``);
    #: ``tiles`` keeps the smallest of each
    tile_sizes: Mapping[str, tuple[int, ...]] = field(init=False, repr=False, compare=False, default_factory=dict)
    #: derived from ``tiles``: the dimensions whose tile size is a config keyword of ``autotune`` (``{"M": "BLOCK_M"}``)
    tile_keys: Mapping[str, str] = field(init=False, repr=False, compare=False, default_factory=dict)
    #: derived from ``autotune`` and ``configs``: the configs checked (:class:`~pytest_pipecheck.model.autotune.AutotuneConfig`)
    autotune_configs: tuple[Any, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        object.__setattr__(self, "tensors", tuple(self.tensors))
        tiles = self._resolve_autotune()
        sizes: dict[str, tuple[int, ...]] = {}
        for dim, size in tiles.items():
            many = tuple(size) if isinstance(size, (tuple, list)) else (size,)
            for one in many:
                if isinstance(one, bool) or not isinstance(one, int) or one < 1:
                    raise self._error(f"tile size {dim}={size!r} must be an integer >= 1 or a tuple of them")
            if not many:
                raise self._error(f"tile size {dim}={size!r} is an empty tuple")
            sizes[dim] = tuple(sorted(set(many)))
        object.__setattr__(self, "tile_sizes", sizes)
        smallest = _Tiles({d: s[0] for d, s in sizes.items()})
        smallest.given = dict(getattr(self.tiles, "given", self.tiles))
        object.__setattr__(self, "tiles", smallest)
        object.__setattr__(self, "blocks_per_program", dict(self.blocks_per_program or {}))
        if self.values is not None:
            object.__setattr__(self, "values", names.validate_names(self.values, self.name))
        object.__setattr__(self, "preconditions", tuple(self.preconditions))
        if self.constants is not None and not isinstance(self.constants, Mapping):
            raise self._error(f"constants must be a dict of name: integer ({{'group': 128}}), got "
                              f"{type(self.constants).__name__}")
        object.__setattr__(self, "constants", dict(self.constants or {}))
        self.validate()

    def _resolve_autotune(self) -> dict[str, Any]:
        """The tiles with config keywords replaced by their sizes over the checked configs; sets
        ``autotune_configs``, ``tile_keys`` and (when left at 1) ``stages`` from ``autotune``."""
        tiles: dict[str, Any] = dict(getattr(self.tiles, "given", self.tiles))
        keys: dict[str, str] = {d: v for d, v in tiles.items() if isinstance(v, str)}
        object.__setattr__(self, "tile_keys", keys)
        if self.autotune is None:
            if self.configs is not None:
                raise self._error("configs= names configs of autotune=, which is not given")
            if keys:
                dim, key = next(iter(keys.items()))
                raise self._error(f"tile size {dim}={key!r} names a config keyword, but the spec has no autotune= "
                                  "kernel to take it from")
            return tiles
        if isinstance(self.configs, (str, int)):
            object.__setattr__(self, "configs", (self.configs,))
        try:
            chosen = tuple(autotune.configs(self.autotune, self.configs))
        except PipecheckError as exc:
            raise self._error(str(exc)) from None
        object.__setattr__(self, "autotune_configs", chosen)
        for dim, key in keys.items():
            lacking = [c.id for c in chosen if key not in c.kwargs]
            if lacking:
                raise self._error(f"tile size {dim}={key!r}: config {lacking[0]} has no keyword {key!r}")
            tiles[dim] = tuple(sorted({c.kwargs[key] for c in chosen}))
        depths = [c.num_stages for c in chosen if isinstance(c.num_stages, int)]
        if self.stages == 1 and depths:
            object.__setattr__(self, "stages", max(depths))
        return tiles

    # -------------------------------------------------------------- validation
    def _error(self, message: str) -> PipecheckError:
        return PipecheckError(f"spec {self.name!r}: {message}")

    def validate(self) -> None:
        """Check the description itself; raises PipecheckError naming the spec and the bad field."""
        if not isinstance(self.name, str) or not self.name:
            raise PipecheckError(f"a KernelSpec needs a non-empty name, got {self.name!r}")
        if self.launch is None and self.call is None:
            raise self._error("needs launch= (a launcher that writes the arrays pipecheck allocates) or call= "
                              "(the wrapper as shipped, which allocates and returns its outputs)")
        if self.launch is not None and self.call is not None:
            raise self._error("gives both launch= and call=; a spec checks one of them (write two specs)")
        if self.launch is not None and not callable(self.launch):
            raise self._error(f"launch must be callable, got {type(self.launch).__name__}")
        if self.call is not None and not callable(self.call):
            raise self._error(f"call must be callable, got {type(self.call).__name__}")
        if not callable(self.reference):
            raise self._error(f"reference must be callable, got {type(self.reference).__name__}")
        if self.backend not in BACKENDS:
            raise self._error(f"backend {self.backend!r} is not one of {', '.join(BACKENDS)}")
        if not self.tensors:
            raise self._error("tensors is empty; declare the inputs and outputs with Tensor(...)")
        self._validate_constants()
        seen: set[str] = set()
        for t in self.tensors:
            if not isinstance(t, Tensor):
                raise self._error(f"tensors must hold Tensor(...) objects, got {t!r}")
            if t.name in seen:
                raise self._error(f"tensor name {t.name!r} is declared twice")
            seen.add(t.name)
            if t.role not in ROLES:
                raise self._error(f"tensor {t.name!r} has role {t.role!r}; must be 'input', 'output' or 'inout'")
            if t.probe not in PROBES:
                raise self._error(f"tensor {t.name!r} has probe={t.probe!r}; must be 'mask' (the tile probe zeroes it "
                                  "outside the probed tile) or 'whole' (left as it is: an input with an invariant)")
            if t.role == "output" and isinstance(t.init, str) and t.init not in ("randn", *OUTPUT_INITS):
                raise self._error(f"output {t.name!r} has init {t.init!r}; an output starts poisoned, or zeroed "
                                  "with init='zeros' (when the caller zeroes it first)")
            if t.role == "output" and callable(t.init):
                raise self._error(f"output {t.name!r} has a callable init; an output starts poisoned, or zeroed "
                                  "with init='zeros'")
            if not t.dims or not all(isinstance(d, str) and d for d in t.dims):
                raise self._error(f"tensor {t.name!r} dims must be a non-empty tuple of names, got {t.dims!r}")
            for d in t.dims:
                try:
                    _expr(d)
                except ValueError as exc:
                    raise self._error(f"tensor {t.name!r} dim {d!r}: {exc}") from None
            try:
                object.__setattr__(t, "dtype", normalize_dtype(t.dtype))
            except ValueError as exc:
                raise self._error(f"tensor {t.name!r}: {exc}") from None
            if t.role != "output" and isinstance(t.init, str) and t.init not in INITS:
                raise self._error(f"tensor {t.name!r} init {t.init!r} is not one of {', '.join(INITS)} "
                                  "or a callable")
            if not isinstance(t.init, str) and not callable(t.init):
                raise self._error(f"tensor {t.name!r} init must be a name or a callable, got {t.init!r}")
        if not self.compared:
            raise self._error("no tensor has role='output' or 'inout'; nothing to check")
        self._validate_expressions()
        if self.call is not None:
            self._validate_call()
        elif self.returns is not None:
            raise self._error("returns= names the return values of call=; a launch() spec returns nothing")
        self._validate_layouts()
        if not self.inputs:
            raise self._error("no tensor has role='input' or 'inout'")
        input_dims = {d for t in self.inputs for d in self.dims_of(t)}
        if self.loop_dim not in input_dims:
            names = ", ".join(t.name for t in self.inputs)
            raise self._error(f"loop_dim {self.loop_dim!r} is not a dimension of any input ({names})")
        all_dims = set(self.dim_names)
        for dim in self.tiles:
            if dim not in all_dims:
                raise self._error(f"tiles names {dim!r}, which is not a dimension of any tensor "
                                  f"(dims: {', '.join(self.dim_names)})")
        for dim, n in (self.blocks_per_program or {}).items():
            if dim not in self.tiles:
                raise self._error(f"blocks_per_program names {dim!r}, which has no entry in tiles")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise self._error(f"blocks_per_program {dim}={n!r} must be an integer >= 1")
        if self.loop_dim not in self.tiles:
            raise self._error(f"tiles has no entry for the loop dimension {self.loop_dim!r}")
        if isinstance(self.stages, bool) or not isinstance(self.stages, int) or self.stages < 1:
            raise self._error(f"stages={self.stages!r} must be an integer >= 1")
        for pre in self.preconditions:
            if isinstance(pre, (Divisible, Range)):
                if pre.dim not in all_dims:
                    raise self._error(f"precondition {pre} names {pre.dim!r}, not a dimension of any tensor")
                if isinstance(pre, Divisible) and (not isinstance(pre.n, int) or pre.n < 1):
                    raise self._error(f"precondition {pre} needs n >= 1")
                if isinstance(pre, Range) and pre.lo > pre.hi:
                    raise self._error(f"precondition {pre} is empty (lo > hi)")
            elif not callable(pre):
                raise self._error(f"precondition {pre!r} must be Divisible, Range or a callable")
        problem = tolerance.problem
        for tol_name in ("rtol", "atol"):
            tol = getattr(self, tol_name)
            if tol is None or callable(tol):  # a callable of the shape is checked where it is called
                continue
            if isinstance(tol, Mapping):
                unknown = [k for k in tol if k not in {t.name for t in self.compared}]
                if unknown:
                    raise self._error(f"{tol_name} names {unknown[0]!r}, which is not an output")
                for key, value in tol.items():
                    why = None if value is None else problem(value)
                    if why:
                        raise self._error(f"{tol_name}[{key!r}]={value!r} {why}")
            else:
                why = problem(tol)
                if why:
                    raise self._error(f"{tol_name}={tol!r} {why}")
        why = problem(self.calibration_k)
        if why or not self.calibration_k > 0:
            raise self._error(f"calibration_k={self.calibration_k!r} {why or 'must be > 0'}")

    def _validate_constants(self) -> None:
        import keyword

        consts = self.constants or {}
        for name, value in consts.items():
            if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
                raise self._error(f"constants names {name!r}: a constant's name must be an identifier (group, PACK)")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise self._error(f"constant {name}={value!r} must be an integer >= 1")
            if name == self.loop_dim or name in self.tiles:
                raise self._error(f"constant {name!r} is also a dimension (tiles or loop_dim); a name is one or the other")

    def _validate_expressions(self) -> None:
        """Every dimension expression uses known names, divides by constants only and, made of constants alone,
        is a whole positive size; the divisibility each implies joins the preconditions."""
        consts = self.constants or {}
        known = {d for t in self.tensors for d in t.dims if _expr(d).plain and d not in consts}
        known |= set(self.tiles) | {self.loop_dim}
        known.discard("")
        # per dimension, the lcm of what its divisions need, and which tensor dims need it
        implied: dict[str, tuple[int, list[str]]] = {}
        for t in self.tensors:
            for d in t.dims:
                e = _expr(d)
                if e.plain and d in known:
                    continue
                why = e.problem(known, consts)
                if why:
                    raise self._error(f"tensor {t.name!r} dim {d!r}: {why}")
                for dim, n in e.divisibility(consts).items():
                    m, sources = implied.get(dim, (1, []))
                    implied[dim] = (m * n // math.gcd(m, n), [*sources, f"tensor {t.name!r} dim {d!r}"])
        declared = tuple(p for p in self.preconditions if not isinstance(p, _Implied))
        extra: list[Divisible] = []
        for dim, (n, sources) in implied.items():
            held = any(isinstance(p, Divisible) and p.dim == dim and isinstance(p.n, int) and p.n > 0
                       and p.n % n == 0 for p in declared)
            if not held:
                extra.append(_Implied(dim, n, reason=f"implied by {' and '.join(sources)}"))
        object.__setattr__(self, "preconditions", (*declared, *extra))

    def _validate_layouts(self) -> None:
        """Every tensor's ``layout``; the wrapper form's outputs take none (its call allocates them)."""
        for t in self.tensors:
            kinds = names.layout_kinds(self.name, t.name, t.layout, t.dims)
            if kinds is not None and self.call is not None and t.is_output:
                raise self._error(f"output {t.name!r} has layout={t.layout!r}, but the wrapper form's call "
                                  "allocates its outputs itself: layout= applies to its inputs only")

    def _validate_call(self) -> None:
        if self.backend != "torch":
            raise self._error(f"call= needs backend='torch' (its allocations are intercepted with torch's dispatch "
                              f"mode), got backend={self.backend!r}")
        zeroed = [t.name for t in self.outputs if t.zeroed]
        if zeroed:
            raise self._error(f"output {zeroed[0]!r} has init='zeros', but the wrapper form's call allocates its "
                              "outputs itself (init='zeros' says what the caller does before a launch(); a wrapper "
                              "that zeroes its output with torch.zeros is seen doing so)")
        if self.returns is None:
            return
        returns = (self.returns,) if isinstance(self.returns, str) else tuple(self.returns)
        object.__setattr__(self, "returns", returns)
        outputs = [t.name for t in self.outputs]
        returnable = [t.name for t in self.compared]
        for r in returns:
            if r is not None and r not in returnable:
                raise self._error(f"returns names {r!r}, which is not an output or inout ({', '.join(returnable)})")
        named = [r for r in returns if r is not None]
        twice = [r for r in named if named.count(r) > 1]
        if twice:
            raise self._error(f"returns names {twice[0]!r} twice")
        missing = [o for o in outputs if o not in named]
        if missing:
            raise self._error(f"returns does not name the output {missing[0]!r}: every output must be one of the "
                              f"call's return values (returns={returns!r})")

    # -------------------------------------------------------------- views
    @property
    def inputs(self) -> tuple[Tensor, ...]:
        """Tensors that hold values when the kernel starts: inputs and inouts."""
        return tuple(t for t in self.tensors if t.role in ("input", "inout"))

    @property
    def outputs(self) -> tuple[Tensor, ...]:
        """Tensors the kernel writes from nothing (poisoned, or zeroed with ``init="zeros"``)."""
        return tuple(t for t in self.tensors if t.role == "output")

    @property
    def compared(self) -> tuple[Tensor, ...]:
        """Tensors compared with the reference after the launch: outputs and inouts, in declared order."""
        return tuple(t for t in self.tensors if t.role in ("output", "inout"))

    @property
    def guard_tiles(self) -> dict[str, int]:
        """The largest extent one program may reach past an edge per dimension (guards are sized by it)."""
        bpp = self.blocks_per_program or {}
        return {d: s[-1] * bpp.get(d, 1) for d, s in self.tile_sizes.items()}

    def tolerances(self, shape: Mapping[str, int]) -> tuple[Any, Any]:
        """The spec's (rtol, atol) at ``shape``: callables of the shape are called and their results checked.

        Raises PipecheckError naming the spec, the shape and the bad value.
        """
        problem = tolerance.problem
        out = []
        for tol_name in ("rtol", "atol"):
            tol = getattr(self, tol_name)
            if callable(tol):
                try:
                    tol = tol(dict(shape))
                except Exception as exc:
                    raise self._error(f"{tol_name}(dims) raised at {dict(shape)}: {type(exc).__name__}: {exc}") from exc
                values = tol.items() if isinstance(tol, Mapping) else [(None, tol)]
                for key, value in values:
                    if key is not None and key not in {t.name for t in self.compared}:
                        raise self._error(f"{tol_name}(dims) names {key!r}, which is not an output")
                    why = None if value is None else problem(value)
                    if why:
                        where = f"[{key!r}]" if key is not None else ""
                        raise self._error(f"{tol_name}(dims){where} returned {value!r} at {dict(shape)}: {why}")
            out.append(tol)
        return out[0], out[1]

    @property
    def dim_names(self) -> tuple[str, ...]:
        """Every dimension name, in order of first appearance (inputs first, then outputs); the names inside
        dimension expressions count, the spec's constants do not."""
        out: list[str] = []
        for t in self.tensors:
            for d in self.dims_of(t):
                if d not in out:
                    out.append(d)
        return tuple(out)

    def dims_of(self, t: Tensor) -> tuple[str, ...]:
        """The dimension names ``t``'s dims use, in order (``("K/8", "N")``: K, N)."""
        consts = self.constants or {}
        out: list[str] = []
        for d in t.dims:
            for name in _expr(d).dims(consts):
                if name not in out:
                    out.append(name)
        return tuple(out)

    def shape_of(self, t: Tensor, shape: Mapping[str, int]) -> tuple[int, ...]:
        """``t``'s sizes at ``shape``, its dimension expressions evaluated with the spec's constants.

        Raises PipecheckError naming the spec, the tensor, the expression and the shape when one is not a
        positive whole size there (:meth:`check_shape` rejects such a shape first)."""
        consts = self.constants or {}
        sizes: list[int] = []
        for d in t.dims:
            if d in shape and d not in consts:
                sizes.append(int(shape[d]))
                continue
            try:
                sizes.append(int(_expr(d).value({**consts, **dict(shape)})))
            except ValueError as exc:
                raise self._error(f"tensor {t.name!r} dim {d!r} at {_shape_text(shape)}: {exc}") from None
        return tuple(sizes)

    def axis_multiple(self, dim: str) -> tuple[str, Any] | None:
        """``(D, c)`` when the tensor dim ``dim`` is ``c * D`` for one dimension D (``"K"``: ``("K", 1)``,
        ``"K/8"``: ``("K", Fraction(1, 8))``, ``"2*N"``: ``("N", 2)``); None for anything else (``"M*N"``,
        ``"K+1"``, a constant).

        How its elements map to D's indices: a whole ``c >= 2`` is read as c copies of D side by side
        (``2*N``: a fused input, the gate's N columns then the up projection's), any other ``c`` as D's
        indices scaled by c (``K/8``: element i holds K indices 8i to 8i+7; ``K/group``: one element per group)."""
        consts = self.constants or {}
        e = _expr(dim)
        if e.plain:
            return None if dim in consts else (dim, 1)
        return e.multiple(consts)

    @staticmethod
    def _copies(c: Any) -> int:
        """c when a multiple c * D is c copies of D side by side (a whole c >= 2), else 0."""
        return int(c) if c == int(c) and c >= 2 else 0

    @property
    def dim_tiles(self) -> dict[str, Any]:
        """The tile along each tensor dim, for messages naming an element by tile (``describe_index``): ``tiles``;
        for a dim ``c * D`` of a tiled dimension D scaled by c, ``c * tiles[D]`` where that is whole
        (``{"K": 32, "K/8": 4}``); for c copies of D side by side, ``(D, c, tiles[D])`` (``{"2*N": ("N", 2, 16)}``),
        so that the element is named by its copy and D's tile."""
        out: dict[str, Any] = dict(self.tiles)
        for t in self.tensors:
            for d in t.dims:
                if d in out:
                    continue
                multiple = self.axis_multiple(d)
                if multiple is None:
                    continue
                base, c = multiple
                copies = self._copies(c)
                if copies:
                    out[d] = (base, copies, self.tiles.get(base, 0))
                elif base in self.tiles:
                    tile = c * self.tiles[base]
                    if tile >= 1 and tile == int(tile):
                        out[d] = int(tile)
        return out

    def axis_guard_tiles(self, t: Tensor) -> list[int]:
        """How far one program may reach past an edge along each of ``t``'s axes (its guard bands are sized by
        it): :attr:`guard_tiles` for a dimension, and for an expression the reach of
        :meth:`pytest_pipecheck.model.dimexpr.DimExpr.reach` (``K/8``: ``guard_K / 8``, rounded up)."""
        consts = self.constants or {}
        guard = self.guard_tiles
        out = []
        for d in t.dims:
            e = _expr(d)
            if e.plain and d not in consts:
                out.append(guard.get(d, 1))
            else:
                out.append(int(e.reach(guard, consts)))
        return out

    def loop_windows(self, t: Tensor, lo: int, hi: int, size: int) -> tuple[int, list[tuple[int, int]]] | None:
        """Where loop indices ``[lo, hi)`` lie in ``t`` at a loop size of ``size``: ``(axis, [(start, stop)])``
        along its first axis that is a multiple ``c * loop_dim`` (see :meth:`axis_multiple`): ``K``: ``[lo,
        hi)``; ``K/8``: the elements overlapping it, ``[lo // 8, ceil(hi / 8))``; ``2*K``: ``[lo, hi)`` and
        ``[size + lo, size + hi)``. None when no axis of ``t`` is such a multiple, or ``t`` is declared
        ``probe="whole"`` (:meth:`loop_unmasked` says why, when it uses the loop dimension otherwise)."""
        if t.probe == "whole":
            return None
        for axis, d in enumerate(t.dims):
            multiple = self.axis_multiple(d)
            if multiple is None or multiple[0] != self.loop_dim:
                continue
            c = multiple[1]
            copies = self._copies(c)
            if copies:
                return axis, [(k * size + lo, k * size + hi) for k in range(copies)]
            return axis, [(math.floor(c * lo), math.ceil(c * hi))]
        return None

    def loop_unmasked(self, t: Tensor) -> str | None:
        """Why the tile probe leaves ``t`` whole although it uses the loop dimension (``M*K`` mixes it with another
        dimension; ``K+8`` is not a multiple of it); None when ``t`` has an axis :meth:`loop_windows` masks, or
        does not use the loop dimension."""
        loop = self.loop_dim
        consts = self.constants or {}
        why = None
        for d in t.dims:
            e = _expr(d)
            if loop not in e.dims(consts):
                continue
            if t.probe == "whole":
                return "declared probe='whole'"
            multiple = self.axis_multiple(d)
            if multiple is not None and multiple[0] == loop:
                return None
            if why is None:
                why = (f"{d!r} mixes {loop} with another dimension" if len(e.dims(consts)) > 1 else
                       f"{d!r} is not a multiple of {loop}")
        return why

    def tensor(self, name: str) -> Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise self._error(f"has no tensor named {name!r}")

    def loop_trips(self, shape: Mapping[str, int]) -> int:
        """How many loop tiles the pipelined loop runs at ``shape``."""
        return math.ceil(shape[self.loop_dim] / self.tiles[self.loop_dim])

    def violations(self, shape: Mapping[str, int]) -> list[str]:
        """Every precondition that ``shape`` breaks, as readable strings (empty when it is fine); where none
        is broken, every dimension expression that is not a positive whole size at ``shape``."""
        out = self._broken_preconditions(shape)
        return out or self._expression_problems(shape)

    def _broken_preconditions(self, shape: Mapping[str, int]) -> list[str]:
        out = []
        for pre in self.preconditions:
            try:
                msg = _check_precondition(pre, shape)
            except Exception as exc:  # a user's precondition callable crashed: say which
                msg = f"precondition {getattr(pre, '__name__', repr(pre))} raised {type(exc).__name__}: {exc}"
            if msg:
                out.append(msg)
        return out

    def _expression_problems(self, shape: Mapping[str, int]) -> list[str]:
        consts = self.constants or {}
        sizes = {**consts, **dict(shape)}
        out = []
        for t in self.tensors:
            for d in t.dims:
                e = _expr(d)
                if e.plain or not all(n in sizes for n in e.names):
                    continue
                try:
                    e.value(sizes)
                except ValueError as exc:
                    out.append(f"tensor {t.name!r} dim {d!r}: {exc}")
        return out

    def check_shape(self, shape: Shape | Mapping[str, int] | str) -> Shape:
        """Return ``shape`` as a Shape after checking it names every dim and meets the preconditions.

        Raises PipecheckError naming the spec, the shape and the broken precondition.
        """
        shp = as_shape(shape, self.name)
        missing = [d for d in self.dim_names if d not in shp]
        if missing:
            raise self._error(f"shape {shp} has no size for {', '.join(missing)} "
                              f"(needs {', '.join(self.dim_names)})")
        extra = [d for d in shp if d not in self.dim_names]
        if extra:
            raise self._error(f"shape {shp} names {', '.join(extra)}, not a dimension of this kernel "
                              f"({', '.join(self.dim_names)})")
        broken = self._broken_preconditions(shp)
        if broken:
            raise self._error(f"input shape {shp} violates a declared precondition: {'; '.join(broken)}")
        bad = self._expression_problems(shp)
        if bad:
            raise self._error(f"shape {shp} gives no valid size to {'; '.join(bad)}")
        return shp

    def launch_accepts_stages(self) -> bool:
        """Whether ``launch`` takes a ``stages`` keyword (so a stages override can reach the kernel)."""
        fn = self.launch if self.launch is not None else self.call
        if fn is None:
            return False
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return False
        return "stages" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    def __str__(self) -> str:
        return self.name
