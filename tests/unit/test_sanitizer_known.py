"""The reviewed known-false-positive rules filter exactly their records, only for the versions they are
keyed to (pytest_pipecheck/sanitizer/known.py), on real records of compute-sanitizer 2025.3.1."""

from __future__ import annotations

from pathlib import Path

from pytest_pipecheck.sanitizer.known import filter_findings, option_args
from pytest_pipecheck.sanitizer.parse import parse_text

DATA = Path(__file__).resolve().parents[1] / "data" / "sanitizer"
ROOT = Path(__file__).resolve().parents[2]
OLD, NEW = (2025, 3, 1), (2026, 4)


def _found(name: str, tool: str, text: str | None = None):  # type: ignore[no-untyped-def]
    return parse_text(text if text is not None else (DATA / name).read_text(), tool).findings


def test_producer_commit_missing_wait_is_filtered_only_inside_producer_commit_and_only_for_old_versions() -> None:
    found = _found("synccheck_pipeline_producer_commit_2025_3_1.txt", "synccheck")
    assert len(found) == 3
    kept, gone = filter_findings(found, "synccheck", OLD)
    assert not kept and len(gone["cuda-pipeline-producer-commit"]) == 3
    assert filter_findings(found, "synccheck", NEW)[0] == found
    assert filter_findings(found, "synccheck", None)[0] == found  # unknown version: nothing filtered
    text = (DATA / "synccheck_pipeline_producer_commit_2025_3_1.txt").read_text()
    # the same arrive reached from the user's own code first (not inside producer_commit): kept
    user = text.replace("Device Frame: cuda::__4::barrier<", "Device Frame: my_arrive(int)+0x10 in k.cu:3\n"
                        "=========         Device Frame: cuda::__4::barrier<")
    assert len(filter_findings(_found("", "synccheck", user), "synccheck", OLD)[0]) == 3
    # without the device backtrace the frame cannot be told: kept
    bare = "\n".join(ln for ln in text.splitlines() if "Device Frame" not in ln)
    assert len(filter_findings(_found("", "synccheck", bare), "synccheck", OLD)[0]) == 3
    # a divergent barrier is not a missing wait: kept
    div = _found("synccheck_divergent_hostbt.txt", "synccheck")
    assert filter_findings(div, "synccheck", OLD)[0] == div


def test_dispatch_state_hazards_are_filtered_but_not_a_race_on_the_kernels_own_memory() -> None:
    found = _found("racecheck_triton_ws_dispatch_hazard_2025_3_1.txt", "racecheck")
    kept, gone = filter_findings(found, "racecheck", OLD)
    assert not kept and len(gone["triton-ws-dispatch-state"]) == len(found) == 4
    assert filter_findings(found, "racecheck", NEW)[0] == found
    analysis = _found("racecheck_triton_ws_dispatch_analysis_constructed.txt", "racecheck")
    kept, gone = filter_findings(analysis, "racecheck", OLD)
    assert len(gone["triton-ws-dispatch-state"]) == 2 and len(kept) == 1 and kept[0].line == 262
    # hazards spread over more than one 4-byte word are not the dispatch state: all kept
    text = (DATA / "racecheck_triton_ws_dispatch_hazard_2025_3_1.txt").read_text().replace(
        "__shared__ 0x304b0", "__shared__ 0x30400", 1)
    assert len(filter_findings(_found("", "racecheck", text), "racecheck", OLD)[0]) == 4
    # a CUDA C++ kernel's race at a low pc is not Triton's: kept
    cuda = _found("racecheck_race_analysis.txt", "racecheck")
    assert filter_findings(cuda, "racecheck", OLD)[0] == cuda


def test_dispatch_state_records_of_one_read_and_two_writes_are_filtered() -> None:
    """The analysis report of 2025.3.1 pairs the entry read with both writes of the default partition in
    one record (captured on a GPU: one launch, and the suite test's 12 records; tests/data/sanitizer/README.md)."""
    for name, count in (("racecheck_triton_ws_dispatch_analysis_2025_3_1.txt", 1),
                        ("racecheck_triton_ws_dispatch_suite_2025_3_1.txt", 12)):
        found = _found(name, "racecheck")
        assert len(found) == count and all(len(f.raw.splitlines()) == 3 for f in found), name
        kept, gone = filter_findings(found, "racecheck", OLD)
        assert not kept and len(gone["triton-ws-dispatch-state"]) == count, name
        assert filter_findings(found, "racecheck", NEW)[0] == found
    text = (DATA / "racecheck_triton_ws_dispatch_analysis_2025_3_1.txt").read_text()
    # one of the writes inside the kernel's entry (another read/write pair at entry): kept
    entry_write = text.replace("+0x28d0", "+0x80")
    assert len(filter_findings(_found("", "racecheck", entry_write), "racecheck", OLD)[0]) == 1
    # the read in the kernel's body (a read of its own ring): kept
    body_read = text.replace("Read access at gluon_ws_gemm_kernel+0xf0", "Read access at gluon_ws_gemm_kernel+0x1b80")
    assert len(filter_findings(_found("", "racecheck", body_read), "racecheck", OLD)[0]) == 1
    # a second read in the record: kept
    two_reads = text.replace("and Write access at gluon_ws_gemm_kernel+0x28d0", "and Read access at "
                             "gluon_ws_gemm_kernel+0x28d0")
    assert len(filter_findings(_found("", "racecheck", two_reads), "racecheck", OLD)[0]) == 1


def test_options_follow_the_version() -> None:
    assert option_args("initcheck", (2025, 3, 1)) == []
    # measured: 2025.3.1 has --check-warpgroup-mma (scripts/gpu/warpgroup_probe.py), not shared initcheck
    assert option_args("synccheck", (2025, 3, 1)) == ["--check-warpgroup-mma", "yes"]
    assert option_args("memcheck", (2025, 2)) == []
    assert option_args("initcheck", (2025, 4)) == ["--initcheck-address-space", "all"]
    assert option_args("synccheck", (2026, 4)) == ["--check-bulk-copy", "yes", "--check-warpgroup-mma", "yes"]
    assert option_args("racecheck", (2026, 4)) == ["--check-bulk-copy", "yes"]
    assert option_args("memcheck", None) == []


REINIT = "synccheck_triton_ws_barrier_reinit_2026_4_0.txt"
NEW = (2026, 4, 0, 0)


def _barriers(name: str, text: str | None = None) -> list:
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


def _reinit(monkeypatch, triton: tuple[int, ...] | None, cwd: Path = ROOT) -> None:
    from pytest_pipecheck.sanitizer import known

    monkeypatch.setattr(known, "_triton_version", lambda: triton)
    monkeypatch.chdir(cwd)
    known._source_candidates.cache_clear()


def test_triton_barrier_reinit_at_the_kernels_def_line_is_filtered_with_triton_3_6(monkeypatch) -> None:
    found = _barriers(REINIT)
    assert len(found) == 16 and {(f.kind, f.file, f.line) for f in found} == {("barrier", "triton_gemm.py", 22)}
    _reinit(monkeypatch, (3, 6, 0))
    kept, gone = filter_findings(found, "synccheck", NEW)
    assert kept == [] and len(gone["triton-ws-barrier-reinit"]) == 16
    # not for the version that does not report it, nor with a Triton it was not measured with
    assert len(filter_findings(found, "synccheck", (2025, 3, 1))[0]) == 16
    _reinit(monkeypatch, (3, 7, 0))
    assert len(filter_findings(found, "synccheck", NEW)[0]) == 16
    _reinit(monkeypatch, None)
    assert len(filter_findings(found, "synccheck", NEW)[0]) == 16


def test_a_reinit_the_kernel_wrote_is_not_filtered(monkeypatch, tmp_path) -> None:
    _reinit(monkeypatch, (3, 6, 0))
    text = (DATA / REINIT).read_text()
    # the same record at a line of the kernel's body (an mbarrier.init its author wrote), in another kernel
    # of that file, in a file that cannot be found, or another barrier error at the def line: all kept
    for old, new in (("triton_gemm.py:22", "triton_gemm.py:41"),
                     ("matmul_tma_kernel+0x3220", "gemm_kernel+0x3220"),
                     ("triton_gemm.py:22", "no_such_kernel_file.py:22"),
                     ("Already initialized. Invalidate before reinitializing.", "Missing wait.")):
        changed = _barriers("", text.replace(old, new))
        assert len(filter_findings(changed, "synccheck", NEW)[0]) == 16, (old, new)
    # two files of that name, one without the def at that line: kept
    (tmp_path / "triton_gemm.py").write_text("# another file\n" * 30)
    _reinit(monkeypatch, (3, 6, 0), cwd=tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib.util

    spec = importlib.util.spec_from_file_location("triton_gemm_copy", ROOT / "tests" / "data" / "sass" / "triton_gemm.py")
    assert spec is not None
    monkeypatch.setitem(__import__("sys").modules, "triton_gemm_copy", type("M", (), {"__file__": spec.origin})())
    from pytest_pipecheck.sanitizer import known

    known._source_candidates.cache_clear()
    assert len(filter_findings(_barriers(REINIT), "synccheck", NEW)[0]) == 16


def test_the_run_header_says_which_toolchain_bug_is_filtered(monkeypatch) -> None:
    from pytest_pipecheck.sanitizer.known import limitations

    _reinit(monkeypatch, (3, 6, 0))
    lines = limitations("2026.4.0", NEW, ["synccheck"])
    assert any("known bug of the toolchain" in ln and "triton-ws-barrier-reinit" in ln for ln in lines)
    _reinit(monkeypatch, (3, 9, 0))
    assert limitations("2026.4.0", NEW, ["synccheck"]) == []


def test_a_source_search_cut_short_filters_nothing(monkeypatch) -> None:
    from pytest_pipecheck.sanitizer import known

    _reinit(monkeypatch, (3, 6, 0))
    monkeypatch.setattr(known, "_SEARCH_FOLDERS", 1)  # the working directory holds more than one folder
    assert len(filter_findings(_barriers(REINIT), "synccheck", NEW)[0]) == 16
