"""The test cases of a spec: what ``@pytest.mark.pipecheck(spec=SPEC)`` parametrizes a test with.

Every test of a spec runs every generated shape (:mod:`.shapes`) in the base layout under the ``normal``
value pattern, each other value pattern at a few ragged shapes (:func:`.values.pair`) and each layout
variant the spec declares at a few shapes (:func:`.layouts.pair`): a pattern or a stride mix-up shows at
any shape, so patterns x layouts x shapes would add cases that show nothing these do not. What the test
takes decides where each case's parts go:

* ``shape`` alone (the simplest test): the pattern and the layout travel in the shape itself (a
  :class:`Case`, which the check methods read when no ``values=`` or ``layout=`` is given), so the
  simplest test exercises every pattern and every declared layout by default;
* ``values`` and/or ``layout`` too: those arguments carry them (a test that takes them narrows or reads
  them itself);
* ``config``, when the spec has ``autotune=``: every case once per config.

One more case, ``extent``, measures how far one program of the kernel reaches and checks coverage where a
program's last chunk ends (:mod:`pytest_pipecheck.checks.extent`).

A test that takes no ``shape`` gets every pattern (when it takes ``values``) or every layout variant
(when it takes ``layout``) once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from . import layouts, shapes, values
from .shape import Shape
from .spec import KernelSpec

__all__ = ["ARGUMENTS", "Case", "Param", "cases"]

#: the test arguments a spec parametrizes, in the order of a case's id
ARGUMENTS = ("shape", "values", "layout", "config")


class Case(Shape):
    """A generated shape with the value pattern and memory layout it is checked under: the ``shape`` argument
    of a test that does not take ``values`` or ``layout`` itself. ``str(case)`` is the shape's own id
    (``M129-N65-K200``), as messages name it; the test's id adds the pattern and the layout."""

    __slots__ = ("extent", "layout", "pattern")
    pattern: str | None  # a value pattern's name (the checks' ``values=``); None: normal
    layout: Any  # a variant Layout (the checks' ``layout=``); None: the spec's base layout
    extent: bool  # the case that measures one program's extent (pytest_pipecheck.checks.extent)

    def __init__(self, dims: Mapping[str, int], pattern: str | None = None, layout: Any = None,
                 extent: bool = False) -> None:
        super().__init__(dims)
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "layout", layout)
        object.__setattr__(self, "extent", extent)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in (("values", self.pattern), ("layout", self.layout),
                                                   ("extent", self.extent or None)) if v is not None)
        return f"Case({self.id}{extra})"


@dataclass(frozen=True)
class Param:
    """One parametrization: its arguments (in the order of the names :func:`cases` returns), its id, and
    why it does not run (a shape over the memory budget), or None."""

    args: tuple[Any, ...]
    id: str
    skip: str | None = None


def cases(spec: KernelSpec, wanted: set[str], *, level: str, stages: int | None,
          max_bytes: int) -> tuple[list[str], list[Param]]:
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
    # the patterns and layouts a shape-taking test runs whether or not it takes them as arguments
    with_values = wants_values or wants_shape
    with_layouts = wants_layout or wants_shape
    why: dict[Any, str | None] = {None: None}
    kept: list[Any] = []
    if wants_shape:
        # a shape over the memory budget is a skip that says why, not an allocator traceback at run time
        generated = shapes.generate_cases(spec, level=level, stages=stages, max_bytes=max_bytes)
        why.update({c.shape: c.dropped for c in generated})
        kept = [c.shape for c in generated if c.dropped is None]
        base: list[tuple[Any, Any]] = (values.pair(spec, [c.shape for c in generated], level=level)
                                       if with_values else [(c.shape, None) for c in generated])
    else:
        base = [(None, n) for n in values.names_for(spec)] if wants_values else [(None, None)]
    full: list[tuple[Any, Any, Any]] = [(s, n, None) for s, n in base]
    if with_layouts:
        first = layouts.base(spec)
        variants = (layouts.pair(spec, kept, level=level) if wants_shape
                    else [(None, lay) for lay in layouts.generate(spec, level=level)[1:]])
        normal = "normal" if with_values else None
        full = [(s, n, first) for s, n in base] + [(s, normal, lay) for s, lay in variants]
    # every config at every case: a bug of one config (its block size, its split) shows at the shapes
    # generated for all of them, and each (case, config) is its own test, named by the config's id
    config_ids: list[str | None] = [c.id for c in spec.autotune_configs] if wants_config else [None]
    base_layout = layouts.base(spec)
    out = []
    for s, n, lay in full:
        variant = lay is not None and lay != base_layout
        shape_arg = s
        if wants_shape and s is not None and (not wants_values or not wants_layout):
            # the parts the test does not take travel in its shape; normal values and the base layout are
            # what the checks use anyway, so a Case carries only a pattern or a variant
            shape_arg = Case(s, pattern=n if not wants_values and n not in (None, "normal") else None,
                             layout=lay if not wants_layout and variant else None)
        for cid in config_ids:
            parts = [(shape_arg, str(s), wants_shape),
                     (n, f"values={n}", wants_values or (wants_shape and n not in (None, "normal"))),
                     (lay, str(lay), wants_layout or (wants_shape and variant)),
                     (cid, f"config={cid}", wants_config)]
            # an argument the test does not take is part of the id only (it travels in the shape)
            args = tuple(a for (a, _, w), name in zip(parts, ARGUMENTS) if w and name in names)
            out.append(Param(args, "-".join(t for _, t, w in parts if w), why.get(s)))
    if wants_shape and kept:
        # one more case measures how far one program reaches and checks the shapes where a program's last
        # chunk ends, which the declared tiles alone cannot generate (checks/extent.py)
        probe = Case(kept[0], extent=True)
        for cid in config_ids:
            parts = [(probe, "extent", True), ("normal", "values=normal", wants_values),
                     (base_layout, str(base_layout), wants_layout), (cid, f"config={cid}", wants_config)]
            out.append(Param(tuple(a for a, _, w in parts if w), "-".join(t for _, t, w in parts if w)))
    return names, out
