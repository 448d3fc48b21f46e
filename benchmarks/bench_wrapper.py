"""Benchmark: the wrapper form (call=) against the spec form (launch=) on the same kernel (goal: <= 1.2x).

Both forms run every correctness check (coverage, tile probe, determinism) at the same shape on the
same kernel, with the same (contiguous) input layout; only the launch path differs. The wrapper form
calls the user's function under the dispatch mode that intercepts its allocations (poison, guard
bands, one record per allocation) and then maps and checks what it returned.

Kinds:

* ``triton``: a Triton kernel behind its wrapper (``scale`` of tests/unit/test_wrapper.py): the
  interpreter on the CPU, a real launch on CUDA.
* ``torch``: a pure-torch "kernel" (one ``torch.mul(..., out=)``): no interpreter, so the kernel costs
  almost nothing and the fixed cost of the wrapper form per launch shows at its largest.

A third form, ``floor``, is the spec form whose launch runs the wrapper's own call under a
pass-through ``TorchDispatchMode`` (it intercepts every op and does nothing with it) and copies the
result into the output pipecheck allocated. It is the least any wrapper form built on a dispatch mode
can cost: the floor's excess over the spec form is the wrapper's own allocation plus torch's
dispatch-mode machinery (entering, leaving, and a C++ -> Python -> C++ round trip for every op the call
dispatches); the wrapper form's excess over the floor is pipecheck's own work (placing, poisoning and
recording each allocation, mapping and checking what the call returned).

Run (prints, per kind, the median time of each form and the ratios; no timing is asserted anywhere):

    python benchmarks/bench_wrapper.py                  # device: cuda when torch sees one, else cpu
    python benchmarks/bench_wrapper.py --device cpu --kinds torch --rounds 300
    python -m pytest benchmarks/bench_wrapper.py -p no:cacheprovider --benchmark-only

Measured on the CPU tier (2 cores shared with other jobs; python 3.11, torch 2.13, triton 3.9;
``--rounds 300``; the ratios are medians of per-round ratios, the ranges those of repeated runs):

* ``torch``: wrapper/spec 1.36-1.40x, floor/spec 1.24-1.27x. Per launch (16 per check_kernel, the spec
  form about 300 us each): the call under a do-nothing mode +76-85 us, pipecheck's interception
  +39-45 us. The goal of 1.2x is below the floor here: a pass-through dispatch mode around this
  wrapper's call (three ops: empty_like, unsqueeze, mul.out) already costs more than a fifth of a
  check whose kernel is one torch.mul on 33x200 elements.
* ``triton`` (the interpreter, about 120 ms per launch): 0.99-1.00x, floor 0.99-1.03x (within the
  noise).

On CUDA (H100): Triton 1.140-1.170x, pure torch 1.188-1.217x
(docs/validation/2026-11-25-h100-0723/bench-wrapper-gpu.txt).
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))  # the Triton kernel and its wrapper
if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # this checkout's pytest_pipecheck, not an installed one

SHAPE = "M33-N200"
KINDS = ("triton", "torch")
FORMS = ("spec", "floor", "wrapper")
GOAL = 1.2


@dataclass
class Forms:
    """The three forms of one kind, and how many launches one check_kernel makes (counted)."""

    kind: str
    spec: Any
    floor: Any
    wrapper: Any
    launches: list[int]

    def of(self, form: str) -> Any:
        return {"spec": self.spec, "floor": self.floor, "wrapper": self.wrapper}[form]


def _pass_mode() -> Any:
    from torch.utils._python_dispatch import TorchDispatchMode

    class PassThrough(TorchDispatchMode):
        """Intercepts every op and runs it unchanged: the dispatch mode's own cost, and nothing else."""

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            return func(*args, **(kwargs or {}))

    return PassThrough


def make_forms(kind: str) -> Forms:
    from pytest_pipecheck.model.spec import KernelSpec
    from pytest_pipecheck.model.tensor import Tensor

    counter = [0]
    if kind == "triton":
        import triton
        from test_wrapper import BLOCK_M, BLOCK_N, reference, scale, scale_kernel

        def launch(arrays: Any, dims: Any) -> None:
            counter[0] += 1
            x, w, y = arrays["x"], arrays["w"], arrays["y"]
            M, N = x.shape
            scale_kernel[(triton.cdiv(M, BLOCK_M),)](x, w, y, M, N, x.stride(0), x.stride(1), y.stride(0),
                                                     y.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                                     SKIP_LAST=False, UNMASKED=False)

        def call(x: Any, w: Any) -> Any:
            counter[0] += 1
            return scale(x, w)
    elif kind == "torch":
        import torch

        BLOCK_M, BLOCK_N = 8, 16

        def reference(arrays: Any, dims: Any) -> dict[str, Any]:
            return {"y": arrays["x"].double() * arrays["w"].double()[None, :]}

        def launch(arrays: Any, dims: Any) -> None:
            counter[0] += 1
            torch.mul(arrays["x"], arrays["w"][None, :], out=arrays["y"])

        def call(x: Any, w: Any) -> Any:
            counter[0] += 1
            y = torch.empty_like(x)
            torch.mul(x, w[None, :], out=y)
            return y
    else:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")

    mode = _pass_mode()

    def call_under_mode(arrays: Any, dims: Any) -> None:
        # the wrapper's own call (its allocation and launch), under a mode that does nothing; its
        # result is copied into the output pipecheck allocated, outside the mode
        with mode():
            y = call(arrays["x"], arrays["w"])
        arrays["y"].copy_(y)

    tensors = [Tensor("x", ("M", "N")), Tensor("w", ("N",)), Tensor("y", ("M", "N"), role="output")]
    common = dict(reference=reference, tiles={"M": BLOCK_M, "N": BLOCK_N}, loop_dim="N")
    # the same layout for every form (contiguous inputs), so only the launch path differs
    spec_form = KernelSpec(f"{kind}_spec", launch=launch, tensors=[
        Tensor(t.name, t.dims, role=t.role, layout="contiguous") for t in tensors], **common)  # type: ignore[arg-type]
    floor_form = replace(spec_form, name=f"{kind}_floor", launch=call_under_mode)
    wrapper_form = KernelSpec(f"{kind}_wrapper", call=call, tensors=tensors, **common)  # type: ignore[arg-type]
    return Forms(kind, spec_form, floor_form, wrapper_form, counter)


def _check(pc: Any, spec: Any) -> None:
    results = pc.check_kernel(spec, SHAPE)
    bad = [r for r in results if r.verdict.value != "pass"]
    if bad:
        raise RuntimeError(f"{spec.name}: {bad[0].check} {bad[0].verdict.value}: {bad[0].summary}")


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kind", KINDS)
def test_bench_check_kernel(benchmark, pipecheck, kind, form) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    if kind == "triton":
        pytest.importorskip("triton")
    spec = make_forms(kind).of(form)
    benchmark.group = f"{kind} on {pipecheck.device} at {SHAPE}"
    benchmark(lambda: _check(pipecheck, spec))


# ----------------------------------------------------------------------------- the script


def _measure(forms: Forms, new_pc: Callable[[], Any], rounds: int, warmup: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {f: [] for f in FORMS}
    for i in range(warmup + rounds):
        # rotate the order so that no form always runs right after another one
        order = FORMS[i % 3:] + FORMS[:i % 3]
        for form in order:
            spec = forms.of(form)
            pc = new_pc()
            start = time.perf_counter()
            _check(pc, spec)
            elapsed = time.perf_counter() - start
            if i >= warmup:
                times[form].append(elapsed)
    return times


def _profile(spec: Any, new_pc: Callable[[], Any], rounds: int) -> None:
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(rounds):
        _check(new_pc(), spec)
    prof.disable()
    sys.stdout.write(f"{spec.name}: {rounds} rounds under cProfile\n")
    pstats.Stats(prof, stream=sys.stdout).sort_stats("tottime").print_stats(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="auto: cuda when torch sees a GPU, else cpu (the Triton interpreter)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: triton, torch")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds of the three forms (default: 5 for triton on cpu, 200 otherwise)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--profile", choices=FORMS, default=None,
                        help="instead of timing, run this form under cProfile for the rounds and print the "
                             "functions taking the most time of their own")
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        parser.error(f"--kinds {args.kinds!r}: each must be one of {', '.join(KINDS)}")

    device = args.device
    if device in ("auto", "cuda"):
        import torch

        if torch.cuda.is_available():
            device = "cuda"
        elif device == "cuda":
            sys.stderr.write("--device cuda: torch sees no CUDA device\n")
            return 2
        else:
            device = "cpu"
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    elif os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        sys.stderr.write("TRITON_INTERPRET is set: unset it to benchmark on cuda\n")
        return 2

    from pytest_pipecheck.config import PipecheckConfig
    from pytest_pipecheck.device import detect_tier
    from pytest_pipecheck.fixture import Pipecheck

    tier = detect_tier("cpu" if device == "cpu" else "auto")
    if (tier.tier == "gpu") != (device == "cuda"):
        sys.stderr.write(f"wanted {device}, but the tier is {tier.tier} ({tier.reason})\n")
        return 2
    import torch

    where = f"{device} ({torch.cuda.get_device_name()})" if device == "cuda" else "cpu"
    sys.stdout.write(f"bench_wrapper on {where}: python {sys.version.split()[0]}, torch {torch.__version__}"
                     + (f", triton {sys.modules['triton'].__version__}" if 'triton' in sys.modules else "")
                     + f", shape {SHAPE}, goal wrapper/spec <= {GOAL}x\n")
    rows = []
    for kind in kinds:
        forms = make_forms(kind)
        forms.launches[0] = 0
        _check(Pipecheck(f"bench::{kind}", PipecheckConfig(), tier, 1), forms.wrapper)
        launches = forms.launches[0]
        rounds = args.rounds or (5 if kind == "triton" and device == "cpu" else 200)
        gc.collect()
        def new_pc(nodeid: str = f"bench::{kind}") -> Any:
            return Pipecheck(nodeid, PipecheckConfig(), tier, 1)

        if args.profile:
            _profile(forms.of(args.profile), new_pc, rounds)
            continue
        times = _measure(forms, new_pc, rounds, args.warmup)
        med = {f: statistics.median(v) for f, v in times.items()}
        rows.append((kind, med, launches, times))
        sys.stdout.write(
            f"{kind:7s} spec {med['spec'] * 1e3:9.3f} ms   floor {med['floor'] * 1e3:9.3f} ms   "
            f"wrapper {med['wrapper'] * 1e3:9.3f} ms   (median of {rounds}, {launches} launches per check_kernel)\n")
    if args.profile:
        return 0
    sys.stdout.write("\nratios, medians of the per-round ratios (wrapper/spec is the goal; floor/spec is what a\n"
                     "do-nothing dispatch mode around the wrapper's own call costs by itself):\n")
    for kind, med, launches, times in rows:
        # each round runs the three forms back to back: the median of the per-round ratios cancels load
        # that changes more slowly than a round (another process on the machine), which the ratio of the
        # medians does not
        ratio = statistics.median(w / s for w, s in zip(times["wrapper"], times["spec"]))
        floor = statistics.median(f / s for f, s in zip(times["floor"], times["spec"]))
        per_launch = (ratio - 1) * med["spec"] / max(1, launches) * 1e6
        mode_part = (floor - 1) * med["spec"] / max(1, launches) * 1e6
        verdict = "within the goal" if ratio <= GOAL else "over the goal"
        sys.stdout.write(
            f"  {kind:7s} wrapper/spec {ratio:5.3f}x ({verdict})   floor/spec {floor:5.3f}x   "
            f"per launch: wrapper {per_launch:+7.1f} us = the call under a do-nothing mode {mode_part:+7.1f} us "
            f"+ pipecheck's interception {per_launch - mode_part:+7.1f} us\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
