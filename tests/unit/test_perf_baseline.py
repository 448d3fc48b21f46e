"""Baseline storage: keying, atomic writes, corrupt and foreign files, missing and unwritable dirs."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from pytest_pipecheck import _atomic
from pytest_pipecheck.perf import baseline as bl
from pytest_pipecheck.perf.baseline import BaselineError, BaselineStore, EnvKey
from pytest_pipecheck.perf.stats import Samples

H100 = EnvKey.create(gpu="NVIDIA H100 80GB HBM3", sm_count=132, compute_capability="9.0", driver="580.65",
                     cuda="13.0", torch="2.11.0", triton="3.6.0", cupy="14.2.0")
H200 = EnvKey.create(gpu="NVIDIA H200", sm_count=132, compute_capability="9.0", driver="580.65",
                     cuda="13.0", torch="2.11.0", triton="3.6.0", cupy="14.2.0")
NODE = "tests/test_gemm.py::test_gemm[fp16]"


def _entry(median: float = 60.0) -> dict:
    return Samples.of([median + 0.01 * i for i in range(20)], mode="cold").to_json()


def _saved_then_edited(tmp_path, edit, entry: dict | None = None) -> tuple[BaselineStore, str]:
    """A store with one saved entry whose file ``edit`` (a function of the parsed JSON) then changed by hand."""
    store = BaselineStore(str(tmp_path))
    path = store.save(H100, NODE, "default", _entry() if entry is None else entry)
    with open(path) as fh:
        data = json.load(fh)
    edit(data)
    with open(path, "w") as fh:
        json.dump(data, fh)
    return store, path


def test_key_filename_is_readable_and_stable() -> None:
    name = H100.filename()
    assert name.startswith("NVIDIA-H100-80GB-HBM3-sm90-") and name.endswith(".json")
    assert name == EnvKey(dict(H100.values)).filename()
    assert H100.filename() != H200.filename()
    # any differing field changes the key
    other = EnvKey({**H100.values, "triton": "3.9.0"})
    assert other.filename() != name
    assert H100.differences(other) == ["triton 3.9.0!=3.6.0"]


def test_unknown_key_field_is_rejected() -> None:
    with pytest.raises(BaselineError, match=r"unknown fields"):
        EnvKey.create(gpu="x", colour="red")


def test_save_then_lookup(tmp_path) -> None:
    store = BaselineStore(str(tmp_path / "b"))
    path = store.save(H100, NODE, "default", _entry())
    assert os.path.dirname(path) == str(tmp_path / "b")  # the directory is created
    found = store.lookup(H100, NODE, "default")
    assert found.samples is not None and found.samples.n == 20 and found.reason == ""
    data = json.loads(open(path).read())
    assert data["schema"] == bl.SCHEMA and data["version"] == bl.SCHEMA_VERSION
    assert data["env"]["gpu"] == "NVIDIA H100 80GB HBM3"
    assert "saved_at" in data["tests"][NODE]["default"]
    # sorted and indented, so diffs review well
    text = open(path).read()
    assert text == json.dumps(data, indent=2, sort_keys=True) + "\n"


def test_save_merges_entries(tmp_path) -> None:
    store = BaselineStore(str(tmp_path))
    store.save(H100, NODE, "default", _entry(60))
    store.save(H100, NODE, "big", _entry(600))
    store.save(H100, "t.py::other", "default", _entry(6))
    bf = store.load(H100)
    assert bf is not None
    assert set(bf.tests) == {NODE, "t.py::other"} and set(bf.tests[NODE]) == {"default", "big"}
    assert bf.samples(NODE, "big").median > 500


def test_missing_directory_is_a_reason_not_an_error(tmp_path) -> None:
    found = BaselineStore(str(tmp_path / "nope"), "baseline_dir from the ini").lookup(H100, NODE, "default")
    assert found.samples is None
    assert "does not exist" in found.reason and "baseline_dir from the ini" in found.reason
    assert "--pipecheck-baseline-save" in found.reason


def test_missing_entry(tmp_path) -> None:
    store = BaselineStore(str(tmp_path))
    store.save(H100, NODE, "default", _entry())
    found = store.lookup(H100, NODE, "other-case")
    assert found.samples is None and "case other-case" in found.reason


def test_other_environment_is_never_compared(tmp_path) -> None:
    store = BaselineStore(str(tmp_path))
    store.save(H200, NODE, "default", _entry())
    found = store.lookup(H100, NODE, "default")
    assert found.samples is None
    assert "not compared" in found.reason
    assert H200.filename() in found.reason and "gpu NVIDIA H200!=NVIDIA H100 80GB HBM3" in found.reason


def test_empty_directory_reason(tmp_path) -> None:
    found = BaselineStore(str(tmp_path)).lookup(H100, NODE, "default")
    assert "no baseline files" in found.reason


def test_corrupt_file_is_an_error_and_never_overwritten(tmp_path) -> None:
    store = BaselineStore(str(tmp_path))
    path = store.path_for(H100)
    with open(path, "w") as fh:
        fh.write('{"schema": "pytest-pipecheck-baseline", "version": 1, "env": {')
    before = open(path).read()
    with pytest.raises(BaselineError, match=r"corrupt.*left untouched") as info:
        store.lookup(H100, NODE, "default")
    assert path in str(info.value)
    with pytest.raises(BaselineError, match=r"corrupt"):
        store.save(H100, NODE, "default", _entry())
    assert open(path).read() == before


def test_foreign_json_file_is_an_error(tmp_path) -> None:
    store = BaselineStore(str(tmp_path))
    path = store.path_for(H100)
    with open(path, "w") as fh:
        json.dump({"machine_info": {}, "benchmarks": []}, fh)  # e.g. a pytest-benchmark file
    with pytest.raises(BaselineError, match=r"not a pytest-pipecheck baseline file"):
        store.lookup(H100, NODE, "default")
    with pytest.raises(BaselineError):
        store.save(H100, NODE, "default", _entry())
    assert json.load(open(path)) == {"machine_info": {}, "benchmarks": []}


def test_file_holding_another_key_is_foreign(tmp_path) -> None:
    store = BaselineStore(str(tmp_path))
    path = store.save(H200, NODE, "default", _entry())
    os.rename(path, store.path_for(H100))  # renamed by hand
    with pytest.raises(BaselineError, match=r"another environment.*differs in gpu"):
        store.lookup(H100, NODE, "default")


def test_newer_schema_is_refused(tmp_path) -> None:
    store, _ = _saved_then_edited(tmp_path, lambda data: data.update(version=bl.SCHEMA_VERSION + 1))
    with pytest.raises(BaselineError, match=r"newer than this pytest-pipecheck"):
        store.lookup(H100, NODE, "default")


def test_malformed_entry_names_the_file(tmp_path) -> None:
    store, path = _saved_then_edited(tmp_path,
                                     lambda data: data["tests"][NODE]["default"].update(samples_us=[1.0, -5.0]))
    with pytest.raises(BaselineError, match=f"{path}.*sample 1"):
        store.lookup(H100, NODE, "default")


def test_crash_mid_write_keeps_the_old_file(tmp_path, monkeypatch) -> None:
    store = BaselineStore(str(tmp_path))
    path = store.save(H100, NODE, "default", _entry(60))
    before = open(path).read()

    def crash(fd: int) -> None:
        raise OSError(5, "Input/output error")  # the disk fails after the data was written

    monkeypatch.setattr(bl.os, "fsync", crash)
    with pytest.raises(BaselineError, match=r"cannot write baseline file.*Input/output error"):
        store.save(H100, NODE, "default", _entry(99))
    assert open(path).read() == before
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]  # no temporary file left behind


def test_interrupt_mid_write_keeps_the_old_file(tmp_path, monkeypatch) -> None:
    store = BaselineStore(str(tmp_path))
    path = store.save(H100, NODE, "default", _entry(60))
    before = open(path).read()

    def interrupted(src: str, dst: str) -> None:
        raise KeyboardInterrupt  # Ctrl-C between writing the temporary file and renaming it

    monkeypatch.setattr(bl.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        store.save(H100, NODE, "default", _entry(99))
    assert open(path).read() == before
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]


def test_a_torn_temporary_file_is_ignored(tmp_path) -> None:
    # a process killed with SIGKILL leaves its temporary file; readers never see it
    store = BaselineStore(str(tmp_path))
    path = store.save(H100, NODE, "default", _entry(60))
    with open(os.path.join(tmp_path, "." + os.path.basename(path) + ".abc.tmp"), "w") as fh:
        fh.write('{"schema": "pytest-pipe')
    assert store.lookup(H100, NODE, "default").samples is not None
    assert [p for p, _ in store.files()] == [path]


@pytest.mark.skipif(sys.platform == "win32" or (hasattr(os, "geteuid") and os.geteuid() == 0),
                    reason="permission bits do not bind root or Windows")
def test_unwritable_directory_is_a_clear_error(tmp_path) -> None:
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        with pytest.raises(BaselineError, match=f"cannot write baseline in {d}"):
            BaselineStore(str(d)).save(H100, NODE, "default", _entry())
    finally:
        d.chmod(stat.S_IRWXU)


def test_unwritable_directory_via_mkstemp_failure(tmp_path, monkeypatch) -> None:
    # root ignores permission bits, so simulate what the OS says to an ordinary user
    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_atomic.tempfile, "mkstemp", denied)
    with pytest.raises(BaselineError, match=r"cannot write baseline in .*Permission denied"):
        BaselineStore(str(tmp_path)).save(H100, NODE, "default", _entry())


def test_directory_that_is_a_file(tmp_path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    store = BaselineStore(str(f))
    assert "is not a directory" in store.lookup(H100, NODE, "default").reason
    with pytest.raises(BaselineError, match=r"cannot create baseline directory|not a directory"):
        store.save(H100, NODE, "default", _entry())


def test_files_lists_good_and_bad(tmp_path) -> None:
    store = BaselineStore(str(tmp_path))
    good = store.save(H100, NODE, "default", _entry())
    (tmp_path / "zz-bad.json").write_text("not json")
    (tmp_path / "README.md").write_text("baselines live here")
    listed = store.files()
    assert [p for p, _ in listed] == [good, str(tmp_path / "zz-bad.json")]
    assert isinstance(listed[1][1], BaselineError)


# --------------------------------------------------------------------------- schema 2: anchors, and reading version 1

ANCHOR = {"kind": "matmul", "dtype": "bf16", "m": 2048, "n": 2048, "k": 4096, "label": "bf16 matmul 2048x2048x4096"}


def _anchored_entry(median: float = 60.0) -> dict:
    return Samples.of([median + 0.01 * i for i in range(20)], anchor_us=[50.0 + 0.01 * i for i in range(20)],
                      anchor=ANCHOR, mode="cold").to_json()


def _write_v1(path: str, tests: dict) -> None:
    with open(path, "w") as fh:
        json.dump({"schema": bl.SCHEMA, "version": 1, "env": dict(H100.values), "tests": tests}, fh, indent=2)


def test_schema_version_is_2_and_anchor_roundtrips(tmp_path) -> None:
    assert bl.SCHEMA_VERSION == 2 and bl.READABLE_VERSIONS == (1, 2)
    store = BaselineStore(str(tmp_path))
    path = store.save(H100, NODE, "default", _anchored_entry())
    data = json.load(open(path))
    assert data["version"] == 2
    stored = data["tests"][NODE]["default"]["anchor"]
    assert stored["definition"] == ANCHOR and len(stored["samples_us"]) == 20 and stored["median_us"] > 50
    found = store.lookup(H100, NODE, "default")
    assert found.version == 2
    assert found.samples is not None and found.samples.anchored and found.samples.anchor == ANCHOR


def test_version_1_file_is_read_without_anchors(tmp_path) -> None:
    store = BaselineStore(str(tmp_path))
    path = store.path_for(H100)
    old_entry = {k: v for k, v in _entry(70).items()}
    _write_v1(path, {NODE: {"default": old_entry}})
    before = open(path).read()
    found = store.lookup(H100, NODE, "default")
    assert found.version == 1 and found.samples is not None and not found.samples.anchored
    assert found.samples.median == pytest.approx(70.095)
    assert open(path).read() == before  # reading never rewrites


def test_saving_into_a_version_1_file_migrates_it_and_keeps_old_entries(tmp_path) -> None:
    store = BaselineStore(str(tmp_path))
    path = store.path_for(H100)
    old_entry = _entry(70)
    _write_v1(path, {NODE: {"default": old_entry}, "t.py::other": {"default": _entry(7)}})
    store.save(H100, NODE, "anchored", _anchored_entry(80))
    data = json.load(open(path))
    assert data["version"] == 2
    assert data["tests"][NODE]["default"] == old_entry  # untouched, still without an anchor
    assert data["tests"]["t.py::other"]["default"]["median_us"] == pytest.approx(7.095)
    bf = store.load(H100)
    assert bf is not None and bf.version == 2
    assert not bf.samples(NODE, "default").anchored and bf.samples(NODE, "anchored").anchored


@pytest.mark.parametrize("version", [0, "2", True, None, 2.0])
def test_invalid_schema_versions(tmp_path, version: object) -> None:
    store, _ = _saved_then_edited(tmp_path, lambda data: data.update(version=version))
    with pytest.raises(BaselineError, match=r"invalid schema version"):
        store.lookup(H100, NODE, "default")


def test_malformed_anchor_names_the_file(tmp_path) -> None:
    def keep_5_anchor_samples(data: dict) -> None:
        anchor = data["tests"][NODE]["default"]["anchor"]
        anchor["samples_us"] = anchor["samples_us"][:5]

    store, path = _saved_then_edited(tmp_path, keep_5_anchor_samples, _anchored_entry())
    with pytest.raises(BaselineError, match=f"{path}.*5 anchor samples for 20 kernel samples"):
        store.lookup(H100, NODE, "default")


def test_each_save_keeps_the_replaced_baselines_median_as_history(tmp_path) -> None:
    from pytest_pipecheck.perf import baseline as bl

    store = bl.BaselineStore(str(tmp_path / "b"), "test")
    key = bl.EnvKey({"gpu": "NVIDIA H200", "sm_count": 132})
    for i, median in enumerate([100.0, 101.0, 99.5]):
        store.save(key, "t.py::test_k", "default", {"median_us": median, "samples_us": [median] * 8,
                                                     "saved_at": f"2026-11-2{i}"})
    entry = store.load(key).entry("t.py::test_k", "default")
    assert entry["median_us"] == 99.5
    assert entry["history"] == [{"label": "2026-11-20", "median_us": 100.0},
                                {"label": "2026-11-21", "median_us": 101.0}]
    assert bl.history_of(entry)[-1] == {"label": "2026-11-22", "median_us": 99.5}
    for i in range(30):
        store.save(key, "t.py::test_k", "default", {"median_us": float(i), "samples_us": [1.0] * 8})
    assert len(store.load(key).entry("t.py::test_k", "default")["history"]) == bl.HISTORY_LENGTH


# docs/verdicts.md item 18: baseline files are regular files; anything else at the path is refused, untouched
@pytest.mark.skipif(sys.platform == "win32", reason="symlinks and FIFOs")
@pytest.mark.parametrize("kind", ["symlink", "fifo", "dangling"])
def test_non_regular_baseline_file_is_refused_and_left_alone(tmp_path, kind: str) -> None:
    store = BaselineStore(str(tmp_path / "bl"))
    os.makedirs(store.directory)
    path = store.path_for(H100)
    target = tmp_path / "elsewhere.json"
    if kind == "symlink":
        # a valid baseline file elsewhere: the link would be replaced by a regular file on save
        BaselineStore(str(tmp_path / "other")).save(H100, NODE, "default", _entry())
        target.write_text(open(BaselineStore(str(tmp_path / "other")).path_for(H100)).read())
        os.symlink(target, path)
    elif kind == "dangling":
        os.symlink(target, path)
    else:
        os.mkfifo(path)  # reading it would block the run forever
    with pytest.raises(BaselineError, match=rf"{path} is a (symbolic link|FIFO).*regular"):
        store.lookup(H100, NODE, "default")
    with pytest.raises(BaselineError, match=rf"{path} is a (symbolic link|FIFO).*left it untouched"):
        store.save(H100, NODE, "default", _entry())
    assert os.path.islink(path) if kind != "fifo" else stat.S_ISFIFO(os.lstat(path).st_mode)
    assert not target.exists() or json.loads(target.read_text())["schema"] == bl.SCHEMA
    # the listing reports it as unusable instead of opening it
    assert [type(x) for _, x in store.files()] == [BaselineError]


def test_replace_refuses_what_appears_at_the_path_while_writing(tmp_path, monkeypatch) -> None:
    store = BaselineStore(str(tmp_path))
    path = store.path_for(H100)
    real_chmod = os.chmod

    def chmod_then_link(p, mode, *a, **k):  # type: ignore[no-untyped-def]
        real_chmod(p, mode, *a, **k)
        if not os.path.lexists(path):
            os.symlink(tmp_path / "x", path)

    monkeypatch.setattr(bl.os, "chmod", chmod_then_link)
    with pytest.raises(BaselineError, match="symbolic link"):
        store.save(H100, NODE, "default", _entry())
    assert os.path.islink(path)
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(path)]  # no temporary file left


# docs/verdicts.md item 19: tiny samples keep their value (rounded to 0.0, they would be refused on read)
def test_samples_below_the_old_rounding_survive_a_round_trip(tmp_path) -> None:
    tiny = [3e-5 + 1e-7 * i for i in range(20)]
    store = BaselineStore(str(tmp_path))
    store.save(H100, NODE, "default", Samples.of(tiny, anchor_us=[2e-5] * 20).to_json())
    found = store.lookup(H100, NODE, "default")
    assert found.samples is not None
    assert found.samples.times_us == tuple(tiny)  # bit for bit
    assert found.samples.anchor_us == (2e-5,) * 20


# docs/verdicts.md item 20: a malformed entry is a BaselineError naming the file, the test and the key
@pytest.mark.parametrize(("history", "what"), [
    (5, r"'history' is int 5"),
    ("abc", r"'history' is str"),
    ([{"label": "x", "median_us": "slow"}], r"'history' item 0 has median_us 'slow'"),
    ([3.0], r"'history' item 0 is 3.0"),
    ([{"label": 7, "median_us": 1.0}], r"'history' item 0 has label 7"),
    ([{"median_us": float("nan")}], r"'history' item 0 has median_us nan"),
])
def test_malformed_history_names_file_and_key(tmp_path, history: object, what: str) -> None:
    store, path = _saved_then_edited(tmp_path, lambda data: data["tests"][NODE]["default"].update(history=history))
    before = open(path).read()
    pattern = rf"{path} is malformed: entry '{NODE}' \[case 'default'\]: {what}"
    pattern = pattern.replace("[fp16]", r"\[fp16\]")
    with pytest.raises(BaselineError, match=pattern):
        store.lookup(H100, NODE, "default")
    with pytest.raises(BaselineError, match=pattern):
        store.save(H100, NODE, "default", _entry(70))
    assert open(path).read() == before
