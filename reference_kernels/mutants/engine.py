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

import atexit
import hashlib
import importlib.util
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

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
    # the check that catches it on the GPU tier and a fragment of what it says, where that is not ``check``:
    # a read past a tensor whose values the kernel discards fails coverage on the CPU tier (the interpreter's
    # addresses are checked) but lands in a guard band on the GPU, where memcheck's exact allocations see it
    gpu_check: str | None = None
    gpu_expect: str | None = None

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
        if (self.gpu_check is None) != (self.gpu_expect is None) or (self.gpu_check is not None
                                                                    and self.gpu_check not in CHECKS):
            raise MutantError(f"mutant {self.name}: gpu_check must be one of {CHECKS}, given with gpu_expect")

    def catcher(self, on_gpu: bool) -> tuple[str, str]:
        """(check, message fragment) of what catches this mutant on the GPU tier (``on_gpu``) or the CPU tier."""
        if on_gpu and self.gpu_check is not None:
            assert self.gpu_expect is not None  # __post_init__
            return self.gpu_check, self.gpu_expect
        return self.check, self.expect

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


_MODULE_DIRS: dict[str, Path] = {}


def import_source(kind: str, name: str, source: str) -> ModuleType:
    """Write ``source`` (an edited kernel module) to a file of this process and import it: ``triton.jit``
    and ``gluon.jit`` read the source of the functions they wrap from a real file. The module is named
    by ``kind``, ``name`` and the source's hash; the files are removed at exit. Callers serialize calls
    (each keeps its own lock and cache of built mutants)."""
    if kind not in _MODULE_DIRS:
        path = Path(tempfile.mkdtemp(prefix=f"pipecheck-{kind}-mutants-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _MODULE_DIRS[kind] = path
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    module_name = f"pipecheck_{kind}_mutant_{name}_{digest}"
    path = _MODULE_DIRS[kind] / f"{module_name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py path always has a loader
        raise MutantError(f"mutant {name}: cannot import the generated module {path.name}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[module_name]
        raise MutantError(f"mutant {name}: the generated module does not import: {type(exc).__name__}: {exc}") from exc
    return module


def edited_source(mutants: Mapping[str, Mutant], name: str, family: str, base: Path) -> str:
    """The source of mutant ``name`` of ``mutants``: the file ``base`` with its edits applied;
    :class:`MutantError` naming the known ones for an unknown name (``family`` names the set)."""
    try:
        m = mutants[name]
    except KeyError:
        raise MutantError(f"unknown {family} mutant {name!r} (known: {', '.join(mutants)})") from None
    return m.apply(base.read_text())


def batch_module_head(generator: str, what: str, *, dry_run: bool) -> list[str]:
    """The first lines of a generated batch test module: its docstring (made by ``generator``, holding
    ``what``), pytest, the generator's ``run_case``, the GPU marker and ``DRY_RUN`` (launch nothing)."""
    return [f'"""Generated by {generator}.module_source: {what}."""', "", "import pytest", "",
            f"from {generator} import run_case", "", "pytestmark = pytest.mark.gpu", f"DRY_RUN = {dry_run!r}"]


def pytest_outcomes(output: str) -> dict[str, str]:
    """{test function name: PASSED/FAILED/ERROR/SKIPPED/XFAIL/XPASS} from ``-rA``'s short summary lines."""
    out: dict[str, str] = {}
    for line in output.splitlines():
        m = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", line)
        if m and "::" in m.group(2):
            out.setdefault(m.group(2).rsplit("::", 1)[-1], m.group(1))
    return out


def short_result(result: Mapping[str, Any] | None) -> str:
    """One check result of a ``--pipecheck-json`` document for a problem message: verdict, summary, reason
    and, when it did not pass, the tail of the child's output."""
    if result is None:
        return "no result"
    d = result.get("details") or {}
    text = f"{result.get('verdict')}: {result.get('summary')!r}"
    if d.get("reason"):
        text += f"; reason: {str(d['reason'])[-600:]}"
    if result.get("verdict") != "pass" and d.get("output"):
        text += "\n      child output (tail):\n" + "\n".join(
            "        " + ln for ln in str(d["output"]).splitlines()[-15:])
    return text
