"""The mutant engine (reference_kernels/mutants/engine.py): one registry of every mutant in one
vocabulary, and edits that apply exactly once or fail naming the mutant. Imports no GPU package."""

from __future__ import annotations

import difflib
import sys
from typing import Any

import pytest

from reference_kernels.mutants import engine
from reference_kernels.mutants import gluon as gluon_mutants
from reference_kernels.mutants import triton as triton_mutants
from reference_kernels.mutants.engine import Edit, Mutant, MutantError, apply_edits


def test_registry_lists_every_family_in_one_vocabulary() -> None:
    from reference_kernels.mutants import cuda, gluon, hopper

    reg = engine.registry()
    assert set(reg) == set(triton_mutants.MUTANTS) | set(gluon.MUTANTS) | set(cuda.MUTANTS) | set(hopper.MUTANTS)
    assert {m.language for m in reg.values()} == {"triton", "cuda"}
    for m in reg.values():
        assert m.edits and m.check in engine.CHECKS and m.expect and m.bug and m.tags <= set(engine.TAGS), m
    # every sanitizer mutant is tagged so, and the tags say where the pipeline breaks
    assert {n for n, m in reg.items() if m.check.startswith("sanitizer:")} <= {
        n for n, m in reg.items() if "sanitizer" in m.tags}
    assert {"prologue", "epilogue", "tail"} <= {t for m in reg.values() for t in m.tags}


def test_registry_imports_no_gpu_package() -> None:
    import subprocess

    code = ("import sys; from reference_kernels.mutants import engine; engine.registry(); "
            "print(sorted(m for m in ('triton', 'torch', 'cupy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_edit_applies_exactly_once_or_names_the_mutant() -> None:
    assert apply_edits("a = 1\nb = 2\n", [Edit("b = 2", "b = 3")], name="m") == "a = 1\nb = 3\n"
    with pytest.raises(MutantError, match=r"mutant m: the text to replace occurs 0 times.*'c = 1'"):
        apply_edits("a = 1\n", [Edit("c = 1", "c = 2")], name="m")
    with pytest.raises(MutantError, match=r"mutant twice: the text to replace occurs 2 times"):
        apply_edits("x\nx\n", [Edit("x", "y")], name="twice")
    # edits apply in order, each to the result of the one before
    assert apply_edits("x\n", [Edit("x", "y"), Edit("y", "z")], name="m") == "z\n"


def test_tagged_edits_are_confined_to_their_line() -> None:
    src = "  wait(0);  // pipecheck:wait\n  go();  // pipecheck:go\n"
    out = apply_edits(src, [Edit("0", "1", "wait"), Edit(None, "", "go")], name="m")
    assert out == "  wait(1);  // pipecheck:wait\n    // MUTANT m: was pipecheck:go\n"  # indent kept
    with pytest.raises(MutantError, match="exactly one line tagged // pipecheck:nope"):
        apply_edits(src, [Edit(None, "", "nope")], name="m")
    with pytest.raises(MutantError, match="mutant m: the line tagged pipecheck:go no longer contains 'stop'"):
        apply_edits(src, [Edit("stop", "x", "go")], name="m")


def test_declarations_are_validated() -> None:
    edit = (Edit("a", "b"),)
    with pytest.raises(MutantError, match="check 'speed' is not one of"):
        Mutant("x", "triton", "base", edit, "speed", "e", "bug")
    with pytest.raises(MutantError, match="language 'rust'"):
        Mutant("x", "rust", "base", edit, "coverage", "e", "bug")
    with pytest.raises(MutantError, match=r"tags \['middle'\]"):
        Mutant("x", "triton", "base", edit, "coverage", "e", "bug", frozenset({"middle"}))
    with pytest.raises(MutantError, match="no edits"):
        Mutant("x", "triton", "base", (), "coverage", "e", "bug")
    with pytest.raises(MutantError, match="needs the text it replaces"):
        Edit(None, "y")


@pytest.mark.parametrize("name", list(triton_mutants.MUTANTS))
def test_triton_mutant_source_is_the_base_with_its_edits(name: str) -> None:
    base = triton_mutants.BASE_SOURCE.read_text()
    mutated = triton_mutants.mutant_source(name)
    changed = [d for d in difflib.ndiff(base.splitlines(), mutated.splitlines()) if d[:2] in ("- ", "+ ")]
    assert changed, f"{name} is identical to its base"
    m = triton_mutants.MUTANTS[name]
    # undoing the edits, last first, gives the base back: the mutant is the base plus its edits, nothing else
    undone = mutated
    for edit in reversed(m.edits):
        assert undone.count(edit.new) == 1, (name, edit)
        undone = undone.replace(edit.new, edit.old or "", 1)
    assert undone == base


@pytest.mark.parametrize(
    "family, label, broken, name",
    [(triton_mutants, "Triton", ("range(0, k_tiles)", "range(k_tiles)"), "gemm_last_k_tile_dropped"),
     (gluon_mutants, "Gluon", ("parity ^ 1)", "parity ^ True)"), "gluon_loader_skips_empty_wait")],
    ids=["triton", "gluon"])
def test_a_mutant_that_no_longer_applies_fails_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path, family: Any,
                                                         label: str, broken: tuple[str, str], name: str) -> None:
    base = tmp_path / family.BASE_SOURCE.name
    base.write_text(family.BASE_SOURCE.read_text().replace(*broken))
    monkeypatch.setattr(family, "BASE_SOURCE", base)
    with pytest.raises(MutantError, match=rf"mutant {name}: the text to replace occurs 0 times"):
        family.mutant_source(name)
    with pytest.raises(MutantError, match=f"unknown {label} mutant 'nope'"):
        family.mutant_source("nope")
