"""Bad input to the inspector: no kernels, not a cubin, unknown architecture, no disassembler."""

from __future__ import annotations

import pytest
from _sass_artifacts import _DATA, art

from pytest_pipecheck.inspect import (
    DisassemblerNotFound,
    DisassemblyError,
    NoKernelsError,
    UnknownArchError,
    disasm,
    inspect_cu,
    inspect_cubin,
)


def test_file_without_kernels():
    art.need_nvcc()
    with pytest.raises(NoKernelsError, match=r"no_kernels\.cu contains no kernels"):
        inspect_cu(_DATA / "no_kernels.cu", "sm_80")


def test_kernel_filter_that_matches_nothing_lists_the_kernels():
    art.need_disassembler()
    with pytest.raises(NoKernelsError, match=r"no kernel matching 'nope'.*it has: spill_kernel"):
        inspect_cubin(art.cu("spill")[0], kernel="nope")


def test_not_a_cubin(tmp_path):
    art.need_disassembler()
    p = tmp_path / "x.cubin"
    p.write_bytes(b"garbage")
    with pytest.raises(DisassemblyError, match="is not a cubin"):
        inspect_cubin(p)


def test_unknown_architecture_names_tool_and_arch():
    art.need_disassembler()
    data = bytearray(art.cu("spill")[0])
    assert disasm.cubin_arch(bytes(data)) == "sm_80"
    data[0x31] = 99  # the SM number lives in e_flags bits 8-15 (ELF ABI v8)
    assert disasm.cubin_arch(bytes(data)) == "sm_99"
    with pytest.raises(UnknownArchError, match=r"does not know sm_99"):
        inspect_cubin(bytes(data))


def test_silent_empty_listing_is_an_unknown_arch_error(monkeypatch):
    # cuobjdump may print only "code for sm_NN" with exit 0 for an architecture it does not know
    art.need_disassembler()
    monkeypatch.setattr(disasm, "known_archs", lambda tool: None)
    monkeypatch.setattr(disasm, "_run", lambda cmd, what: "\n\tcode for sm_99\n")
    with pytest.raises(UnknownArchError, match="printed no code"):
        disasm.disassemble(art.cu("spill")[0])


def test_missing_disassembler_says_which_package(monkeypatch):
    monkeypatch.setattr(disasm.toolkit, "candidates", lambda tool: [])  # the toolkit module disasm uses
    disasm.find_disassembler.cache_clear()
    try:
        assert disasm.find_disassembler() is None
        with pytest.raises(DisassemblerNotFound, match=r"pip install nvidia-cuda-cuobjdump.*triton"):
            disasm.require_disassembler()
    finally:
        disasm.find_disassembler.cache_clear()


def test_env_override_is_searched_first(monkeypatch, tmp_path):
    fake = tmp_path / "cuobjdump"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 99.1, V99'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PIPECHECK_CUOBJDUMP", str(fake))
    disasm.find_disassembler.cache_clear()
    try:
        found = disasm.find_disassembler()
        assert found is not None and found.path == str(fake) and found.found_via == "PIPECHECK_CUOBJDUMP"
        assert found.version == "99.1"
    finally:
        disasm.find_disassembler.cache_clear()
