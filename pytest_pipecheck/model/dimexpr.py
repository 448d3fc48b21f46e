"""Dimension expressions: a tensor dim written as arithmetic over dimension names, integer literals and the
spec's constants, for inputs whose sizes derive from the kernel's dimensions::

    Tensor("w", ("K/8", "N"), "int32")            # eight 4-bit weights packed in each int32 along K
    Tensor("scales", ("K/group", "N"))            # one scale per group of K (KernelSpec(constants={"group": 128}))
    Tensor("x", ("M", "2*N"))                     # gate and up projections side by side
    Tensor("states", ("B", "cdiv(L, chunk)", "D"))  # one state per chunk of L, the last chunk ragged

Grammar
    Names (a dimension of the spec, or one of its ``constants``), non-negative integer literals, ``+ - * /``,
    unary ``+``/``-``, parentheses and ``cdiv(a, b)``, the ceiling of ``a / b`` (Triton's ``cdiv``). The text is parsed with :mod:`ast` and only those nodes are accepted;
    it is never evaluated by Python. A name that is neither a dimension (a plain dim of some tensor, a
    ``tiles`` key or the ``loop_dim``) nor a constant is refused, and so is a divisor that holds a dimension
    (``K/N``): divisors are literals and constants; a misspelt constant (``K/grp``) is caught that way. A
    dimension that no tensor has on its own but ``tiles`` or ``loop_dim`` names is a dimension of the shapes
    like any other (the loop of a dequantizer whose inputs are ``K/8`` and ``K/group``).

Exact division
    ``/`` must come out whole, at every division, and the whole expression must be a positive size. A
    division of a multiple of one dimension by constants (``K/8``, ``K/group``, ``2*K/8``, ``(K/8)/4``)
    implies that the dimension is a multiple of the reduced denominator (8, group, 4, 32): the spec adds that
    ``Divisible`` to its preconditions (one per dimension, the lcm, its ``reason`` naming the tensors and
    expressions), so the generated shapes align to it and a shape that breaks it is refused by name. Any
    other expression (``(K+16)/16``, ``K-8``, ``M*K/8``) implies nothing the generator can align to: shapes
    at which it is not a positive whole size are not generated, and a shape given to a check is rejected
    with a message naming the spec, the tensor, the expression and the shape.

Ceiling division
    ``cdiv(L, chunk)`` is the number of chunks of ``chunk`` that cover L, the last one ragged where L is not a
    multiple of it (``cdiv(L, 64)`` is 3 at L=129): it implies no divisibility, so the generated shapes keep
    their ragged lengths and a chunked kernel meets a last chunk shorter than the others. Its divisor, as
    ``/``'s, holds only literals and constants.

Tiles, guards and the tile probe
    An axis that is a multiple ``c * D`` of one dimension (:meth:`DimExpr.multiple`) is mapped to D's
    indices in one of two ways. A whole ``c >= 2`` (``2*N``) is read as c copies of D side by side (the
    gate's N columns, then the up projection's): the tile probe of D's tile ``[lo, hi)`` keeps ``[lo, hi)``
    of each copy, and messages name an element by copy and D's tile (``2*N copy 1 of 2, N tile 0 of 3``).
    Any other ``c`` (``K/8``, ``K/group``, ``3*K/4``) scales D's indices: the axis has the tile ``c * tile_D``
    where that is whole (``K/8`` with tile_K 64: 8), and the probe keeps the elements that overlap the
    probed tile (a scale row shared by two K tiles is kept in the probe of each). An axis that uses the loop
    dimension otherwise (``M*K`` mixes two dimensions, ``K+8`` has an offset) is allocated, poisoned,
    guarded and compared like any other, but the tile probe leaves that input whole and says so in its
    result (``not masked along K: 'x' ('M*K' mixes K with another dimension)``). An interleaved layout of
    two copies (gate and up alternating) is probed as copies side by side: the probe stays sound (kernel
    and reference see the same inputs), only the tile it names may not be the program's.

    Guard bands are sized by :meth:`DimExpr.reach`: the expression with each dimension replaced by its
    guard tile and every ``-`` read as ``+``, rounded up (``K/8``: ``tile_K/8``; ``2*N``: ``2*tile_N``), an upper
    bound on how far one program reaches past the axis's end.

This module imports nothing from its siblings: :mod:`pytest_pipecheck.model` hands :func:`parse` to
:mod:`.spec`, which may import none of them.
"""

from __future__ import annotations

import ast
import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

__all__ = ["MAX_LENGTH", "DimExpr", "DimExprError", "parse"]

#: longest expression accepted (a dim is a short formula; this bounds the parser's work)
MAX_LENGTH = 200

_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_REFUSED_OPS = {ast.FloorDiv: "'//' (use '/', which is exact division)", ast.Mod: "'%'", ast.Pow: "'**'",
                ast.LShift: "'<<'", ast.RShift: "'>>'", ast.BitOr: "'|'", ast.BitAnd: "'&'", ast.BitXor: "'^'",
                ast.MatMult: "'@'", ast.Invert: "'~'", ast.Not: "'not'"}
_ALLOWED = "only dimension names, constants, integer literals, + - * /, parentheses and cdiv(a, b)"
#: the one function a dimension expression may call: ceiling division
CDIV = "cdiv"

# an affine form over the dimensions, {dimension name or None (the constant term): coefficient};
# None stands for a form that is not affine (a product or quotient of two dimensions)
_Affine = dict[str | None, Fraction]


def _literal(node: ast.Constant) -> Fraction:
    value = node.value
    assert isinstance(value, int)  # parse() admits integer literals only
    return Fraction(value)


class DimExprError(ValueError):
    """An expression that cannot be parsed or evaluated; the message says what is wrong, without naming
    the spec or the tensor (the caller adds them)."""


def _refuse(node: ast.AST) -> DimExprError:
    if isinstance(node, (ast.BinOp, ast.UnaryOp)):
        what = _REFUSED_OPS.get(type(node.op), f"the operator {type(node.op).__name__}")
    elif isinstance(node, ast.Constant):
        what = f"the literal {node.value!r} (only integers)"
    elif isinstance(node, ast.Call):
        what = "a function call"
    elif isinstance(node, (ast.Attribute, ast.Subscript)):
        what = f"{ast.unparse(node)!r} (an attribute or subscript)"
    else:
        what = f"{type(node).__name__.lower()} syntax ({ast.unparse(node)!r})"
    return DimExprError(f"{what} is not allowed in a dimension expression ({_ALLOWED})")


def _check_nodes(node: ast.expr, names: list[str]) -> None:
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _OPS:
            raise _refuse(node)
        _check_nodes(node.left, names)
        _check_nodes(node.right, names)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.UAdd, ast.USub)):
            raise _refuse(node)
        _check_nodes(node.operand, names)
    elif isinstance(node, ast.Name):
        if node.id not in names:
            names.append(node.id)
    elif isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int):
            raise _refuse(node)
    elif _is_cdiv(node):
        assert isinstance(node, ast.Call)
        for arg in node.args:
            _check_nodes(arg, names)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CDIV:
        raise DimExprError(f"cdiv takes two arguments, cdiv(a, b) (the ceiling of a / b): got "
                           f"{ast.unparse(node)!r}; {_ALLOWED}")
    else:
        raise _refuse(node)


def _is_cdiv(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CDIV
            and len(node.args) == 2 and not node.keywords and not any(isinstance(a, ast.Starred) for a in node.args))


def _divisions(tree: ast.expr) -> list[tuple[ast.expr, ast.expr, ast.expr]]:
    """Each division in ``tree``, exact or ceiling: (the node, its dividend, its divisor)."""
    out: list[tuple[ast.expr, ast.expr, ast.expr]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            out.append((node, node.left, node.right))
        elif _is_cdiv(node):
            assert isinstance(node, ast.Call)
            out.append((node, node.args[0], node.args[1]))
    return out


@functools.lru_cache(maxsize=1024)
def parse(text: str) -> DimExpr:
    """The expression ``text`` (a dimension name is the simplest one); raises DimExprError saying what is
    wrong (a syntax error, a node outside the grammar)."""
    if not isinstance(text, str) or not text.strip():
        raise DimExprError(f"a dimension must be a non-empty string, got {text!r}")
    if len(text) > MAX_LENGTH:
        raise DimExprError(f"a dimension expression may have at most {MAX_LENGTH} characters, this one has "
                           f"{len(text)}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise DimExprError(f"not an expression ({exc.msg}); {_ALLOWED}") from None
    except (RecursionError, MemoryError, ValueError):
        raise DimExprError(f"cannot be parsed; {_ALLOWED}") from None
    names: list[str] = []
    try:
        _check_nodes(tree.body, names)
    except RecursionError:
        raise DimExprError("is nested too deeply") from None
    return DimExpr(text, tuple(names), tree.body)


@dataclass(frozen=True)
class DimExpr:
    """A parsed dimension: its text as written, the names it uses and its syntax tree."""

    #: the text as written in ``Tensor.dims`` (how messages name the axis)
    text: str
    #: the names it uses, in order of first appearance (dimensions and constants alike)
    names: tuple[str, ...]
    _tree: ast.expr = field(repr=False, compare=False)

    @property
    def plain(self) -> bool:
        """Whether it is a name alone (``"K"``): a dimension, or a constant used as a fixed size."""
        return isinstance(self._tree, ast.Name)

    def dims(self, constants: Mapping[str, int]) -> tuple[str, ...]:
        """The dimension names it uses (its names that are not constants)."""
        return tuple(n for n in self.names if n not in constants)

    # ------------------------------------------------------------------ checks against a spec

    def problem(self, known: set[str] | frozenset[str], constants: Mapping[str, int]) -> str | None:
        """What is wrong with it in a spec whose dimensions are ``known`` (None when nothing is): an unknown
        name, a divisor that holds a dimension, or a part made of constants alone that is not a whole
        positive size."""
        for name in self.names:
            if name not in known and name not in constants:
                dims = ", ".join(sorted(known)) or "none"
                consts = ", ".join(sorted(constants)) or "none"
                return (f"unknown name {name!r}: neither a dimension of the spec (a plain dim of some tensor, a "
                        f"tiles key or the loop_dim: {dims}) nor one of its constants ({consts})")
        for node, dividend, divisor in _divisions(self._tree):
            held = [n.id for n in ast.walk(divisor) if isinstance(n, ast.Name) and n.id not in constants]
            if held:
                return (f"divides by {ast.unparse(divisor)!r}, which holds the dimension {held[0]!r}: a "
                        "divisor may hold only integer literals and constants")
            if not any(isinstance(n, ast.Name) and n.id not in constants for n in ast.walk(dividend)):
                try:  # constants alone: whole at every shape, or at none
                    self._eval(node, constants)
                except DimExprError as exc:
                    return str(exc)
        if not self.dims(constants):
            try:
                self.value(constants)
            except DimExprError as exc:
                return str(exc)
        return None

    # ------------------------------------------------------------------ evaluation

    def value(self, sizes: Mapping[str, int]) -> int:
        """Its size, with ``sizes`` giving every name (the shape's dimensions and the constants).

        Raises DimExprError for an unknown name, a division that is not whole, or a size below 1."""
        result = self._eval(self._tree, sizes)
        if result < 1:
            raise DimExprError(f"{self.text} is {result}, not a positive size")
        return int(result)

    def _eval(self, node: ast.expr, sizes: Mapping[str, int]) -> Fraction:
        if isinstance(node, ast.Constant):
            return _literal(node)
        if isinstance(node, ast.Name):
            if node.id not in sizes:
                raise DimExprError(f"unknown name {node.id!r}")
            return Fraction(int(sizes[node.id]))
        if isinstance(node, ast.UnaryOp):
            inner = self._eval(node.operand, sizes)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.Call):  # cdiv(a, b): parse() admits no other call
            a, b = (self._eval(arg, sizes) for arg in node.args)
            if b <= 0:
                raise DimExprError(f"{ast.unparse(node)} divides by {b}, not a positive number")
            return Fraction(math.ceil(a / b))
        assert isinstance(node, ast.BinOp)  # parse() admits nothing else
        left = self._eval(node.left, sizes)
        right = self._eval(node.right, sizes)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        text = self.text.strip() if node is self._tree else ast.unparse(node)
        if right == 0:
            raise DimExprError(f"{text} divides by zero")
        quotient = left / right
        if quotient.denominator != 1:
            raise DimExprError(f"{text} is {left}/{right}, not a whole number ('/' is exact division)")
        return quotient

    # ------------------------------------------------------------------ analysis

    def affine(self, constants: Mapping[str, int]) -> _Affine | None:
        """Its affine form over the dimensions (None: not affine, such as ``M*N``), constants substituted."""
        return self._affine(self._tree, constants)

    def _affine(self, node: ast.expr, constants: Mapping[str, int]) -> _Affine | None:
        if isinstance(node, ast.Constant):
            return {None: _literal(node)}
        if isinstance(node, ast.Name):
            if node.id in constants:
                return {None: Fraction(int(constants[node.id]))}
            return {node.id: Fraction(1)}
        if isinstance(node, ast.Call):  # cdiv: a ceiling is not affine
            return None
        if isinstance(node, ast.UnaryOp):
            inner = self._affine(node.operand, constants)
            if inner is None or isinstance(node.op, ast.UAdd):
                return inner
            return {k: -v for k, v in inner.items()}
        assert isinstance(node, ast.BinOp)
        left = self._affine(node.left, constants)
        right = self._affine(node.right, constants)
        if left is None or right is None:
            return None
        if isinstance(node.op, (ast.Add, ast.Sub)):
            sign = 1 if isinstance(node.op, ast.Add) else -1
            out = dict(left)
            for k, v in right.items():
                out[k] = out.get(k, Fraction(0)) + sign * v
            return {k: v for k, v in out.items() if v != 0 or k is None}
        if isinstance(node.op, ast.Mult):
            if set(left) <= {None}:
                factor, form = left.get(None, Fraction(0)), right
            elif set(right) <= {None}:
                factor, form = right.get(None, Fraction(0)), left
            else:
                return None
            return {k: v * factor for k, v in form.items() if v * factor != 0 or k is None}
        if not set(right) <= {None} or right.get(None, Fraction(0)) == 0:
            return None
        divisor = right[None]
        return {k: v / divisor for k, v in left.items()}

    def multiple(self, constants: Mapping[str, int]) -> tuple[str, Fraction] | None:
        """``(D, c)`` when it is ``c * D`` for one dimension D and every size of D (``K/8``: ``("K", 1/8)``,
        ``2*N``: ``("N", 2)``); None otherwise (a constant offset, two dimensions, a product)."""
        form = self.affine(constants)
        if form is None or form.get(None, Fraction(0)) != 0:
            return None
        dims = [(k, v) for k, v in form.items() if k is not None]
        if len(dims) != 1 or dims[0][1] <= 0:
            return None
        name, coefficient = dims[0]
        assert name is not None
        return name, coefficient

    def divisibility(self, constants: Mapping[str, int]) -> dict[str, int]:
        """``{D: n}``: what its divisions imply for the dimensions, each a division of ``c * D`` by
        constants (``K/8``: K a multiple of 8; ``2*K/8``: of 4; ``(K/8)/4``: of 32)."""
        out: dict[str, int] = {}
        for node in ast.walk(self._tree):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
                continue
            whole = self._affine(node, constants)
            left = self._affine(node.left, constants)
            if whole is None or left is None or left.get(None, Fraction(0)) != 0:
                continue
            terms = [(k, v) for k, v in whole.items() if k is not None]
            if len(terms) != 1:
                continue
            dim, coefficient = terms[0]
            assert dim is not None
            if coefficient.denominator > 1:
                n = coefficient.denominator
                out[dim] = out[dim] * n // math.gcd(out[dim], n) if dim in out else n
        return out

    def reach(self, tiles: Mapping[str, int], constants: Mapping[str, int]) -> int:
        """How far a program may reach along this axis past an edge, for the guard bands: the expression with
        each dimension replaced by its tile (1 where it has none) and every ``-`` read as ``+``, rounded up;
        1 for an expression of constants alone (an axis of fixed size, like an untiled dimension)."""
        if not self.dims(constants):
            return 1
        return max(1, math.ceil(self._reach(self._tree, tiles, constants)))

    def _reach(self, node: ast.expr, tiles: Mapping[str, int], constants: Mapping[str, int]) -> Fraction:
        if isinstance(node, ast.Constant):
            return _literal(node)
        if isinstance(node, ast.Name):
            if node.id in constants:
                return Fraction(int(constants[node.id]))
            return Fraction(int(tiles.get(node.id, 1)))
        if isinstance(node, ast.UnaryOp):
            return self._reach(node.operand, tiles, constants)
        if isinstance(node, ast.Call):  # cdiv(a, b): a program reaches at most one more chunk
            a, b = (self._reach(arg, tiles, constants) for arg in node.args)
            return Fraction(math.ceil(a / b)) + 1 if b else a
        assert isinstance(node, ast.BinOp)
        left = self._reach(node.left, tiles, constants)
        right = self._reach(node.right, tiles, constants)
        if isinstance(node.op, (ast.Add, ast.Sub)):
            return left + right
        if isinstance(node.op, ast.Mult):
            return left * right
        return left / right if right else left
