"""The pipecheck marker: registered with its signature, validated per test, overriding CLI and ini."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.cpu_only  # tests/conftest.py: the CPU job runs it, the GPU tier leaves it out


def test_markers_lists_signature(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.pipecheck(*min_blocks=1*stages=None*): configure pipecheck*"])
    result.stdout.fnmatch_lines(["@pytest.mark.gpu*"])


def test_marker_overrides_cli_and_ini(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\npipecheck_min_blocks = 3\npipecheck_shape_level = large\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.pipecheck(min_blocks=2, stages=4, arch="sm_86")
        def test_marked(pipecheck):
            c = pipecheck.config
            assert (c.min_blocks, c.stages, c.arch) == (2, 4, ("sm_86",))
            assert c.sources["min_blocks"] == "marker"
            assert c.shape_level == "large"  # from ini, untouched by the marker
            assert c.sanitizer == ("racecheck",)  # from the command line

        def test_unmarked(pipecheck):
            assert pipecheck.config.min_blocks == 3
        """
    )
    pytester.runpytest("--pipecheck-sanitizer=racecheck").assert_outcomes(passed=2)


def test_class_and_function_markers_closest_wins(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        pytestmark = pytest.mark.pipecheck(min_blocks=4, kernel="gemm")

        @pytest.mark.pipecheck(min_blocks=2)
        def test_x(pipecheck):
            assert pipecheck.config.min_blocks == 2
            assert pipecheck.config.kernel == "gemm"
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)


def _run_marked(pytester: pytest.Pytester, marker: str, with_unmarked_test: bool = False) -> pytest.RunResult:
    """Run test_bad.py::test_k under ``@pytest.mark.pipecheck(<marker>)`` (and an unmarked test_fine)."""
    fine = "def test_fine():\n    pass\n" if with_unmarked_test else ""
    pytester.makepyfile(test_bad=f"""import pytest

@pytest.mark.pipecheck({marker})
def test_k(pipecheck):
    pass

{fine}""")
    return pytester.runpytest()


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("stages=0", "pipecheck: `stages=0` from the pipecheck marker on test_bad.py::test_k must be >= 1"),
        ("stags=2", "pipecheck: unknown keyword `stags` in the pipecheck marker on test_bad.py::test_k; did you mean 'stages'?*"),
        ("sanitizer='racecheck,oops'", "*names unknown 'oops'*"),
        ("rtol=-1.0", "pipecheck: `rtol=-1.0` from the pipecheck marker on test_bad.py::test_k must be >= 0"),
        ("min_blocks='two'", "pipecheck: `min_blocks='two'` from the pipecheck marker on test_bad.py::test_k must be an integer"),
        ("seed=3", "pipecheck: unknown keyword `seed` in the pipecheck marker*"),
        ("'racecheck'", "pipecheck: the pipecheck marker on test_bad.py::test_k takes keywords only*"),
    ],
)
def test_bad_marker_value_errors_that_test_only(pytester: pytest.Pytester, marker: str, message: str) -> None:
    result = _run_marked(pytester, marker, with_unmarked_test=True)
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines([f"*{message}*" if not message.startswith("*") else message])
    # one line, no traceback from inside the plugin
    assert "pytest_pipecheck/" not in result.stdout.str()


def test_sanitizer_with_plus_extends_the_runs_tools_and_a_plain_list_replaces_them(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\npipecheck_sanitizer = racecheck,memcheck\n")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.pipecheck(sanitizer="+initcheck")
        def test_extends(pipecheck):
            assert pipecheck.config.sanitizer == ("racecheck", "synccheck", "memcheck", "initcheck")

        @pytest.mark.pipecheck(sanitizer=["+initcheck", "-racecheck"])
        def test_extends_and_trims(pipecheck):
            assert pipecheck.config.sanitizer == ("synccheck", "memcheck", "initcheck")

        @pytest.mark.pipecheck(sanitizer="initcheck")
        def test_replaces(pipecheck):
            assert pipecheck.config.sanitizer == ("initcheck",)

        def test_unmarked(pipecheck):
            # the command line extends the ini file's list
            assert pipecheck.config.sanitizer == ("racecheck", "synccheck", "memcheck")
        """
    )
    # the ini file sets racecheck,memcheck; the command line adds synccheck to them
    pytester.runpytest("--pipecheck-sanitizer=+synccheck").assert_outcomes(passed=4)


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("sanitizer='+initcheck,memcheck'",
         "*`sanitizer='+initcheck,memcheck'` from the pipecheck marker on test_bad.py::test_k mixes tools to add or "
         "remove (+initcheck) with a plain list (memcheck)*"),
        ("sanitizer='+initchek'", "*from the pipecheck marker on test_bad.py::test_k names unknown '+initchek' "
                                  "(did you mean '+initcheck'?)*"),
        ("sanitizer='+racecheck,-racecheck'", "*both adds and removes 'racecheck'*"),
    ],
)
def test_bad_sanitizer_extension_names_its_source(pytester: pytest.Pytester, marker: str, message: str) -> None:
    result = _run_marked(pytester, marker)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])
