"""Every ``pip install`` line the project shows works as written.

pytest-pipecheck is not on a package index, so ``pip install "pytest-pipecheck[triton]"`` fails (or,
worse, installs whatever someone else published under that name). A line that installs pipecheck must
do it from a clone (``pip install -e ".[sanitizer]"``) or from git with a direct reference
(``pip install "pytest-pipecheck[triton] @ git+<URL of this repository>"``, the placeholder marked with
angle brackets). The extras a line names must be extras of pyproject.toml, and ``.[extra]`` must be
quoted (zsh takes unquoted brackets for a glob and stops with "no matches found").

Looked at: README.md, CONTRIBUTING.md, docs/*.md (docs/validation holds records of past runs, left as they
were), everything under examples/, the package's and the reference kernels' Python files (their strings,
joined as Python joins them, and their comments), the GitHub workflows and scripts/. After ``pip install``
the arguments are read up to the end of the line, a comment, the end of a code span or a parenthesis, or
a word of prose (``in a clone of ...``).
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_PIP_INSTALL = re.compile(r"\bpip3?\s+install\b")
_PIPECHECK = re.compile(r"^(pytest[-_.])?pipecheck(\[(?P<extras>[^\]]*)\])?$", re.IGNORECASE)
_LOCAL = re.compile(r"^\.(\[(?P<extras>[^\]]*)\])?$")
# words that end an install command written inside a sentence ("pip install -e '.[x]' in a clone of ...")
_PROSE = frozenset({"in", "from", "to", "or", "and", "into", "with", "for", "then", "on", "is", "installs",
                    "which", "where", "after", "before", "as", "if", "when", "(the", "(what", "(or"})
_ENDS = ("`", ")", ";", ",", ":")


def _sources() -> Iterator[Path]:
    yield ROOT / "README.md"
    yield ROOT / "CONTRIBUTING.md"
    yield from sorted((ROOT / "docs").glob("*.md"))
    for folder in ("examples", "pytest_pipecheck", "reference_kernels", "scripts", ".github"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".md", ".sh", ".yml", ".yaml", ".txt", ".cfg", ".toml"):
                yield path


def _python_strings(text: str) -> Iterator[str]:
    """Every string of a Python file as Python sees it: adjacent literals joined, an f-string's fields as
    ``{}``; a file that does not parse gives none (its raw lines are still read)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value
        elif isinstance(node, ast.JoinedStr):
            yield "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
                          for v in node.values)


def _lines(path: Path) -> Iterator[tuple[str, str]]:
    """(where, line) for every line of ``path`` that could hold an install command."""
    text = path.read_text(encoding="utf-8", errors="replace")
    rel = path.relative_to(ROOT)
    for number, line in enumerate(text.splitlines(), 1):
        yield f"{rel}:{number}", line
    if path.suffix == ".py":
        for string in _python_strings(text):
            for line in string.splitlines():
                yield f"{rel} (a string: {line.strip()[:60]!r})", line


def _arguments(rest: str) -> list[tuple[str, str]]:
    """(raw, bare) for each argument of the install command at the start of ``rest``: ``bare`` without the
    quotes, backticks and punctuation around it."""
    out: list[tuple[str, str]] = []
    for raw in rest.split():
        if raw.startswith("#") or raw in ("&&", "||", "|", ">", ">>") or raw.lower() in _PROSE:
            break
        bare = raw.strip("`'\"").rstrip(")`;,:.'\"").strip("`'\"")
        if raw.startswith("("):
            break
        out.append((raw, bare))
        if raw.endswith(_ENDS) or raw.count("`") % 2:
            break
    return out


def _extras() -> set[str]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)\s*=", section, re.MULTILINE))


def problems_of(line: str, extras: set[str]) -> list[str]:
    """What is wrong with each install command in ``line`` (empty when each works as written)."""
    out = []
    for match in _PIP_INSTALL.finditer(line):
        args = _arguments(line[match.end():])
        for i, (raw, bare) in enumerate(args):
            named = _PIPECHECK.match(bare)
            local = _LOCAL.match(bare)
            if named:
                following = args[i + 1][1] if i + 1 < len(args) else ""
                target = args[i + 2][1] if i + 2 < len(args) else ""
                if following != "@":
                    out.append(f"{bare!r} is a requirement from a package index, where pipecheck is not: install "
                               "from a clone (pip install -e \".[extra]\") or from git (\"pytest-pipecheck[extra] @ "
                               "git+<URL of this repository>\")")
                elif not (re.match(r"^(git\+(https|ssh)://|file:)", target) or
                          (target.startswith("git+<") and re.search(r"@\s+git\+<[^<>]+>", line))):
                    out.append(f"{bare!r} @ {target!r}: the direct reference must be git+<URL> with the "
                               "placeholder in angle brackets, a git+https:// or git+ssh:// URL, or file:")
            elif local and local.group("extras") is not None and not raw.startswith(("'", '"', "`'", '`"')):
                out.append(f"{raw!r} is unquoted: zsh reads the brackets as a glob; write \"{bare}\"")
            found = named or local
            for extra in (found.group("extras") or "").split(",") if found else []:
                if extra.strip() and extra.strip() not in extras:
                    out.append(f"extra {extra.strip()!r} of {bare!r} is not in pyproject.toml's "
                               f"[project.optional-dependencies] ({', '.join(sorted(extras))})")
    return out


def test_every_install_line_works_as_written() -> None:
    extras = _extras()
    bad = []
    seen = 0
    for path in _sources():
        for where, line in _lines(path):
            if _PIP_INSTALL.search(line):
                seen += 1
            bad += [f"{where}: {p}\n    {line.strip()}" for p in problems_of(line, extras)]
    assert seen > 20, "the install lines were not found: did the files move?"
    assert not bad, "install lines that do not work as written:\n" + "\n".join(dict.fromkeys(bad))


@pytest.mark.parametrize(("line", "wrong"), [
    ('pip install "pytest-pipecheck[triton]"', "a requirement from a package index"),
    ("``pip install pytest-pipecheck[sanitizer]``) is searched", "a requirement from a package index"),
    ("plots need matplotlib (pip install 'pytest-pipecheck[html]'); the tables", "a requirement from a package index"),
    ("python3 -m pip install pytest_pipecheck", "a requirement from a package index"),
    ("pip install pipecheck", "a requirement from a package index"),
    ('pip install "pytest-pipecheck[triton] @ https://example.com/x.whl"', "the direct reference must be"),
    ("pip install -e .[dev]", "is unquoted"),
    ('pip install -e ".[gpu]"', "extra 'gpu'"),
    ('pip install "pytest-pipecheck[tritton] @ git+<URL of this repository>"', "extra 'tritton'"),
])
def test_a_line_that_would_fail_is_caught(line: str, wrong: str) -> None:
    found = problems_of(line, _extras())
    assert found and wrong in found[0], found


@pytest.mark.parametrize("line", [
    'python3 -m pip install torch==2.13.0 -e ".[dev]"',
    "(in a clone of pytest-pipecheck: pip install -e '.[examples]')",
    'pip install "pytest-pipecheck[triton,html] @ git+<URL of this repository>"',
    "pip install 'nvidia-cuda-sanitizer-api==13.5.25' (what pipecheck's sanitizer extra installs: pip install -e "
    "'.[sanitizer]' in a clone of pytest-pipecheck)",
    "pip install einops sqlalchemy   # fla-core needs einops; flag-gems needs sqlalchemy",
    'python3 -m pip install -q --no-index --no-deps --no-cache-dir "$w" >> "$out/install.log" 2>&1',
    "`pip install -e \".[examples]\"` and run `pytest --pipecheck examples`",
])
def test_a_line_that_works_passes(line: str) -> None:
    assert problems_of(line, _extras()) == []


def test_install_commands_in_shell_blocks_parse_as_shell() -> None:
    # the documented lines are commands a shell takes as they are: balanced quotes
    for path in (ROOT / "README.md", ROOT / "docs" / "tutorial.md", ROOT / "docs" / "ci.md"):
        if not path.exists():
            continue
        for line in path.read_text(encoding="utf-8").splitlines():
            stripped = line.strip()
            if stripped.startswith(("pip install", "python -m pip install", "python3 -m pip install")):
                shlex.split(stripped.split(" #", 1)[0])


def test_the_user_install_lines_bring_scipy_for_the_perf_gate() -> None:
    """The perf gate needs SciPy: a user's install line of the README, the tutorial or the CI recipe that picks a
    kernel backend (triton, cupy, cuda) also names ``stats`` (or ``dev``, which holds it); before, the CI
    recipe's first compared perf check failed for want of it."""
    first = re.compile(r"pip install [^\[\n]*?\[([a-z,]+)\]")  # the extras of the line's install command
    missing = []
    for path in (ROOT / "README.md", ROOT / "docs" / "tutorial.md", ROOT / "docs" / "ci.md"):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for group in first.findall(line):
                names = set(group.split(","))
                if names & {"triton", "cupy", "cuda"} and not names & {"stats", "dev"}:
                    missing.append(f"{path.name}:{n}: {line.strip()}")
    assert not missing, "install lines without SciPy (the stats extra):\n" + "\n".join(missing)
