"""The test cases of a spec: what ``@pytest.mark.pipecheck(spec=SPEC)`` parametrizes a test with.

A test that takes ``shape`` runs at every generated shape (:mod:`.shapes`); one taking ``values`` too gets
(shape, value pattern) pairs (:func:`.values.pair`), one taking only ``values`` every pattern of the spec.
One taking ``layout`` gets the spec's layouts (:func:`.layouts.generate`), paired with the other cases (see
:func:`cases`). One taking ``config``, when the spec has ``autotune=``, runs each case once per config.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import layouts, shapes, values
from .spec import KernelSpec

__all__ = ["ARGUMENTS", "Case", "cases"]

#: the test arguments a spec parametrizes, in the order of a case's id
ARGUMENTS = ("shape", "values", "layout", "config")


@dataclass(frozen=True)
class Case:
    """One parametrization: its arguments (in the order of the names :func:`cases` returns), its id, and
    why it does not run (a shape over the memory budget), or None."""

    args: tuple[Any, ...]
    id: str
    skip: str | None = None


def cases(spec: KernelSpec, wanted: set[str], *, level: str, stages: int | None,
          max_bytes: int) -> tuple[list[str], list[Case]]:
    """The argument names a test taking ``wanted`` (among :data:`ARGUMENTS`) is parametrized with, and its
    cases; no names when there is nothing to parametrize."""
    wants_shape = "shape" in wanted
    wants_values = "values" in wanted
    wants_layout = "layout" in wanted
    # without autotune= the name is left to the user's own fixture or parameter
    wants_config = "config" in wanted and spec.autotune is not None
    names = [n for n, w in zip(ARGUMENTS, (wants_shape, wants_values, wants_layout, wants_config)) if w]
    if not names:
        return [], []
    # (shape, pattern) cases: every shape with normal, each other pattern at a few ragged shapes
    # (values.pair); without a shape argument, every pattern (or one case when values is not taken)
    why: dict[Any, str | None] = {None: None}
    kept: list[Any] = []
    if wants_shape:
        # a shape over the memory budget is a skip that says why, not an allocator traceback at run time
        generated = shapes.generate_cases(spec, level=level, stages=stages, max_bytes=max_bytes)
        why.update({c.shape: c.dropped for c in generated})
        kept = [c.shape for c in generated if c.dropped is None]
        base: list[tuple[Any, Any]] = (values.pair(spec, [c.shape for c in generated], level=level)
                                       if wants_values else [(c.shape, None) for c in generated])
    else:
        base = [(None, n) for n in values.names_for(spec)] if wants_values else [(None, None)]
    # Layouts do not multiply these cases: every one runs in the base layout, and each variant layout runs
    # at a few shapes (layouts.pair: PER_LAYOUT per level, shapes with a partial tile first) under the normal
    # pattern, or once when the test takes no shape. A stride mix-up shows at any shape and under any
    # pattern, so shapes x patterns x layouts would add cases that show nothing these do not.
    full: list[tuple[Any, Any, Any]] = [(s, n, None) for s, n in base]
    if wants_layout:
        first = layouts.base(spec)
        normal = "normal" if wants_values else None
        variants = (layouts.pair(spec, kept, level=level) if wants_shape
                    else [(None, lay) for lay in layouts.generate(spec, level=level)[1:]])
        full = [(s, n, first) for s, n in base] + [(s, normal, lay) for s, lay in variants]
    # every config at every case: a bug of one config (its block size, its split) shows at the shapes
    # generated for all of them, and each (case, config) is its own test, named by the config's id
    config_ids: list[str | None] = [c.id for c in spec.autotune_configs] if wants_config else [None]
    out = []
    for s, n, lay in full:
        for cid in config_ids:
            parts = [(s, str(s), wants_shape), (n, f"values={n}", wants_values), (lay, str(lay), wants_layout),
                     (cid, f"config={cid}", wants_config)]
            out.append(Case(tuple(a for a, _, w in parts if w), "-".join(t for _, t, w in parts if w), why.get(s)))
    return names, out
