"""One shape of a kernel: :class:`Shape`, a frozen, hashable mapping of dimension sizes whose ``str`` is the
pytest id (``M129-N65-K200``), so ``pytest.mark.parametrize("shape", shapes, ids=str)`` reads well, and
:func:`as_shape`, which takes a Shape, a dict of sizes or such an id and says which spec a bad one was
given to.

The shapes generated for a spec are :mod:`.shapes`'s. This module lies below :mod:`.spec` (which checks a
shape against its dimensions) and imports no other module of the model.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..results import PipecheckError

__all__ = ["Shape", "as_shape"]

class Shape(Mapping[str, int]):
    """A frozen, hashable set of dimension sizes; ``str(shape)`` is the pytest id ``M129-N65-K200``."""

    __slots__ = ("_items",)
    _items: tuple[tuple[str, int], ...]

    def __init__(self, dims: Mapping[str, int] | None = None, **kwargs: int) -> None:
        merged = dict(dims or {})
        merged.update(kwargs)
        items = []
        for name, value in merged.items():
            if not isinstance(name, str) or not name:
                raise PipecheckError(f"Shape dimension names must be non-empty strings, got {name!r}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PipecheckError(f"Shape dimension {name}={value!r} must be an integer >= 1")
            items.append((name, int(value)))
        object.__setattr__(self, "_items", tuple(items))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Shape is immutable")

    def __getitem__(self, key: str) -> int:
        for name, value in self._items:
            if name == key:
                return value
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (name for name, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Shape):
            return dict(self._items) == dict(other._items)
        if isinstance(other, Mapping):
            return dict(self._items) == dict(other)
        return NotImplemented

    @property
    def dims(self) -> dict[str, int]:
        """A fresh ``dict`` of the sizes (safe to modify)."""
        return dict(self._items)

    @property
    def id(self) -> str:
        return "-".join(f"{name}{value}" for name, value in self._items)

    def __str__(self) -> str:
        return self.id

    def __repr__(self) -> str:
        return f"Shape({self.id})"

    def replace(self, **changes: int) -> Shape:
        """A copy with some sizes changed."""
        dims = self.dims
        dims.update(changes)
        return Shape(dims)

    @classmethod
    def parse(cls, text: str) -> Shape:
        """Parse an id such as ``M129-N65-K200`` back into a Shape."""
        import re

        dims: dict[str, int] = {}
        for part in text.split("-"):
            m = re.fullmatch(r"([A-Za-z_][A-Za-z_]*?)(\d+)", part.strip())
            if not m:
                raise PipecheckError(f"cannot parse shape {text!r}: {part!r} is not NAME<size> (e.g. M129)")
            dims[m.group(1)] = int(m.group(2))
        return cls(dims)


def as_shape(shape: Shape | Mapping[str, int] | str, spec_name: str = "") -> Shape:
    """Accept a Shape, a dict of sizes or an id string; raise a PipecheckError naming the spec."""
    if isinstance(shape, Shape):
        return shape
    try:
        if isinstance(shape, str):
            return Shape.parse(shape)
        if isinstance(shape, Mapping):
            return Shape(shape)
    except PipecheckError as exc:
        raise PipecheckError(f"spec {spec_name!r}: {exc}") from None
    raise PipecheckError(f"spec {spec_name!r}: a shape must be a Shape, a dict of sizes or an id like "
                         f"'M129-N65', got {type(shape).__name__} {shape!r}")
