"""The reviewed known-false-positive rules filter exactly their records, only for the versions they are
keyed to and only in the kernels they were reviewed on (pytest_pipecheck/sanitizer/known.py), on real
records of compute-sanitizer 2025.3.1 and 2026.4.0 and the kernel facts a child records
(pytest_pipecheck/sanitizer/launches.py) from real Triton cache files."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_pipecheck.sanitizer.known import RULES, Rule, filter_findings, option_args
from pytest_pipecheck.sanitizer.launches import KernelFacts, Recorder, facts_from_group, facts_from_ir
from pytest_pipecheck.sanitizer.parse import LAUNCH, parse_text

DATA = Path(__file__).resolve().parents[1] / "data" / "sanitizer"
ROOT = Path(__file__).resolve().parents[2]
OLD, NEW = (2025, 3, 1), (2026, 4)
DISPATCH = "triton-ws-dispatch-state"


def _found(name: str, tool: str, text: str | None = None):  # type: ignore[no-untyped-def]
    return parse_text(text if text is not None else (DATA / name).read_text(), tool).findings


def _gluon(variant: str) -> KernelFacts:
    """The facts of the Gluon warp-specialized GEMM from the cache files Triton 3.6 loaded it from (the
    run of racecheck_gluon_ws_gemm_*_2025_3_1.txt)."""
    folder = DATA / "triton_3_6_gluon_ws_gemm" / variant
    metadata = json.loads((folder / "gluon_ws_gemm_kernel.json").read_text())
    ttgir, llir = (gzip.decompress((folder / f"gluon_ws_gemm_kernel.{ext}.gz").read_bytes()).decode()
                   for ext in ("ttgir", "llir"))
    return facts_from_ir("gluon_ws_gemm_kernel", metadata, ttgir, llir)


def _measured(def_line: int) -> KernelFacts:
    """The Gluon GEMM as measured with the samples racecheck_triton_ws_dispatch_*: 12 warps (8 in the
    default partition), 196788 bytes of shared memory, the dispatch state in the last 4, its def line
    246 or 256 (the file moved between the runs)."""
    return KernelFacts("gluon_ws_gemm_kernel", True, 196788, 12, 8, "reference_kernels/triton/gluon_gemm.py",
                       def_line, 196784)


# --------------------------------------------------------------------------- what a child records


def test_facts_of_the_gluon_gemm_compiled_by_triton_3_6() -> None:
    masked, tma = _gluon("masked"), _gluon("tma")
    assert (masked.warp_specialized, masked.num_warps, masked.default_warps, masked.workers) == (True, 12, 8, 4)
    assert (masked.def_file, masked.def_line) == ("reference_kernels/triton/gluon_gemm.py", 256)
    assert not masked.problem and not tma.problem
    # the racecheck hazards of that run are at 0x304b0-0x304b3: the dispatch state, 1 KB above offset 0
    assert masked.shared == 196788 and masked.dispatch_state == (196784, 196788)
    assert tma.shared == 229444 and tma.dispatch_state == (229440, 229444)
    assert KernelFacts.from_json(json.loads(json.dumps(masked.to_json()))) == masked


def test_facts_of_a_triton_kernel_with_and_without_warp_specialization() -> None:
    """The same Triton 3.x kernel compiled here (no GPU) with ``warp_specialize`` on and off: only the first
    is warp-specialized, and its dispatch state is where the LLVM IR stores it, not always at the end."""
    from _sass_artifacts import art

    def facts(k: Any) -> KernelFacts:
        # a compile in this process (the GPU tier) gives Triton's KernelMetadata, a named tuple; one in a child
        # (Triton's interpreter on, the CPU tier) a dict
        metadata = k.metadata if isinstance(k.metadata, dict) else k.metadata._asdict()
        return facts_from_ir(metadata["name"], metadata, k.asm["ttgir"], k.asm["llir"])

    ws, plain = (facts(k) for k in (art.triton_tma(True), art.triton_tma(False)))
    assert ws.warp_specialized is True and plain.warp_specialized is False
    assert (ws.def_line, plain.def_line) == (22, 22) and ws.def_file and ws.def_file.endswith("triton_gemm.py")
    assert plain.dispatch_state is None and plain.workers is None
    assert ws.dispatch_state is not None and ws.workers == ws.dispatch_state[1] - ws.dispatch_state[0]
    assert ws.shared is not None and ws.dispatch_state[1] <= ws.shared


def test_facts_that_cannot_be_read_say_so_and_establish_nothing() -> None:
    masked = DATA / "triton_3_6_gluon_ws_gemm" / "masked"
    metadata = json.loads((masked / "gluon_ws_gemm_kernel.json").read_text())
    ttgir = gzip.decompress((masked / "gluon_ws_gemm_kernel.ttgir.gz").read_bytes()).decode()
    no_ir = facts_from_ir("gluon_ws_gemm_kernel", metadata, None)
    assert no_ir.warp_specialized is None and no_ir.dispatch_state is None and "no TTGIR" in no_ir.problem
    no_llir = facts_from_ir("gluon_ws_gemm_kernel", metadata, ttgir)
    assert no_llir.warp_specialized and no_llir.dispatch_state is None and "no LLVM IR" in no_llir.problem
    # a second run of exit-state stores (another store of that value to shared memory): the place is unknown
    llir = gzip.decompress((masked / "gluon_ws_gemm_kernel.llir.gz").read_bytes()).decode()
    extra = llir.replace("\n}", "\n  store i8 3, ptr addrspace(3) getelementptr (i8, ptr addrspace(3) @global_smem,"
                                " i32 64), align 1\n}", 1)
    assert facts_from_ir("gluon_ws_gemm_kernel", metadata, ttgir, extra).dispatch_state is None
    assert facts_from_group("k", {"k.json": "/no/such/file.json"}).problem
    assert KernelFacts.from_json({"name": "k", "warp_specialized": "yes", "shared": True}) == KernelFacts("k")


def test_the_recorder_says_each_launched_kernel_once_per_test_through_tritons_hooks(tmp_path: Path) -> None:
    triton = pytest.importorskip("triton")
    from triton import knobs

    folder = tmp_path / "masked"
    folder.mkdir()
    group = {}
    for f in (DATA / "triton_3_6_gluon_ws_gemm" / "masked").iterdir():
        name = f.name.removesuffix(".gz")
        (folder / name).write_bytes(gzip.decompress(f.read_bytes()) if f.name.endswith(".gz") else f.read_bytes())
        group[name] = str(folder / name)
    lines: list[str] = []
    rec = Recorder(lines.append)
    try:
        rec.start_test()  # Triton is imported: the hooks are chained
        assert triton is not None and rec.on_load in knobs.runtime.kernel_load_end_hook.calls
        knobs.runtime.kernel_load_end_hook(None, 7, "gluon_ws_gemm_kernel", group, "h")
        for _ in range(3):
            knobs.runtime.launch_enter_hook({"name": "gluon_ws_gemm_kernel", "function": 7, "stream": 0})
        knobs.runtime.launch_enter_hook({"name": "loaded_before", "function": 8, "stream": 0})
        first = list(lines)
        rec.start_test()
        knobs.runtime.launch_enter_hook({"name": "gluon_ws_gemm_kernel", "function": 7, "stream": 0})
        knobs.runtime.launch_enter_hook(object())  # not Triton's metadata: ignored, never raises
    finally:
        rec.close()
    assert rec.on_launch not in knobs.runtime.launch_enter_hook.calls
    assert [ln.startswith(LAUNCH) for ln in first] == [True, True]
    said = [KernelFacts.from_json(json.loads(ln[len(LAUNCH):])) for ln in first]
    assert said[0] == _gluon("masked")
    assert said[1].name == "loaded_before" and said[1].warp_specialized is None and "not seen" in said[1].problem
    assert len(lines) == 3  # the next test says its kernel again


# --------------------------------------------------------------------------- cuda::pipeline


def test_producer_commit_missing_wait_is_filtered_only_inside_producer_commit_and_only_for_measured_versions(
        ) -> None:
    found = _found("synccheck_pipeline_producer_commit_2025_3_1.txt", "synccheck")
    assert len(found) == 3
    kept, gone = filter_findings(found, "synccheck", OLD)
    assert not kept and len(gone["cuda-pipeline-producer-commit"]) == 3
    assert filter_findings(found, "synccheck", NEW)[0] == found
    assert filter_findings(found, "synccheck", (2025, 2))[0] == found  # before the version it was measured on
    assert filter_findings(found, "synccheck", None)[0] == found  # unknown version: nothing filtered
    text = (DATA / "synccheck_pipeline_producer_commit_2025_3_1.txt").read_text()
    # the same arrive reached from the user's own code first (not inside producer_commit): kept
    for frame in ("my_arrive(int)", "notcuda::arrive(int)", "my::cuda::arrive(int)",
                  "cuda::std::pair<int, int> my_arrive(int)"):
        user = text.replace("Device Frame: cuda::__4::barrier<", f"Device Frame: {frame}+0x10 in k.cu:3\n"
                            "=========         Device Frame: cuda::__4::barrier<")
        assert len(filter_findings(_found("", "synccheck", user), "synccheck", OLD)[0]) == 3, frame
    # without the device backtrace the frame cannot be told: kept
    bare = "\n".join(ln for ln in text.splitlines() if "Device Frame" not in ln)
    assert len(filter_findings(_found("", "synccheck", bare), "synccheck", OLD)[0]) == 3
    # a divergent barrier is not a missing wait: kept
    div = _found("synccheck_divergent_hostbt.txt", "synccheck")
    assert filter_findings(div, "synccheck", OLD)[0] == div


# --------------------------------------------------------------------------- the dispatch state


def test_dispatch_state_records_are_filtered_only_in_a_kernel_triton_warp_specialized() -> None:
    """The records of one run of the Gluon GEMM (both epilogues) with the facts of the kernels it loaded."""
    kernels = [_gluon("masked"), _gluon("tma")]
    for name, count in (("racecheck_gluon_ws_gemm_hazard_2025_3_1.txt", 4),
                        ("racecheck_gluon_ws_gemm_analysis_2025_3_1.txt", 2)):
        found = _found(name, "racecheck")
        assert len(found) == count, name
        kept, gone = filter_findings(found, "racecheck", OLD, kernels=kernels)
        assert not kept and len(gone[DISPATCH]) == count, name
        # the same records in a kernel of that name that Triton did not warp-specialize: a user's race, kept
        plain = [dataclasses.replace(k, warp_specialized=False) for k in kernels]
        assert filter_findings(found, "racecheck", OLD, kernels=plain)[0] == found, name
        # one of the kernels of that name is not warp-specialized: the record may be its own, kept
        assert filter_findings(found, "racecheck", OLD, kernels=[kernels[0], plain[1]])[0] == found, name
        # no facts (no Triton, hooks unavailable, an old child), none about this kernel, or another kernel's
        assert filter_findings(found, "racecheck", OLD)[0] == found, name
        assert filter_findings(found, "racecheck", OLD, kernels=[])[0] == found, name
        other = [dataclasses.replace(k, name="other_kernel") for k in kernels]
        assert filter_findings(found, "racecheck", OLD, kernels=other)[0] == found, name
        # the versions it was not measured on: before 2025.3, and 2026.4, which does not report it
        for version in ((2025, 2), (2025, 2, 9), NEW, (2026, 4, 0, 0), None):
            assert filter_findings(found, "racecheck", version, kernels=kernels)[0] == found, (name, version)
        assert not filter_findings(found, "racecheck", (2025, 4), kernels=kernels)[0]  # inside the window


def test_dispatch_state_hazards_must_lie_in_the_state_and_the_read_at_the_def_line() -> None:
    kernels = [_gluon("masked")]
    text = (DATA / "racecheck_gluon_ws_gemm_hazard_2025_3_1.txt").read_text()
    # just below and just past the 4 state bytes (0x400 + 196784 ...): kept
    for addr in ("0x304af", "0x304b4"):
        moved = _found("", "racecheck", text.replace("__shared__ 0x304b2", f"__shared__ {addr}"))
        kept, gone = filter_findings(moved, "racecheck", OLD, kernels=kernels)
        assert [f"__shared__ {addr}" in f.raw for f in kept] == [True] and len(gone[DISPATCH]) == 3, addr
    # the state of another kernel of that name counts (one kernel compiled for several shapes)
    assert not filter_findings(_found("", "racecheck", text), "racecheck", OLD, kernels=[_gluon("tma"), *kernels])[0]
    # the state's place unknown: kept
    unknown = [dataclasses.replace(k, dispatch_offset=None) for k in kernels]
    assert len(filter_findings(_found("", "racecheck", text), "racecheck", OLD, kernels=unknown)[0]) == 4
    # the read not at the kernel's def line (a statement of the kernel's body): kept, in both reports
    body = _found("", "racecheck", text.replace("+0x100 in gluon_gemm.py:256", "+0x100 in gluon_gemm.py:262"))
    assert len(filter_findings(body, "racecheck", OLD, kernels=kernels)[0]) == 4
    analysis = (DATA / "racecheck_gluon_ws_gemm_analysis_2025_3_1.txt").read_text()
    body = _found("", "racecheck", analysis.replace("+0xf0 in gluon_gemm.py:256", "+0xf0 in gluon_gemm.py:257"))
    kept, gone = filter_findings(body, "racecheck", OLD, kernels=[_gluon("masked"), _gluon("tma")])
    assert len(kept) == 1 and kept[0].line == 257 and len(gone[DISPATCH]) == 1
    # a def line known only by another file's name: kept
    elsewhere = [dataclasses.replace(k, def_file="other.py") for k in kernels]
    assert len(filter_findings(_found("", "racecheck", text), "racecheck", OLD, kernels=elsewhere)[0]) == 4


def test_dispatch_state_hazards_are_filtered_but_not_a_race_on_the_kernels_own_memory() -> None:
    """The samples of the first measurements (the kernel's def line was 246 then)."""
    found = _found("racecheck_triton_ws_dispatch_hazard_2025_3_1.txt", "racecheck")
    kernels = [_measured(246)]
    kept, gone = filter_findings(found, "racecheck", OLD, kernels=kernels)
    assert not kept and len(gone[DISPATCH]) == len(found) == 4
    assert filter_findings(found, "racecheck", NEW, kernels=kernels)[0] == found
    analysis = _found("racecheck_triton_ws_dispatch_analysis_constructed.txt", "racecheck")
    kept, gone = filter_findings(analysis, "racecheck", OLD, kernels=kernels)
    assert len(gone[DISPATCH]) == 2 and len(kept) == 1 and kept[0].line == 262
    # a hazard outside the 4 state bytes is not the dispatch state: kept
    text = (DATA / "racecheck_triton_ws_dispatch_hazard_2025_3_1.txt").read_text().replace(
        "__shared__ 0x304b0", "__shared__ 0x30400", 1)
    kept, gone = filter_findings(_found("", "racecheck", text), "racecheck", OLD, kernels=kernels)
    assert len(kept) == 1 and "0x30400" in kept[0].raw and len(gone[DISPATCH]) == 3
    # a CUDA C++ kernel's race at a low pc is not Triton's: kept
    cuda = _found("racecheck_race_analysis.txt", "racecheck")
    assert filter_findings(cuda, "racecheck", OLD, kernels=kernels)[0] == cuda


def test_dispatch_state_records_of_one_read_and_two_writes_are_filtered() -> None:
    """The analysis report of 2025.3.1 pairs the entry read with both writes of the default partition in
    one record (captured on a GPU: one launch, and the suite test's 12 records; tests/data/sanitizer/README.md)."""
    kernels = [_measured(256)]
    for name, count in (("racecheck_triton_ws_dispatch_analysis_2025_3_1.txt", 1),
                        ("racecheck_triton_ws_dispatch_suite_2025_3_1.txt", 12)):
        found = _found(name, "racecheck")
        assert len(found) == count and all(len(f.raw.splitlines()) == 3 for f in found), name
        kept, gone = filter_findings(found, "racecheck", OLD, kernels=kernels)
        assert not kept and len(gone[DISPATCH]) == count, name
        assert filter_findings(found, "racecheck", NEW, kernels=kernels)[0] == found
        assert filter_findings(found, "racecheck", OLD)[0] == found  # without the kernel's facts: kept
    text = (DATA / "racecheck_triton_ws_dispatch_analysis_2025_3_1.txt").read_text()
    # one of the writes inside the kernel's entry (another read/write pair at entry): kept
    entry_write = text.replace("+0x28d0", "+0x80")
    assert len(filter_findings(_found("", "racecheck", entry_write), "racecheck", OLD, kernels=kernels)[0]) == 1
    # the read in the kernel's body (a read of its own ring): kept
    body_read = text.replace("Read access at gluon_ws_gemm_kernel+0xf0", "Read access at gluon_ws_gemm_kernel+0x1b80")
    assert len(filter_findings(_found("", "racecheck", body_read), "racecheck", OLD, kernels=kernels)[0]) == 1
    # a second read in the record: kept
    two_reads = text.replace("and Write access at gluon_ws_gemm_kernel+0x28d0", "and Read access at "
                             "gluon_ws_gemm_kernel+0x28d0")
    assert len(filter_findings(_found("", "racecheck", two_reads), "racecheck", OLD, kernels=kernels)[0]) == 1


def test_a_users_race_of_the_dispatch_shape_in_a_kernel_not_warp_specialized_is_kept() -> None:
    """The false pass this rule had: any ``.py`` kernel with one read below pc 0x200 and writes above it."""
    found = _found("racecheck_triton_user_race_dispatch_shape_constructed.txt", "racecheck")
    plain = KernelFacts("matmul_tma_kernel", False, 98328, 4, 4, "tests/data/sass/triton_gemm.py", 22)
    assert len(found) == 1
    kept, gone = filter_findings(found, "racecheck", OLD)  # the child recorded no kernel
    assert kept == found and not gone
    for kernels in ([], [plain]):
        kept, gone = filter_findings(found, "racecheck", OLD, kernels=kernels)
        assert kept == found and not gone, kernels


# --------------------------------------------------------------------------- options and rules


def test_options_follow_the_version() -> None:
    assert option_args("initcheck", (2025, 3, 1)) == []
    # measured: 2025.3.1 has --check-warpgroup-mma (scripts/gpu/warpgroup_probe.py), not shared initcheck
    assert option_args("synccheck", (2025, 3, 1)) == ["--check-warpgroup-mma", "yes"]
    assert option_args("memcheck", (2025, 2)) == []
    assert option_args("initcheck", (2025, 4)) == ["--initcheck-address-space", "all"]
    assert option_args("synccheck", (2026, 4)) == ["--check-bulk-copy", "yes", "--check-warpgroup-mma", "yes"]
    assert option_args("racecheck", (2026, 4)) == ["--check-bulk-copy", "yes"]
    assert option_args("memcheck", None) == []


def test_every_rule_has_a_lower_version_bound() -> None:
    assert all(r.since for r in RULES)
    assert {r.id: r.since for r in RULES} == {"cuda-pipeline-producer-commit": (2025, 3), DISPATCH: (2025, 3),
                                              "triton-ws-barrier-reinit": (2026, 4)}
    with pytest.raises(ValueError, match="lower version bound"):
        Rule("r", "racecheck", (), None, "", "", "", lambda f, k: True)


# --------------------------------------------------------------------------- Triton's barrier re-init


REINIT = "synccheck_triton_ws_barrier_reinit_2026_4_0.txt"
NEW4 = (2026, 4, 0, 0)
#: matmul_tma_kernel of tests/data/sass/triton_gemm.py built with WARP_SPECIALIZE=True, as the child records it
WS_TMA = KernelFacts("matmul_tma_kernel", True, 131672, 12, 4, "tests/data/sass/triton_gemm.py", 22, 131544)


def _barriers(name: str, text: str | None = None) -> list[Any]:
    """The barrier records (the sample also ends with the tool's own "process didn't terminate" line)."""
    return [f for f in _found(name, "synccheck", text) if f.kind == "barrier"]


def test_wgmma_sequence_error_is_a_barrier_record_named_for_what_it_is() -> None:
    # the head as compute-sanitizer 2025.3.1 and 2026.4.0 print it (scripts/gpu/warpgroup_probe.py;
    # docs/validation/2026-11-25-h100-0950/warpgroup-probe.md)
    text = ("========= Warpgroup MMA sequence error detected. Mismatching warpgroup instruction pc between warps.\n"
            "=========     at wgmma_skips_a_warp+0x2d0 in kernels.cu:27\n"
            "=========     by thread (96,0,0) in block (0,0,0)\n"
            "========= ERROR SUMMARY: 1 error\n")
    (f,) = _found("", "synccheck", text)
    assert (f.kind, f.label(), f.kernel, f.line) == ("barrier", "wgmma sequence error", "wgmma_skips_a_warp", 27)


def _triton(monkeypatch: pytest.MonkeyPatch, version: tuple[int, ...] | None) -> None:
    from pytest_pipecheck.sanitizer import known

    monkeypatch.setattr(known, "_triton_version", lambda: version)


def test_triton_barrier_reinit_at_the_kernels_def_line_is_filtered_with_triton_3_6(
        monkeypatch: pytest.MonkeyPatch) -> None:
    found = _barriers(REINIT)
    assert len(found) == 16 and {(f.kind, f.file, f.line) for f in found} == {("barrier", "triton_gemm.py", 22)}
    _triton(monkeypatch, (3, 6, 0))
    kept, gone = filter_findings(found, "synccheck", NEW4, kernels=[WS_TMA])
    assert kept == [] and len(gone["triton-ws-barrier-reinit"]) == 16
    # not for the version that does not report it, nor with a Triton it was not measured with
    assert len(filter_findings(found, "synccheck", (2025, 3, 1), kernels=[WS_TMA])[0]) == 16
    for version in ((3, 7, 0), (3, 5, 1), None):
        _triton(monkeypatch, version)
        assert len(filter_findings(found, "synccheck", NEW4, kernels=[WS_TMA])[0]) == 16, version


def test_a_reinit_the_kernel_wrote_or_in_a_kernel_not_warp_specialized_is_not_filtered(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _triton(monkeypatch, (3, 6, 0))
    text = (DATA / REINIT).read_text()
    # the same record at a line of the kernel's body (an mbarrier.init its author wrote), in another kernel
    # of that file, in a file of another name, or another barrier error at the def line: all kept
    for old, new in (("triton_gemm.py:22", "triton_gemm.py:41"),
                     ("matmul_tma_kernel+0x3220", "gemm_kernel+0x3220"),
                     ("triton_gemm.py:22", "other_gemm.py:22"),
                     ("Already initialized. Invalidate before reinitializing.", "Missing wait.")):
        changed = _barriers("", text.replace(old, new))
        assert len(filter_findings(changed, "synccheck", NEW4, kernels=[WS_TMA])[0]) == 16, (old, new)
    found = _barriers(REINIT)
    # the kernel not warp-specialized, one of its builds not, or no facts of it: kept
    plain = dataclasses.replace(WS_TMA, warp_specialized=False)
    for kernels in ([plain], [WS_TMA, plain], [], None):
        assert len(filter_findings(found, "synccheck", NEW4, kernels=kernels)[0]) == 16, kernels


def test_the_run_header_says_which_toolchain_bug_is_filtered(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_pipecheck.sanitizer.known import limitations

    _triton(monkeypatch, (3, 6, 0))
    lines = limitations("2026.4.0", NEW4, ["synccheck"])
    assert any("known bug of the toolchain" in ln and "triton-ws-barrier-reinit" in ln for ln in lines)
    for version in ((3, 9, 0), (3, 5, 0)):
        _triton(monkeypatch, version)
        assert limitations("2026.4.0", NEW4, ["synccheck"]) == []
    lines = limitations("2025.2.0", (2025, 2), ["racecheck", "synccheck"])
    assert not any("rule" in ln for ln in lines)  # no rule was measured on 2025.2
