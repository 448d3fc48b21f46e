"""The sanitizer child's side of "a compile is not the test's time" (pytest_pipecheck/sanitizer/compiling.py):
the lines it prints around Triton's compiles and binary loads, with Triton's real hook chains and a stand-in
for its compiler (there is no GPU to compile for here)."""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_pipecheck.sanitizer.compiling import CompileMarks
from pytest_pipecheck.sanitizer.parse import COMPILE_BEGIN, COMPILE_END

triton = pytest.importorskip("triton")
compiler = pytest.importorskip("triton.compiler")
from triton import knobs  # noqa: E402

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out


class Source:
    """What JITFunction hands triton.compiler.compile: an ASTSource, which has the kernel's name."""

    name = "scale_rows"


@pytest.fixture
def stand_in(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Triton's compiler, replaced by one that records what it compiled (and raises for a source "bad")."""
    compiled: list[Any] = []

    def compile(src: Any, target: Any = None, options: Any = None) -> str:
        compiled.append(src)
        if src == "bad":
            raise RuntimeError("PTXASError: ptxas failed")
        return "kernel"

    monkeypatch.setattr(compiler, "compile", compile)
    return compiled


@pytest.fixture
def marks(stand_in: list[Any]) -> Iterator[tuple[CompileMarks, list[str]]]:
    said: list[str] = []
    m = CompileMarks(said.append)
    m.start_test("t.py::test_k")
    try:
        yield m, said
    finally:
        m.close()


def _kinds(said: list[str]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for line in said:
        for kind, marker in (("begin", COMPILE_BEGIN), ("end", COMPILE_END)):
            if line.startswith(marker):
                out.append((kind, json.loads(line[len(marker):])))
    assert len(out) == len(said), said
    return out


def test_a_compile_is_bracketed_with_the_test_and_the_kernel(marks: tuple[CompileMarks, list[str]],
                                                           stand_in: list[Any]) -> None:
    _, said = marks
    assert compiler.compile(Source(), target=None, options={}) == "kernel"
    assert stand_in and isinstance(stand_in[0], Source)
    assert _kinds(said) == [("begin", {"test": "t.py::test_k", "kernel": "scale_rows", "step": "compile"}),
                            ("end", {"test": "t.py::test_k"})]


def test_a_compile_that_raises_still_ends(marks: tuple[CompileMarks, list[str]]) -> None:
    _, said = marks
    with pytest.raises(RuntimeError, match="ptxas failed"):
        compiler.compile("bad")
    assert [k for k, _ in _kinds(said)] == ["begin", "end"]


def test_a_load_is_bracketed_and_nested_stretches_print_once(marks: tuple[CompileMarks, list[str]]) -> None:
    _, said = marks
    knobs.runtime.kernel_load_start_hook(None, None, "scale_rows", {}, "hash")
    compiler.compile(Source())  # inside the load's stretch (another thread's compile, say): no lines of its own
    knobs.runtime.kernel_load_end_hook(None, object(), "scale_rows", {}, "hash")
    assert _kinds(said) == [("begin", {"test": "t.py::test_k", "kernel": "scale_rows", "step": "load"}),
                            ("end", {"test": "t.py::test_k"})]


def test_a_launch_or_the_tests_end_closes_a_stretch_left_open(marks: tuple[CompileMarks, list[str]]) -> None:
    """A load that raised between its start and end hooks (out of resources): the next launch ends the stretch,
    and so does the end of the test."""
    m, said = marks
    knobs.runtime.kernel_load_start_hook(None, None, "too_big", {}, "hash")
    knobs.runtime.launch_enter_hook({"name": "other", "function": 1, "stream": 0})
    knobs.runtime.kernel_load_start_hook(None, None, "too_big", {}, "hash")
    m.end_test()
    assert [k for k, _ in _kinds(said)] == ["begin", "end", "begin", "end"]
    m.end_test()  # nothing open: nothing said
    assert len(said) == 4


def test_close_gives_triton_back_its_compiler_and_hooks(stand_in: list[Any]) -> None:
    original = compiler.compile
    said: list[str] = []
    m = CompileMarks(said.append)
    m.start_test("t.py::test_k")
    wrapped = compiler.compile
    assert wrapped is not original
    m.close()
    assert compiler.compile is original
    assert m._on_load_start not in knobs.runtime.kernel_load_start_hook.calls
    assert m._on_launch not in knobs.runtime.launch_enter_hook.calls
    wrapped(Source())  # a binder that took the wrapper before: compiles, says nothing
    assert said == [] and len(stand_in) == 1


def test_nothing_is_followed_where_triton_is_not_imported(monkeypatch: pytest.MonkeyPatch,
                                                          stand_in: list[Any]) -> None:
    original = compiler.compile
    monkeypatch.delitem(sys.modules, "triton")
    m = CompileMarks(lambda line: None)
    m.start_test("t.py::test_k")
    assert compiler.compile is original and not m.problem
    m.close()


def test_triton_takes_its_compiler_from_triton_compiler_when_a_kernel_first_runs() -> None:
    """What the wrapper relies on: a JITFunction takes ``compile`` from ``triton.compiler`` when its binder is
    made (the kernel's first run on a device), not when Triton is imported."""
    from triton.runtime.jit import JITFunction

    source = inspect.getsource(JITFunction.create_binder)
    assert "import" in source and "compile" in source and "self.compile = compile" in source, source
