"""SASS text parsing and loop finding on hand-written listings in both disassembler formats."""

from __future__ import annotations

from pytest_pipecheck.inspect.analysis import analyze_kernel, parse_ptxas_spills
from pytest_pipecheck.inspect.sass import classify, parse_sass

CUOBJDUMP = """
\tcode for sm_80
\t\tFunction : k
\t.headerflags\t@"EF_CUDA_SM80"
        /*0000*/                   MOV R1, c[0x0][0x28] ;           /* 0x00000a0000017a02 */
        /*0010*/                   LDGSTS.E.BYPASS.128 [R2], [R4.64] ;   /* 0x0 */
        /*0020*/                   LDGDEPBAR ;                       /* 0x0 */
        /*0030*/                   DEPBAR.LE SB0, 0x1 ;              /* 0x0 */
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;     /* 0x0 */
        /*0050*/                   LDGSTS.E.BYPASS.128 [R2+0x100], [R6.64] ; /* 0x0 */
        /*0060*/                   LDGDEPBAR ;                       /* 0x0 */
        /*0070*/                   HMMA.16816.F32 R8, R12, R16, R8 ; /* 0x0 */
        /*0080*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;     /* 0x0 */
        /*0090*/               @P0 BRA 0x30 ;                        /* 0x0 */
        /*00a0*/                   STL [R1], R3 ;                    /* 0x0 */
        /*00b0*/                   EXIT ;                            /* 0x0 */
        /*00c0*/                   BRA 0xc0;                         /* 0x0 */
"""

NVDISASM = """
\t.target\tsm_80
.text.k:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
.L_x_0:
        /*0010*/                   LDGSTS.E.BYPASS.128 [R2], [R4.64] ;
        /*0020*/                   LDGDEPBAR ;
        /*0030*/                   DEPBAR.LE SB0, 0x0 ;
        /*0040*/                   HMMA.16816.F32 R8, R12, R16, R8 ;
        /*0050*/               @P0 BRA `(.L_x_0) ;
        /*0060*/                   EXIT ;
.L_x_1:
        /*0070*/                   BRA `(.L_x_1);
"""


def test_cuobjdump_listing_parses_into_instructions_and_one_loop():
    (k,) = parse_sass(CUOBJDUMP)
    assert k.name == "k" and k.arch == "sm_80" and len(k.instructions) == 13
    assert k.instructions[1].opcode == "LDGSTS.E.BYPASS.128" and k.instructions[1].kind == "async_copy"
    assert k.instructions[9].predicate == "@P0" and k.instructions[9].target == 0x30
    loops = k.loops  # the trailing `BRA 0xc0` is padding, not a loop
    assert [(lp.start, lp.end) for lp in loops] == [(0x30, 0x90)]


def test_overlap_follows_the_loop_around_the_back_edge():
    (k,) = parse_sass(CUOBJDUMP)
    f = analyze_kernel(k)
    # The copy at 0x50 is committed (1 group) and the wait keeps 1 group pending: HMMA at 0x70
    # runs with it in flight. The BAR.SYNC between iterations does not wait for copies.
    assert f.overlap and f.overlap_strict
    assert f.main_loop == (0x30, 0x90)
    assert f.local_stores == 1 and f.spills and f.spills_source == "LDL/STL"


def test_drain_wait_breaks_overlap_in_nvdisasm_format():
    (k,) = parse_sass(NVDISASM)
    assert k.name == "k" and k.instructions[5].target == 0x10  # label resolved
    f = analyze_kernel(k)
    assert f.main_loop == (0x10, 0x50)
    assert not f.overlap and "waited for" in f.overlap_reason


def test_wait_keeping_one_group_does_not_drain_the_newest_copy():
    text = NVDISASM.replace("DEPBAR.LE SB0, 0x0", "DEPBAR.LE SB0, 0x1")
    f = analyze_kernel(parse_sass(text)[0])
    assert f.overlap


def test_classify_kinds():
    assert classify("UTMALDG.2D") == "async_copy"
    assert classify("HGMMA.64x128x16.F32") == "mma"
    assert classify("QGMMA.64x128x32.F32.E4M3.E4M3") == "mma"
    assert classify("SYNCS.PHASECHK.TRANS64.TRYWAIT") == "mbarrier"
    assert classify("UTMASTG.2D") == "async_store"
    assert classify("LDL.64") == "local_load"
    assert classify("IMAD.MOV.U32") == "other"


def test_empty_listing_has_no_kernels():
    assert parse_sass("\n\tcode for sm_99\n") == []


def test_ptxas_log_spills_per_entry():
    log = (
        "ptxas info    : Compiling entry function 'a' for 'sm_80'\n"
        "ptxas info    : Function properties for a\n"
        "    416 bytes stack frame, 1152 bytes spill stores, 1144 bytes spill loads\n"
        "ptxas info    : Compiling entry function 'b' for 'sm_80'\n"
        "ptxas info    : Function properties for b\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    )
    assert parse_ptxas_spills(log) == {
        "a": {"spill_stores": 1152, "spill_loads": 1144, "stack": 416},
        "b": {"spill_stores": 0, "spill_loads": 0, "stack": 0},
    }
