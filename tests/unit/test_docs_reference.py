"""docs/reference.md is generated from the code and lists every setting, fixture member and command."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from types import ModuleType

from pytest_pipecheck.config import SETTINGS

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_setting_is_documented_with_its_option_ini_key_and_marker_keyword() -> None:
    text = REFERENCE.read_text(encoding="utf-8").split("## Settings", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| `")}
    for s in SETTINGS:
        row = rows.get(f"`{s.name}`")
        assert row is not None, f"docs/reference.md has no row for setting {s.name!r}"
        assert (f"`{s.option}`" in row) == s.cli, s.name
        assert (f"`{s.ini_name}`" in row) == s.ini, s.name
        assert (f"`{s.name}=`" in row) == s.marker, s.name
        assert s.help.split(" (")[0].replace("|", "\\|") in row, s.name


def test_every_fixture_member_and_command_is_documented() -> None:
    from pytest_pipecheck.cli import SUBCOMMANDS
    from pytest_pipecheck.fixture import Pipecheck

    text = REFERENCE.read_text(encoding="utf-8")
    for name, _ in inspect.getmembers(Pipecheck):
        if not name.startswith("_"):
            assert f"`pipecheck.{name}" in text, name
    for command in SUBCOMMANDS:
        assert f"### `{command}`" in text, command


def test_reference_is_up_to_date_with_the_code() -> None:
    expected = _generator().render()
    assert REFERENCE.read_text(encoding="utf-8") == expected, (
        "docs/reference.md is out of date: run python docs/gen_reference.py")


def test_every_kernel_spec_and_tensor_field_is_documented() -> None:
    import dataclasses

    from pytest_pipecheck.model.spec import KernelSpec
    from pytest_pipecheck.model.tensor import Tensor

    text = REFERENCE.read_text(encoding="utf-8")
    for cls in (KernelSpec, Tensor):
        section = text.split(f"### `{cls.__name__}`", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
        rows = {line.split("|")[1].strip(): line for line in section.splitlines() if line.startswith("| `")}
        for f in dataclasses.fields(cls):
            row = rows.get(f"`{f.name}`")
            assert row is not None, f"docs/reference.md has no row for {cls.__name__}.{f.name}"
            meaning = row.rstrip().rstrip("|").split("|")[-1].strip()
            assert meaning, (f"{cls.__name__}.{f.name} has no #: comment in pytest_pipecheck/model/spec.py "
                             "or model/tensor.py")


def test_preconditions_are_exported_at_the_top_level() -> None:
    import pytest_pipecheck
    from pytest_pipecheck.model.preconditions import Divisible, Range

    assert pytest_pipecheck.Divisible is Divisible and pytest_pipecheck.Range is Range
    assert {"Divisible", "Range"} <= set(pytest_pipecheck.__all__)


def test_every_export_autotune_name_and_check_keyword_is_documented() -> None:
    import pytest_pipecheck
    from pytest_pipecheck.checks import coverage, determinism, tile_probe
    from pytest_pipecheck.model import autotune

    text = REFERENCE.read_text(encoding="utf-8")
    api = text.split("## Python API", 1)[1].split("\n## ", 1)[0]
    for name in pytest_pipecheck.__all__:
        if name != "__version__":
            assert f"| `{name}" in api, f"docs/reference.md does not document the export {name}"
            assert getattr(pytest_pipecheck, name) is not None
    for name in autotune.__all__:
        assert f"| `autotune.{name}" in api, f"docs/reference.md does not document autotune.{name}"
    assert pytest_pipecheck.model.autotune is autotune and pytest_pipecheck.Shape.__name__ == "Shape"
    keywords = text.split("### Keywords of the correctness checks", 1)[1].split("\n## ", 1)[0]
    for fn in (coverage.check_coverage, tile_probe.check_tile_probe, determinism.check_determinism):
        for p in inspect.signature(fn).parameters.values():
            if p.kind is p.KEYWORD_ONLY:
                assert f"| `{p.name}=` |" in keywords, f"{fn.__name__}({p.name}=) is not in docs/reference.md"
    assert "| `config=` |" in keywords
