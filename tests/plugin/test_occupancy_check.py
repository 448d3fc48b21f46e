"""The occupancy check through real pytest runs: fixture method, marker configuration, failure table."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]


def test_floor_failure_shows_the_table(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_gemm(pipecheck):
            # stage 4 of the Triton fp16 GEMM 128x128x64 on sm_90: 131072 B, 1 block/SM
            pipecheck.check_occupancy(threads=128, registers=196, dynamic_smem=131072,
                                      arch="sm_80,sm_90", min_blocks=2, kernel="gemm_s4")
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*kernel 'gemm_s4' is below the floor of 2 blocks/SM on sm_80, sm_90*",
        "*arch*smem/block*regs*blocks/SM*limited by*",
        "*sm_90*128 KB*196*128*1*shared_memory*needs <= 113 KB for 2 blocks/SM on sm_90; uses 128 KB*",
    ])


def test_marker_drives_archs_and_floor(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.pipecheck(arch="sm_86,sm_90", min_blocks=2)
        def test_fits_sm90_not_sm86(pipecheck):
            pipecheck.check_occupancy(threads=256, registers=64, dynamic_smem=51200)

        @pytest.mark.pipecheck(arch="sm_86,sm_90", min_blocks=2)
        def test_fits_both(pipecheck):
            r = pipecheck.check_occupancy(threads=256, registers=64, dynamic_smem=50176)
            assert r.summary == "sm_86 2, sm_90 4 blocks/SM (floor 2)"
            assert set(r.details["archs"]) == {"sm_86", "sm_90"}
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*below the floor of 2 blocks/SM on sm_86*",
                                 "*needs <= 49 KB for 2 blocks/SM on sm_86; uses 50 KB*"])
    assert "sm_90 " not in "\n".join(ln for ln in result.outlines if "<-- below floor" in ln)


def test_cli_arch_default_and_kernel_resources(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from pytest_pipecheck.resources.cubin import KernelResources

        def test_resources(pipecheck):
            per_arch = {a: KernelResources(name="k", mangled="k", arch=a, registers=32, static_smem=40000)
                        for a in ("sm_80", "sm_89")}
            r = pipecheck.check_occupancy(per_arch, threads=256, min_blocks=2)
            assert r.verdict.value == "pass"
            assert r.details["resources"]["sm_89"]["static_smem"] == 40000
            assert pipecheck.results[-1] is r or pipecheck.results[-1] == r

        def test_explicit_numbers_default_archs(pipecheck):
            r = pipecheck.check_occupancy(threads=128, registers=32)
            assert list(r.details["archs"]) == ["sm_75", "sm_120"]
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--pipecheck-arch=sm_75,sm_120")
    result.assert_outcomes(passed=2)


def test_bad_input_is_an_error_not_a_crash(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_bad_arch(pipecheck):
            pipecheck.check_occupancy(threads=128, registers=32, arch="sm_91")

        def test_too_many_threads(pipecheck):
            pipecheck.check_occupancy(threads=2048, registers=32, arch="sm_90")
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*'sm_91' is not a known architecture*",
                                 "*threads_per_block=2048 must be <= 1024*"])
