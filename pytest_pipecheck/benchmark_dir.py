"""pytest-benchmark's storage folder, left only where it holds something.

pytest-benchmark creates its storage folder (``.benchmarks`` in the directory pytest was started from, by
default) when it configures, in every run, whether or not a benchmark is saved. pipecheck's perf checks keep
their baselines elsewhere (``baseline_dir``), so a run under pipecheck used to leave an empty ``.benchmarks/``
behind. :func:`note` (at configure, before pytest-benchmark's) records whether the default folder was
there; :func:`tidy` (at unconfigure) removes it again only when this run made it and it is still empty. A
folder that was there before, one given with ``--benchmark-storage``, and one holding a saved benchmark are
left alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__ = ["note", "tidy"]

#: pytest-benchmark's default ``--benchmark-storage``
DEFAULT_STORAGE = "file://./.benchmarks"

#: the default storage folder, when this run was the one to create it
_MADE_HERE = pytest.StashKey[Path]()


def note(config: pytest.Config) -> None:
    """Remember the default storage folder if it does not exist yet (called before pytest-benchmark makes it)."""
    try:
        storage = config.getoption("benchmark_storage")
    except ValueError:  # pytest-benchmark is not loaded (-p no:benchmark)
        return
    if storage != DEFAULT_STORAGE:
        return
    folder = Path(config.invocation_params.dir) / ".benchmarks"
    if not folder.exists():
        config.stash[_MADE_HERE] = folder


def tidy(config: pytest.Config) -> None:
    """Remove the storage folder this run created, if nothing was written into it."""
    folder = config.stash.get(_MADE_HERE, None)
    if folder is None:
        return
    try:
        folder.rmdir()  # only an empty folder: a saved benchmark keeps it
    except OSError:
        pass
