"""Perf baselines stored in the repository, one JSON file per environment.

A time is only comparable with a time taken on the same GPU model, SM count, compute capability,
driver, CUDA runtime and framework versions, so those form the :class:`EnvKey`. Each key has one
file, named for people (``NVIDIA-H100-80GB-HBM3-sm90-3f2a9c01de.json``: the GPU, the architecture,
a hash of the whole key) and holding the full key inside, so a file renamed by hand is recognised
as foreign rather than trusted. Inside, entries are keyed by test node id then case id::

    {"schema": "pytest-pipecheck-baseline", "version": 2, "env": {...},
     "tests": {"tests/test_gemm.py::test_gemm[fp16]": {"default": {
         "median_us": ..., "samples_us": [...],
         "anchor": {"definition": {"kind": "matmul", "dtype": "bf16", "m": 2048, "n": 2048, "k": 4096, ...},
                    "median_us": ..., "samples_us": [...]}}}}}

Schema history: version 1 (no anchors) is read as it is: its entries have no ``anchor``, and the
gate compares their raw times and says so. Version 2 adds the optional per-entry ``anchor`` (the
anchor workload's definition and its samples, one per kernel sample, timed interleaved with them).
Saving into a version 1 file rewrites it as version 2, its old entries unchanged.

Files are written sorted and indented (diffs review well), atomically (a temporary file in the
same directory, fsync, ``os.replace``) and under an advisory lock on the directory, so a crash or
two pytest-xdist workers never leave a torn or half-merged file. A file that cannot be read is never
overwritten: the error names it and the user decides.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._atomic import atomic_write_text, describe_non_regular
from ..results import PipecheckError
from .stats import Samples, StatsError

__all__ = [
    "KEY_FIELDS",
    "READABLE_VERSIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "BaselineError",
    "BaselineFile",
    "BaselineStore",
    "EnvKey",
    "Lookup",
    "read_file",
]

SCHEMA = "pytest-pipecheck-baseline"
SCHEMA_VERSION = 2
# Versions this code reads; each older one is migrated in memory by ``_migrate``.
READABLE_VERSIONS = (1, 2)
# The fields that make two timings comparable; order is the order they are shown in.
KEY_FIELDS = ("gpu", "sm_count", "compute_capability", "driver", "cuda", "torch", "triton", "cupy")


class BaselineError(PipecheckError):
    """A baseline file or directory that cannot be used; the message names the path."""


@dataclass(frozen=True)
class EnvKey:
    """What must match for two timings to be compared. Values are strings (None: not present)."""

    values: Mapping[str, str | None]

    def __post_init__(self) -> None:
        unknown = set(self.values) - set(KEY_FIELDS)
        if unknown:
            raise BaselineError(f"environment key has unknown fields {sorted(unknown)}; known: {KEY_FIELDS}")
        norm = {k: (None if self.values.get(k) in (None, "") else str(self.values.get(k))) for k in KEY_FIELDS}
        object.__setattr__(self, "values", norm)

    @classmethod
    def create(cls, **values: Any) -> EnvKey:
        return cls(values)

    def canonical(self) -> str:
        return json.dumps(dict(self.values), sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()[:10]

    def filename(self) -> str:
        gpu = re.sub(r"[^A-Za-z0-9]+", "-", self.values.get("gpu") or "unknown-gpu").strip("-")
        cc = (self.values.get("compute_capability") or "").replace(".", "")
        arch = f"-sm{cc}" if cc else ""
        return f"{gpu}{arch}-{self.digest}.json"

    def describe(self) -> str:
        v = self.values
        parts = [v.get("gpu") or "unknown GPU"]
        if v.get("compute_capability"):
            parts.append(f"cc {v['compute_capability']}")
        if v.get("sm_count"):
            parts.append(f"{v['sm_count']} SMs")
        for name in ("driver", "cuda", "torch", "triton", "cupy"):
            if v.get(name):
                parts.append(f"{name} {v[name]}")
        return ", ".join(parts)

    def differences(self, other: EnvKey) -> list[str]:
        """Names of the fields where ``other`` differs, as ``field other!=self``."""
        out = []
        for k in KEY_FIELDS:
            if self.values.get(k) != other.values.get(k):
                out.append(f"{k} {other.values.get(k)}!={self.values.get(k)}")
        return out


@dataclass
class BaselineFile:
    """One parsed baseline file: its key and its entries (node id -> case id -> entry)."""

    path: str
    env: EnvKey
    tests: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    version: int = SCHEMA_VERSION  # the schema version the file had on disk (it is written as the current one)

    def to_json(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "version": SCHEMA_VERSION, "env": dict(self.env.values), "tests": self.tests}

    def entry(self, nodeid: str, case: str) -> dict[str, Any] | None:
        return self.tests.get(nodeid, {}).get(case)

    def samples(self, nodeid: str, case: str) -> Samples | None:
        """The stored samples of one entry; raises :class:`BaselineError` naming the file if malformed."""
        entry = self.entry(nodeid, case)
        if entry is None:
            return None
        try:
            return Samples.from_json(entry, what=f"baseline {self.path} entry {nodeid} [{case}]")
        except StatsError as exc:
            raise BaselineError(str(exc)) from None


def _read(path: str) -> BaselineFile:
    """Parse ``path``; any problem is a :class:`BaselineError` that names the file and what is wrong."""
    _refuse_non_regular(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise BaselineError(f"cannot read baseline file {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BaselineError(
            f"baseline file {path} is corrupt (not valid JSON: {exc}); it was left untouched: "
            "restore it from version control or move it away"
        ) from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BaselineError(
            f"{path} is not a pytest-pipecheck baseline file (no \"schema\": \"{SCHEMA}\"); "
            "it was left untouched: move it out of the baseline directory"
        )
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < min(READABLE_VERSIONS):
        raise BaselineError(f"baseline file {path} has an invalid schema version {version!r}")
    if version > SCHEMA_VERSION:
        raise BaselineError(
            f"baseline file {path} has schema version {version}, newer than this pytest-pipecheck "
            f"understands ({SCHEMA_VERSION}); upgrade pytest-pipecheck"
        )
    env = data.get("env")
    tests = data.get("tests", {})
    if not isinstance(env, dict) or not isinstance(tests, dict):
        raise BaselineError(f"baseline file {path} is malformed: 'env' and 'tests' must be objects")
    try:
        key = EnvKey(env)
    except BaselineError as exc:
        raise BaselineError(f"baseline file {path}: {exc}") from None
    for nodeid, cases in tests.items():
        if not isinstance(cases, dict) or not all(isinstance(e, dict) for e in cases.values()):
            raise BaselineError(f"baseline file {path} is malformed: entry {nodeid!r} must map case ids to objects")
        for case, entry in cases.items():
            _check_entry(path, nodeid, case, entry)
    return BaselineFile(path, key, _migrate(tests, version), version)


def _finite_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and value == value and value not in (float("inf"), float("-inf")))


def _check_entry(path: str, nodeid: str, case: str, entry: Mapping[str, Any]) -> None:
    """The parts of an entry that are used as they are read (history, medians); the samples are
    validated where they are turned into :class:`Samples`. Errors name the file, test and case."""
    where = f"baseline file {path} is malformed: entry {nodeid!r} [case {case!r}]"
    if "median_us" in entry and not _finite_number(entry["median_us"]):
        raise BaselineError(f"{where}: 'median_us' is {entry['median_us']!r}; it must be a finite number")
    if "history" not in entry:
        return
    history = entry["history"]
    if not isinstance(history, list):
        raise BaselineError(f"{where}: 'history' is {type(history).__name__} {history!r:.60}; it must be a list "
                            "of {\"label\", \"median_us\"} objects")
    for i, h in enumerate(history):
        if not isinstance(h, dict):
            raise BaselineError(f"{where}: 'history' item {i} is {h!r:.60}; it must be an object with "
                                "\"label\" and \"median_us\"")
        if not _finite_number(h.get("median_us")):
            raise BaselineError(f"{where}: 'history' item {i} has median_us {h.get('median_us')!r}; it must be "
                                "a finite number")
        if "label" in h and not isinstance(h["label"], str):
            raise BaselineError(f"{where}: 'history' item {i} has label {h['label']!r}; it must be a string")


def _migrate(tests: dict[str, dict[str, dict[str, Any]]], version: int) -> dict[str, dict[str, dict[str, Any]]]:
    """Bring the entries of a file of schema ``version`` to the current schema, in memory.

    1 -> 2: nothing to change: version 2 only adds the optional ``anchor`` of an entry, and an entry
    without one is compared on raw times (the gate says so). Kept as a function so a later schema
    change has its place, and so the file on disk is only rewritten when something is saved.
    """
    del version  # every readable version's entries are valid version 2 entries
    return tests


def read_file(path: str) -> BaselineFile:
    """Parse one baseline file. Raises :class:`BaselineError` naming the file if it is unusable."""
    return _read(path)


@dataclass(frozen=True)
class Lookup:
    """The outcome of looking up one test's baseline: the samples, or why there are none."""

    samples: Samples | None
    reason: str  # why there is no baseline ("" when found)
    path: str
    entry: dict[str, Any] | None = None
    version: int = SCHEMA_VERSION  # schema version of the file the baseline came from
    missing_dir: bool = False  # the baseline directory itself is missing or not a directory


class BaselineStore:
    """The baseline directory: lookup by (environment, test, case) and atomic saving."""

    def __init__(self, directory: str, source: str = "baseline_dir") -> None:
        self.directory = directory
        self.source = source  # where the directory came from, for messages

    def path_for(self, key: EnvKey) -> str:
        return os.path.join(self.directory, key.filename())

    # ------------------------------------------------------------------ reading
    def files(self) -> list[tuple[str, BaselineFile | BaselineError]]:
        """Every ``*.json`` in the directory, parsed, or the error that parsing it raised."""
        if not os.path.isdir(self.directory):
            return []
        out: list[tuple[str, BaselineFile | BaselineError]] = []
        for name in sorted(os.listdir(self.directory)):
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = os.path.join(self.directory, name)
            try:
                out.append((path, _read(path)))
            except BaselineError as exc:
                out.append((path, exc))
        return out

    def load(self, key: EnvKey) -> BaselineFile | None:
        """The file for ``key``, None when absent. Raises :class:`BaselineError` if it is unusable."""
        path = self.path_for(key)
        if not os.path.lexists(path):
            return None
        bf = _read(path)
        if bf.env != key:
            raise BaselineError(
                f"baseline file {path} holds the key of another environment ({bf.env.describe()}; "
                f"differs in {', '.join(key.differences(bf.env))}); it was left untouched: "
                "was it renamed or edited by hand?"
            )
        return bf

    def lookup(self, key: EnvKey, nodeid: str, case: str) -> Lookup:
        """Find the baseline of one test case for this environment.

        A missing directory, file or entry gives ``samples=None`` and a reason; a baseline of another
        environment is never returned, and the reason lists the environments that do have files.
        Raises :class:`BaselineError` for a corrupt or foreign file at this environment's path.
        """
        path = self.path_for(key)
        save_hint = "run with --pipecheck-baseline-save to record one"
        if not os.path.isdir(self.directory):
            what = "is not a directory" if os.path.exists(self.directory) else "does not exist"
            return Lookup(None, f"no baseline: directory {self.directory} ({self.source}) {what}; {save_hint}", path,
                          missing_dir=True)
        bf = self.load(key)
        if bf is None:
            others = []
            for other_path, other in self.files():
                if isinstance(other, BaselineFile):
                    diff = key.differences(other.env)
                    others.append(f"{os.path.basename(other_path)} ({other.env.describe()}; differs in "
                                  f"{', '.join(diff)})")
            where = ("; baselines exist only for other environments and are not compared: " + " | ".join(others)
                     if others else "; the directory has no baseline files")
            return Lookup(None, f"no baseline for this GPU and software stack ({key.describe()}){where}; "
                          f"{save_hint}", path)
        samples = bf.samples(nodeid, case)
        if samples is None:
            return Lookup(None, f"no baseline for {nodeid} [case {case}] in {path}; {save_hint}", path)
        return Lookup(samples, "", path, bf.entry(nodeid, case), bf.version)

    # ------------------------------------------------------------------ writing
    def save(self, key: EnvKey, nodeid: str, case: str, entry: Mapping[str, Any]) -> str:
        """Store ``entry`` (a :meth:`Samples.to_json` plus extra facts) for one test case; returns the path.

        Creates the directory if needed. Merges into the existing file under a directory lock and
        replaces it atomically. Raises :class:`BaselineError` when the directory cannot be created or
        written, or when the existing file is corrupt or foreign (it is then left as it was).
        """
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise BaselineError(
                f"cannot create baseline directory {self.directory} ({self.source}): {exc.strerror or exc}"
            ) from None
        if not os.path.isdir(self.directory):
            raise BaselineError(f"baseline directory {self.directory} ({self.source}) is not a directory")
        with self._locked():
            bf = self.load(key) or BaselineFile(self.path_for(key), key, {})
            record = dict(entry)
            record.setdefault("saved_at", _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
            record["history"] = history_of(bf.tests.get(nodeid, {}).get(case))
            bf.tests.setdefault(nodeid, {})[case] = record
            _atomic_write_json(bf.path, bf.to_json())
        return bf.path

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        # An advisory lock on the directory itself: no lock file litters the repository, and it is
        # released by the kernel if the process dies. Without fcntl (Windows) saving is unlocked.
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            yield
            return
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock


HISTORY_LENGTH = 20


def history_of(previous: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """A stored baseline's history followed by the baseline itself: what a new baseline replacing it
    carries, and what a comparison against it reports.

    Only medians and dates are kept (the samples of old baselines are not), at most
    :data:`HISTORY_LENGTH` entries, oldest first; the HTML report plots it.
    """
    if not isinstance(previous, Mapping):
        return []
    history = [h for h in previous.get("history", []) if isinstance(h, Mapping)]
    median = previous.get("median_us")
    if isinstance(median, (int, float)):
        history.append({"label": str(previous.get("saved_at", "?")), "median_us": float(median)})
    return [dict(h) for h in history[-HISTORY_LENGTH:]]


def _refuse_non_regular(path: str) -> None:
    """A baseline file is a regular file: a symlink, FIFO or device at its path is an error, never
    replaced (a symlink would be swapped for a file, a FIFO would block the reader)."""
    found = describe_non_regular(path)
    if found is not None:
        raise BaselineError(
            f"baseline file {path} is {found}; pipecheck reads and writes regular baseline files only and "
            "left it untouched: replace it with a regular file (or remove it)"
        )


def _atomic_write_json(path: str, data: Any) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a torn one."""
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    try:
        atomic_write_text(path, text, "baseline file", refuse=_refuse_non_regular, make_dirs=False,
                          no_temp_file=lambda directory, exc: BaselineError(
                              f"cannot write baseline in {directory}: {exc.strerror or exc}"))
    except OSError as exc:
        raise BaselineError(f"cannot write baseline file {path}: {exc.strerror or exc}") from None
