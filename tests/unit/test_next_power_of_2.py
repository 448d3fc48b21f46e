"""The tutorial's spec for a kernel whose block is ``triton.next_power_of_2(N)`` works as written: the
generated N fall just under, on and between powers of two, the correct kernel passes every check there,
and the same kernel without its store mask is caught. The example is read from docs/tutorial.md, so the
document cannot drift from what is tested."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from pytest_pipecheck import KernelSpec, Tensor  # noqa: E402
from pytest_pipecheck.model.shapes import generate  # noqa: E402
from pytest_pipecheck.results import PipecheckFailure, Verdict  # noqa: E402

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"


def _example() -> str:
    text = TUTORIAL.read_text()
    section = text.split("### A block of `triton.next_power_of_2(N)`", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def _build(source: str) -> dict:
    path = TUTORIAL.parent / "_tutorial_next_power_of_2.py"  # a file name for Triton's source lookup
    namespace = {"torch": torch, "triton": triton, "tl": tl, "KernelSpec": KernelSpec, "Tensor": Tensor,
                 "__name__": "tutorial_next_power_of_2"}
    import linecache

    linecache.cache[str(path)] = (len(source), None, source.splitlines(True), str(path))
    exec(compile(source, str(path), "exec"), namespace)
    return namespace


def test_the_generated_rows_straddle_powers_of_two():
    spec = _build(_example())["SOFTMAX"]
    small = sorted({s["N"] for s in generate(spec, "small")})
    medium = sorted({s["N"] for s in generate(spec, "medium")})
    assert small == [17, 32, 63, 64, 159] and medium == [17, 32, 63, 64, 95, 159, 224]  # what the tutorial says
    blocks = {n: triton.next_power_of_2(n) for n in medium}
    assert any(b == n for n, b in blocks.items()) and any(b - n == 1 for n, b in blocks.items())
    assert max((b - n) / b for n, b in blocks.items()) > 0.35  # a masked tail of about half the block


def test_the_tutorials_softmax_passes_and_its_unmasked_store_is_caught(pipecheck):
    if pipecheck.has_gpu:
        pytest.skip("the tutorial's example is checked on the CPU tier, in Triton's interpreter")
    example = _example()
    spec = _build(example)["SOFTMAX"]
    for shape in generate(spec, "small"):
        assert all(r.verdict is Verdict.PASS for r in pipecheck.check_kernel(spec, shape))
    mutant_source = example.replace("e / tl.sum(e, axis=0), mask=cols < n_cols)", "e / tl.sum(e, axis=0))")
    assert mutant_source != example
    mutant = _build(mutant_source)["SOFTMAX"]
    with pipecheck.expecting_failures(), pytest.raises(PipecheckFailure, match=r"written outside 'y'"):
        pipecheck.check_coverage(mutant, "M2-N17")
