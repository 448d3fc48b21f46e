"""One vocabulary for every mutant: a named, tagged edit of a reference kernel and the check that must catch it.

A mutant is never a copied kernel. It is a declaration, :class:`Mutant`:

``name``       what the bug is called (unique across every language);
``language``   ``"triton"`` or ``"cuda"`` (the Hopper GEMM is CUDA; Gluon is Triton);
``base``       the reference kernel the edits apply to (a Triton base module, a CUDA ladder kernel of
               ``reference_kernels.cuda.launch.KERNELS``, or the Hopper GEMM's entry point);
``edits``      :class:`Edit` s applied in order to the base source when the mutant is built;
``check``      the pipecheck check that must catch it (one of :data:`CHECKS`);
``expect``     a fragment of what that check says when it catches it;
``bug``        the bug in one line; ``tags`` where it sits (``prologue``, ``epilogue``, ``tail``,
               ``sanitizer``...; see :data:`TAGS`).

An :class:`Edit` replaces ``old`` with ``new``, exactly: ``old`` must occur exactly once in the
source (or, for an edit confined to a line tagged ``// pipecheck:<tag>`` in a CUDA source, in that
line), else :func:`apply_edits` raises :class:`MutantError` naming the mutant. So a fix to a reference
kernel either reaches its mutants or stops them loudly, never silently.

:func:`registry` lists every mutant of the four families (Triton GEMM, Gluon warp-specialized GEMM,
CUDA ladder, Hopper GEMM) in this vocabulary; each family keeps its own builder (Triton and Gluon: the
edited source is written to a module file and imported, so ``triton.jit`` / ``gluon.jit`` read real
source lines; CUDA: the edited source goes to the ladder's or the Hopper launcher's compiler).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["CHECKS", "LANGUAGES", "TAGS", "Edit", "Mutant", "MutantError", "apply_edits", "registry"]

LANGUAGES = ("triton", "cuda")
# every check a mutant may name: pipecheck's array checks, the sanitizer tools, Triton's concurrency
# sanitizer (``consan``: Gluon and warp-specialized Triton kernels), the watchdog, the performance gates
CHECKS = ("coverage", "tile_probe", "determinism", "sanitizer:racecheck", "sanitizer:synccheck",
          "sanitizer:memcheck", "consan", "hang", "perf", "occupancy")
# where a bug sits in the pipeline, or what kind of bug it is
TAGS = ("prologue", "steady_state", "epilogue", "tail", "precision", "barrier", "sanitizer", "hang", "perf",
        "occupancy", "tma", "wgmma")


class MutantError(ValueError):
    """A mutant that does not apply to its base source, or a declaration that is not valid."""


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` with ``new``, exactly once.

    ``tag`` confines the edit to the one line of a CUDA source tagged ``// pipecheck:<tag>``; with a
    tag, ``old=None`` replaces that whole line (indentation kept), as the CUDA ladder's mutants do.
    """

    old: str | None
    new: str
    tag: str | None = None

    def __post_init__(self) -> None:
        if self.tag is None and not self.old:
            raise MutantError(f"an edit without a tag needs the text it replaces (new={self.new!r})")


@dataclass(frozen=True)
class Mutant:
    """A named, tagged edit of a reference kernel with the check that must catch it (module docstring)."""

    name: str
    language: str
    base: str
    edits: tuple[Edit, ...]
    check: str
    expect: str
    bug: str
    tags: frozenset[str] = frozenset()
    # a shape that shows the bug, in tiles of the base spec ({"M": 2, "K": 256, "N": 2}); None: the
    # generated shapes suffice
    shape_in_tiles: Mapping[str, int] | None = None
    extra: Mapping[str, object] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise MutantError(f"mutant {self.name}: language {self.language!r} is not one of {LANGUAGES}")
        if self.check not in CHECKS:
            raise MutantError(f"mutant {self.name}: check {self.check!r} is not one of {CHECKS}")
        unknown = sorted(set(self.tags) - set(TAGS))
        if unknown:
            raise MutantError(f"mutant {self.name}: tags {unknown} are not among {TAGS}")
        if not self.edits:
            raise MutantError(f"mutant {self.name}: no edits (a mutant differs from its base)")
        if not self.expect or not self.bug:
            raise MutantError(f"mutant {self.name}: needs the bug and the message fragment its check reports")

    def apply(self, source: str) -> str:
        """The base ``source`` with this mutant's edits applied (:func:`apply_edits`)."""
        return apply_edits(source, self.edits, name=self.name)


_TAG_RE = re.compile(r"//\s*pipecheck:([A-Za-z0-9_]+)")


def _tagged_line(lines: list[str], tag: str, name: str) -> int:
    hits = [i for i, line in enumerate(lines) if (m := _TAG_RE.search(line)) and m.group(1) == tag]
    if len(hits) != 1:
        raise MutantError(f"mutant {name}: expected exactly one line tagged // pipecheck:{tag} in the base "
                          f"source, found {len(hits)}")
    return hits[0]


def apply_edits(source: str, edits: Iterable[Edit], *, name: str) -> str:
    """Apply ``edits`` in order; each must apply exactly once, or :class:`MutantError` names ``name``."""
    for edit in edits:
        if edit.tag is None:
            assert edit.old is not None  # Edit.__post_init__
            count = source.count(edit.old)
            if count != 1:
                raise MutantError(f"mutant {name}: the text to replace occurs {count} times in the base source "
                                  f"(must be exactly once): {edit.old!r}")
            source = source.replace(edit.old, edit.new, 1)
            continue
        lines = source.splitlines(keepends=True)
        i = _tagged_line(lines, edit.tag, name)
        line = lines[i]
        if edit.old is None:
            body = line.rstrip("\r\n")
            indent = body[: len(body) - len(body.lstrip())]
            lines[i] = f"{indent}{edit.new}  // MUTANT {name}: was pipecheck:{edit.tag}".rstrip() + line[len(body):]
        else:
            count = line.count(edit.old)
            if count != 1:
                how = "no longer contains" if count == 0 else f"contains {count} times"
                raise MutantError(f"mutant {name}: the line tagged pipecheck:{edit.tag} {how} {edit.old!r} "
                                  f"(it reads {line.strip()!r}); update the mutant")
            lines[i] = line.replace(edit.old, edit.new, 1)
        source = "".join(lines)
    return source


def registry() -> dict[str, Mutant]:
    """Every mutant of every family, by name (imports no GPU package)."""
    from reference_kernels.mutants import cuda, gluon, hopper, triton

    out: dict[str, Mutant] = {}
    for family in (triton.MUTANTS, gluon.MUTANTS, cuda.as_mutants(), hopper.as_mutants()):
        for m in family.values():
            if m.name in out:
                raise MutantError(f"mutant name {m.name!r} is declared twice")
            out[m.name] = m
    return out
