"""The reference's outputs at one case: called on copies of the inputs, validated, and where nothing compares.

* :func:`_reference` -- the reference (or the spec's ``same_precision`` implementation) called on its own
  copies of the inputs, its outputs' names, shapes and dtypes validated (a float output's reference is
  computed in higher precision), returned as host float64 arrays; an ``inout`` the reference updates in
  place gives the expected value so. A reference that writes its inputs, or returns NaN or inf where the
  output is compared, makes the check inconclusive: an ERROR naming the spec and the output, never
  agreement.
* :func:`_out_of_range` -- the skip of a (finite) value pattern that drives the reference past an output
  dtype's range, or below half its smallest step: a correct kernel cannot carry it, and nothing compares.

Coverage (:mod:`.coverage`) and the tile probe (:mod:`.tile_probe`) compare their outputs with these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..model import tolerance as _tol
from ..model import values as _values
from ..model.shape import Shape
from ..model.spec import KernelSpec
from ..model.tensor import Tensor
from ..results import CheckResult, PipecheckError
from . import arrays as _arr
from . import launch as _launch
from .context import CheckContext
from .failures import inconclusive as _inconclusive
from .failures import pct as _pct


def _reference(ctx: CheckContext, spec: KernelSpec, shape: Shape, inputs: Mapping[str, _arr.GuardedArray],
               fn: Any = None, label: str = "reference", *, check: str = "coverage",
               require_finite: bool = True) -> dict[str, Any]:
    """Call the reference and validate names, shapes and dtypes; returns host float64 arrays.

    The reference gets its own copies of the inputs: what it does to them cannot reach the kernel's
    inputs, and a reference that writes them is an ERROR naming the reference (before, the change was
    found in the kernel's inputs and blamed on the kernel). With ``require_finite``, a NaN or inf in
    a returned output is an ERROR: the comparison there would agree with anything.
    """
    __tracebackhide__ = True
    import numpy as np

    fn = fn or spec.reference
    copies = {name: _arr.clone(g.array) for name, g in inputs.items()}
    before = {name: _arr.bits(copies[name], g.dtype) for name, g in inputs.items()}
    try:
        got = fn(copies, shape.dims)
    except Exception as exc:
        raise PipecheckError(f"spec {spec.name!r}: the {label} raised at {shape}: "
                             f"{type(exc).__name__}: {exc}") from exc
    _arr.synchronize(spec.backend, _launch._device(ctx, spec))  # the one seam for the run's device
    for name, g in inputs.items():
        if spec.tensor(name).is_inout:
            continue  # updated in place by design: a reference may update its copy instead of returning it
        changed = _arr.bits(copies[name], g.dtype) != before[name]
        if changed.any():
            n = int(changed.sum())
            first = tuple(int(i) for i in np.argwhere(changed)[0])
            where = _arr.describe_index(first, spec.tensor(name).dims, spec.dim_tiles, changed.shape)
            _inconclusive(
                ctx, check, spec, f"inconclusive: the {label} wrote its input {name!r}",
                f"spec {spec.name!r}: the {label} wrote its input {name!r} at {shape}: {_pct(n, changed.size)} "
                f"elements changed, first at {where}. A {label} must not modify its inputs (an in-place op "
                "such as mul_(), +=, or out= on an input?); its outputs may come from the modified values, "
                "so nothing can be compared. (It ran on copies: the kernel's inputs were not touched.)",
                {"shape": str(shape), "input": name, "changed": n, "culprit": label})
    if not isinstance(got, Mapping):
        raise PipecheckError(f"spec {spec.name!r}: the {label} must return a dict of outputs "
                             f"({', '.join(t.name for t in spec.compared)}), got {type(got).__name__}")
    out: dict[str, Any] = {}
    for t in spec.compared:
        if t.is_inout and t.name not in got:
            # the reference updated its copy of the inout in place: that copy is the expected value
            host = np.asarray(_arr.to_numpy(copies[t.name]), dtype=np.float64)
            if require_finite:
                _require_finite(ctx, check, spec, shape, t, host, label)
            out[t.name] = host
            continue
        if t.name not in got:
            raise PipecheckError(f"spec {spec.name!r}: the {label} returned no {t.name!r} "
                                 f"(returned: {', '.join(map(str, got)) or 'nothing'})")
        value = got[t.name]
        want = spec.shape_of(t, shape)
        have = tuple(int(n) for n in getattr(value, "shape", ()))
        if have != want:
            raise PipecheckError(f"spec {spec.name!r}: the {label}'s {t.name!r} has shape {have}, expected "
                                 f"{want} = ({', '.join(t.dims)}) at {shape}")
        try:
            from ..model.tensor import normalize_dtype

            dt = normalize_dtype(getattr(value, "dtype", ""))
        except ValueError:
            dt = str(getattr(value, "dtype", "?"))
        if label == "reference":
            _check_reference_dtype(spec, t, dt)
        host = np.asarray(_arr.to_numpy(value), dtype=np.float64)
        if require_finite:
            _require_finite(ctx, check, spec, shape, t, host, label)
        out[t.name] = host
    return out


def _require_finite(ctx: CheckContext, check: str, spec: KernelSpec, shape: Shape, t: Tensor, host: Any,
                    label: str) -> None:
    """A NaN or inf in a reference output is an ERROR naming the spec and the output.

    NaN compares false with everything and |inf - x| <= atol + rtol * inf holds for any x, so each
    such element would read as agreement whatever the kernel wrote (an all-NaN reference let a
    kernel that writes nothing pass coverage). A calibrated tolerance from such a same-precision
    result would be inf or NaN and accept anything.
    """
    __tracebackhide__ = True
    import numpy as np

    bad = ~np.isfinite(host)
    if not bad.any():
        return
    n = int(bad.sum())
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    where = _arr.describe_index(first, t.dims, spec.dim_tiles, host.shape)
    kinds = "NaN" if np.isnan(host[bad]).all() else ("inf" if np.isinf(host[bad]).all() else "NaN or inf")
    if label == "reference":
        why = ("those elements cannot be checked (any output would agree with them); a reference must be "
               "finite wherever the output is compared")
    else:
        why = (f"the calibrated tolerance would be {kinds} and accept any output (did it overflow "
               f"{t.dtype}?); fix it, or use tolerance='fixed' or explicit rtol=/atol=")
    _inconclusive(
        ctx, check, spec, f"inconclusive: the {label}'s {t.name!r} is {kinds} at {n} of {host.size} elements",
        f"spec {spec.name!r}: the {label}'s {t.name!r} is {kinds} at {_pct(n, host.size)} elements at {shape}, "
        f"first at {where}: {why}",
        {"shape": str(shape), "output": t.name, "non_finite": n, "culprit": label})


def _check_reference_dtype(spec: KernelSpec, t: Tensor, dt: str) -> None:
    floats = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}
    if t.dtype in floats:
        need = 32 if floats[t.dtype] <= 16 else floats[t.dtype]
        if dt not in floats or floats[dt] < need:
            raise PipecheckError(f"spec {spec.name!r}: the reference's {t.name!r} has dtype {dt}; it must be "
                                 f"computed in higher precision than the {t.dtype} output "
                                 f"(float32 or float64)")
    elif dt in floats:
        raise PipecheckError(f"spec {spec.name!r}: the reference's {t.name!r} has dtype {dt}, but the "
                             f"output is {t.dtype}: an integer reference is required")


_RANGE = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38}


def _out_of_range(ctx: CheckContext, check: str, spec: KernelSpec, shp: Shape, pattern: _values.Pattern,
                  ref: Mapping[str, Any]) -> CheckResult | None:
    """A skip when a (finite) pattern drives the reference past an output dtype's range; else None.

    A correct kernel writes inf there and nothing can be compared: not the kernel's fault, never a pass.
    """
    import numpy as np

    if pattern.name == "normal" or pattern.nonfinite:
        return None
    for t in spec.compared:
        top = _RANGE.get(t.dtype)
        want = ref[t.name]
        if top is None or not want.size:
            continue
        peak = float(np.max(np.abs(want)))
        if peak > top:
            return ctx.skip_check(check, f"{spec.name} at {shp} {pattern.id}: the reference's {t.name!r} reaches "
                                 f"{peak:.3g}, beyond the {t.dtype} range ({top:.5g}); this pattern does not "
                                 "apply at this shape", kernel=spec.name)
        step = _tol.smallest_step(t.dtype)
        if step is not None and 0 < peak < step / 2:
            # every element rounds to zero in the output: nothing the kernel computed can show
            return ctx.skip_check(check, f"{spec.name} at {shp} {pattern.id}: the reference's {t.name!r} is at most "
                                 f"{peak:.3g}, below half the smallest {t.dtype} value ({step:.3g}): the output "
                                 f"rounds every element to zero, so this pattern cannot be carried by {t.dtype} "
                                 "and does not apply at this shape", kernel=spec.name)
    return None
