"""The sanitizer share cut under pytest-xdist, and the scheduler pipecheck gives xdist.

A worker sanitizes the whole share its first test belongs to, so pipecheck's scheduler sends every test of
a share to one worker (sanitizer/xdist_shares.py). What ``--dist loadgroup`` (an ``xdist_group``),
``loadfile`` (a module) or ``loadscope`` (a class, or a module's functions) keeps on one worker must
therefore never be cut into two shares. Under loadgroup xdist's workers append ``@group`` to the node id of
a grouped test, and the controller schedules those ids; where pytest drops that suffix, the workers hand the
controller their groups in a file. Either way workers and controller cut the same shares.

The shares balance what each test costs its worker: its normal run plus its sanitizer seconds, as stored
by earlier runs. The workers and the scheduler are those of scripts/xdist_order_model.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from _load import load_file

pytest.importorskip("xdist")

from pytest_pipecheck import state
from pytest_pipecheck.config import PipecheckConfig
from pytest_pipecheck.sanitizer.costs import CACHE_KEY
from pytest_pipecheck.sanitizer.parent_plugin import SanitizerPlugin
from pytest_pipecheck.sanitizer.shares import shares_for

model = load_file("xdist_order_model", Path(__file__).resolve().parents[2] / "scripts" / "xdist_order_model.py")


class Cache:
    def __init__(self, data: dict[str, Any] | None = None) -> None:
        self.data = dict(data or {})

    def get(self, key: str, default: Any) -> Any:
        return self.data.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.data[key] = value


class Config:
    """What the share cut and the scheduler read of pytest's config: the controller's (``dist`` as given) or
    a worker's (xdist sets its ``dist`` to "no"; the controller's mode arrives in ``workerinput``)."""

    def __init__(self, dist: str, *, worker: bool = False, workers: int = 2, shares: int = 1,
                 order: str = "collection", cache: dict[str, Any] | None = None, rootpath: Path | None = None) -> None:
        self.option = SimpleNamespace(dist="no" if worker else dist, loadgroup=dist == "loadgroup",
                                      loadscopereorder=True)
        if worker:
            self.workerinput = {"workerid": "gw0", "workercount": workers, "pipecheck_dist": dist}
        self._values = {"dist": self.option.dist, "tx": [f"{workers}*popen"]}
        self.cache = Cache(cache)
        self.rootpath = rootpath
        self.pluginmanager = SimpleNamespace(has_plugin=lambda name: name == "pipecheck-sanitizer")
        self.stash = pytest.Stash()
        self.stash[state.RUN_CONFIG] = PipecheckConfig(xdist_shares=shares, xdist_order=order)

    def getvalue(self, name: str) -> Any:
        return self._values[name]

    def getoption(self, name: str, default: Any = None) -> Any:
        return default


def _cut(ids: list[str], dist: str, workers: int = 2, **kw: Any) -> list[int]:
    controller = shares_for(Config(dist, workers=workers, **kw), ids, workers)  # type: ignore[arg-type]
    worker = shares_for(Config(dist, worker=True, workers=workers, **kw), ids, workers)  # type: ignore[arg-type]
    assert controller == worker  # the worker sanitizes exactly the share the controller sends it
    return controller


def _group(nodeid: str) -> str | None:
    return nodeid.rsplit("@", 1)[1] if "@" in nodeid.rsplit("]", 1)[-1] else None


def _groups_whole(ids: list[str], shares: list[int]) -> dict[str, set[int]]:
    by_group: dict[str, set[int]] = {}
    for nodeid, share in zip(ids, shares):
        group = _group(nodeid)
        if group is not None:
            by_group.setdefault(group, set()).add(share)
    assert all(len(s) == 1 for s in by_group.values()), by_group
    return by_group


@pytest.fixture(autouse=True)
def _no_durations_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no .test_durations of the repository: equal costs unless a test gives some


def test_a_group_larger_than_a_share_stays_in_one_share() -> None:
    """Nine of twenty tests in one group, four shares of five: the group is one share's, wherever its tests
    are collected, and the other eleven tests still make the other shares."""
    ids = [f"test_{m}.py::test_{i}" + ("@big" if (m in "ab" and i < 3) or (m == "d" and i in (1, 3, 4)) else "")
           for m in "abcd" for i in range(5)]
    assert sum(_group(n) == "big" for n in ids) == 9  # in three modules
    shares = _cut(ids, "loadgroup", workers=4)
    _groups_whole(ids, shares)
    assert sorted(set(shares)) == [0, 1, 2, 3]


def test_several_groups_each_stay_in_one_share_and_the_rest_stays_in_collection_order() -> None:
    ids = []
    for m in range(4):
        for i in range(6):
            group = {0: "gpu0", 3: "db"}.get(i) if m % 2 == 0 else {1: "gpu0", 5: "cache"}.get(i)
            ids.append(f"test_m{m}.py::test_{i}" + (f"@{group}" if group else ""))
    for workers, per_worker in [(2, 1), (2, 3), (3, 2)]:
        shares = _cut(ids, "loadgroup", workers=workers, shares=per_worker)
        assert set(_groups_whole(ids, shares)) == {"gpu0", "db", "cache"}
        plain = [s for n, s in zip(ids, shares) if _group(n) is None]
        assert plain == sorted(plain)  # ungrouped tests: contiguous runs, as without groups
        assert len(set(shares)) == workers * per_worker


def test_a_group_is_placed_where_its_first_test_is_collected() -> None:
    """Equal costs, two shares: the group (two tests, one in each module) counts twice where ``a``'s member
    is collected, and the cut falls one test earlier than it would without it."""
    ids = ["a.py::t0", "a.py::t1@g", "a.py::t2", "a.py::t3", "b.py::t0", "b.py::t1@g", "b.py::t2", "b.py::t3"]
    assert _cut(ids, "loadgroup") == [0, 0, 0, 1, 1, 0, 1, 1]
    # without loadgroup the suffix means nothing to pipecheck (xdist adds it only under loadgroup)
    assert _cut(ids, "load") == [0, 0, 0, 0, 1, 1, 1, 1]


def test_a_groups_cost_is_its_tests_known_costs_under_their_own_node_ids() -> None:
    """The cache keeps each test's seconds under its node id without the ``@group`` xdist appends."""
    ids = [f"a.py::t{i}" for i in range(6)] + ["a.py::heavy@g", "b.py::heavy@g"] + [f"b.py::t{i}" for i in range(6)]
    cache = {CACHE_KEY: {**{n.split("@")[0]: 1.0 for n in ids}, "a.py::heavy": 6.0, "b.py::heavy": 6.0}}
    shares = _cut(ids, "loadgroup", workers=3, cache=cache)
    _groups_whole(ids, shares)
    # 6 s in a's single tests, 12 s in the group, 6 s in b's: the group gets the middle share to itself
    assert shares == [0] * 6 + [1, 1] + [2] * 6, shares


def test_an_at_sign_inside_a_parameter_id_is_no_group() -> None:
    ids = ["a.py::t[x@y]", "a.py::t[z]@g", "a.py::u", "b.py::t[x@y]", "b.py::t[q]@g", "b.py::u"]
    shares = _cut(ids, "loadgroup")
    assert shares[1] == shares[4]  # the group g
    assert shares[0] != shares[3]  # two single tests whose parameter id holds an "@": cut between them


@pytest.mark.parametrize("dist", ["loadfile", "loadscope"])
def test_loadfile_keeps_modules_and_loadscope_classes_whole(dist: str) -> None:
    ids = (["a.py::f0", "a.py::f1"] + [f"b.py::TestC::m[{i}]" for i in range(5)] + ["b.py::TestD::m0", "b.py::TestD::m1"]
           + [f"c.py::f{i}" for i in range(3)])
    for workers in (2, 3):
        shares = _cut(ids, dist, workers=workers)
        scope = (lambda n: n.split("::", 1)[0]) if dist == "loadfile" else (lambda n: n.rsplit("::", 1)[0])
        whole: dict[str, set[int]] = {}
        for nodeid, share in zip(ids, shares):
            whole.setdefault(scope(nodeid), set()).add(share)
        assert all(len(s) == 1 for s in whole.values()), (dist, workers, whole)
        assert shares == sorted(shares)  # no scope spans modules: still contiguous
        assert len(set(shares)) == workers


def test_dist_each_gives_each_worker_one_share() -> None:
    """Every worker runs every test under ``--dist each``: one share, one child per tool."""
    assert set(_cut([f"a.py::t{i}" for i in range(8)], "each", workers=2, shares=3)) == {0}


def _scheduled(config: Config, ids: list[str], costs: dict[str, float] | None = None,
               workers: int = 2) -> tuple[dict[str, str], float]:
    """The worker each test was sent to by the scheduler pipecheck gives xdist, and when the last test ended:
    workers that take ``costs`` seconds a test (1 s each by default) on a simulated clock, with xdist's rule
    that a worker starts a test once it knows its next one, as scripts/xdist_order_model.py runs them."""
    sched = SanitizerPlugin.pytest_xdist_make_scheduler(SanitizerPlugin.__new__(SanitizerPlugin), config,  # type: ignore[arg-type]
                                                        model.QuietLog())
    nodes = [model.FakeWorker(f"gw{i}") for i in range(workers)]
    for node in nodes:
        sched.add_node(node)
        sched.add_node_collection(node, list(ids))
    sched.schedule()
    queue: dict[Any, list[int]] = {n: [] for n in nodes}
    seen = {n: 0 for n in nodes}
    free_at = {n: 0.0 for n in nodes}
    ran: dict[str, str] = {}
    while True:
        for n in nodes:
            for batch in n.sent[seen[n]:]:
                queue[n].extend(batch)
            seen[n] = len(n.sent)
        ready = [n for n in nodes if queue[n] and (len(queue[n]) > 1 or n.shutting_down)]
        if not ready:
            assert not any(queue.values())
            return ran, max(free_at.values())
        n = min(ready, key=lambda w: (free_at[w], w.name))
        index = queue[n].pop(0)
        ran[ids[index]] = n.name
        free_at[n] += (costs or {}).get(ids[index], 1.0)
        sched.mark_test_complete(n, index)


@pytest.mark.parametrize("order", ["collection", "cost"])
def test_the_scheduler_sends_a_groups_tests_to_one_worker(order: str) -> None:
    ids = [f"test_{m}.py::test_{i}" + ("@owner" if i == 1 else "@other" if (m, i) in {("a", 4), ("c", 0)} else "")
           for m in "abc" for i in range(5)]
    ran, _ = _scheduled(Config("loadgroup", shares=2, order=order), ids)
    assert set(ran) == set(ids)
    for group in ("owner", "other"):
        assert len({w for n, w in ran.items() if n.endswith("@" + group)}) == 1, ran
    assert set(ran.values()) == {"gw0", "gw1"}


def test_a_dist_mode_pipecheck_does_not_know_is_refused_with_the_option_named() -> None:
    """A future ``--dist`` mode may promise what the share scheduler does not keep: refused, never replaced."""
    with pytest.raises(pytest.UsageError, match=r"--dist=roundtrip.*sanitizer.*--pipecheck-sanitizer=none"):
        _scheduled(Config("roundtrip"), ["a.py::t0", "a.py::t1"])


def _item(nodeid: str, *groups: Any) -> Any:
    """A collected test as the worker's share cut reads it: its node id and its ``xdist_group`` marks."""
    marks = [(pytest.mark.xdist_group(g) if isinstance(g, str) else pytest.mark.xdist_group(**g)).mark for g in groups]
    return SimpleNamespace(nodeid=nodeid, iter_markers=lambda name: [m for m in marks if m.name == name])


def test_groups_reach_the_controller_when_the_node_ids_do_not_carry_them(tmp_path: Path) -> None:
    """Where pytest does not let xdist append ``@group`` to a node id, the ids the controller schedules carry
    no group: the workers write their groups to the file the controller named, and the controller cuts the
    same shares as its workers. The file goes when the run ends."""
    from pytest_pipecheck.state import RUN_SEED
    from pytest_pipecheck.xdist_hooks import pytest_configure_node, read_groups

    cleanups: list[Any] = []
    controller = Config("loadgroup", workers=2)
    controller.add_cleanup = cleanups.append  # type: ignore[attr-defined]
    controller.stash[RUN_SEED] = 5
    controller.stash[state.RUN_CONFIG] = PipecheckConfig(tier="cpu")
    node = SimpleNamespace(config=controller, workerinput={"workerid": "gw1", "workercount": 2})
    pytest_configure_node(node)
    assert node.workerinput["pipecheck_dist"] == "loadgroup"
    workerinput = json.loads(json.dumps(node.workerinput))  # what execnet sends: plain data
    items = [_item("a.py::t0"), _item("a.py::t1", "owner"), _item("a.py::t2"), _item("a.py::t3"),
             _item("b.py::t0"), _item("b.py::t1", {"name": "owner"}), _item("b.py::t2"), _item("b.py::t3"),
             _item("b.py::t4", "x", "owner"), _item("b.py::t5", {})]
    ids = [i.nodeid for i in items]
    worker = Config("loadgroup", worker=True, workers=2)
    worker.workerinput = workerinput
    plugin = SanitizerPlugin.__new__(SanitizerPlugin)
    plugin.worker_count = 2
    for item in items:
        item.stash = pytest.Stash()
    plugin.pytest_collection_modifyitems(worker, items)  # type: ignore[arg-type]
    on_worker = [item.stash[state.SHARE] for item in items]
    assert read_groups(controller) == {"a.py::t1": "owner", "b.py::t1": "owner", "b.py::t4": "owner_x",
                                       "b.py::t5": "default"}
    on_controller = shares_for(controller, ids, 2)  # type: ignore[arg-type]
    assert on_controller == on_worker
    assert on_worker[1] == on_worker[5]  # the group "owner", a test in each module
    assert on_worker == [0, 0, 0, 0, 1, 0, 1, 1, 1, 1], on_worker  # the group weighs two: five tests a side
    for cleanup in cleanups:
        cleanup()
    assert not Path(workerinput["pipecheck_groups"]).parent.exists()


# ---------------------------------------------------------------- each test's whole cost

#: two tests long in their normal run (a compile, a reference) but quick under the sanitizer, then six
#: tests that are the other way round
HEAVY = ["test_a.py::test_heavy[0]", "test_a.py::test_heavy[1]"]
LIGHT = [f"test_b.py::test_light[{i}]" for i in range(6)]
SANITIZER = {**{n: 0.5 for n in HEAVY}, **{n: 2.0 for n in LIGHT}}
RUN = {**{n: 30.0 for n in HEAVY}, **{n: 0.5 for n in LIGHT}}
WHOLE = {n: RUN[n] + SANITIZER[n] for n in HEAVY + LIGHT}


@pytest.mark.parametrize("order", ["collection", "cost"])
@pytest.mark.parametrize("stored", ["durations file", "cache"])
def test_two_tests_long_in_their_normal_run_go_to_different_workers(tmp_path: Path, order: str, stored: str) -> None:
    """The cache's sanitizer seconds price the heavy tests at 0.5 s each, the light ones at 2 s: balanced by
    them, both heavy tests share one worker, which then runs 66 s while the other runs 10 s. What a worker
    spends on a test is its normal run and its sanitizer seconds: the normal run comes from pytest-split's
    durations file (each test's whole duration as pipecheck stores it) or from the cache's normal-run
    seconds, and each heavy test goes to a worker of its own."""
    cache: dict[str, Any] = {CACHE_KEY: SANITIZER}
    if stored == "cache":
        cache["pipecheck/run-seconds"] = RUN
    else:
        (tmp_path / ".test_durations").write_text(json.dumps(WHOLE))
    config = Config("load", order=order, cache=cache)
    ids = HEAVY + LIGHT
    assert len({shares_for(config, ids, 2)[ids.index(n)] for n in HEAVY}) == 2  # type: ignore[arg-type]
    ran, end = _scheduled(config, ids, WHOLE)
    assert ran[HEAVY[0]] != ran[HEAVY[1]], ran
    assert end <= WHOLE[HEAVY[0]] + sum(WHOLE[n] for n in LIGHT), end  # 30.5 s + 15 s at most, not 66 s


def test_a_group_the_controller_cannot_learn_is_an_error_of_its_tests(tmp_path: Path) -> None:
    """No file to write the groups to, and node ids without them: the controller would schedule the group's
    tests as single tests, so each says why it cannot run (an error at its setup), naming what to do instead."""
    from pytest_pipecheck.sanitizer.shares import GROUP_UNKNOWN
    from pytest_pipecheck.xdist_hooks import publish_groups

    items = [_item("a.py::t0", "owner"), _item("a.py::t1"), _item("b.py::t0", "owner")]
    worker = Config("loadgroup", worker=True)
    worker.workerinput["pipecheck_groups"] = str(tmp_path / "gone" / "groups.json")
    groups, problem = publish_groups(worker, items)  # type: ignore[arg-type]
    assert groups == {"a.py::t0": "owner", "b.py::t0": "owner"}
    assert problem is not None and "could not be written to" in problem and "--dist loadfile" in problem, problem
    plugin = SanitizerPlugin.__new__(SanitizerPlugin)
    plugin.worker_count, plugin.done = 2, set()
    for item in items:
        item.stash = pytest.Stash()
    plugin.pytest_collection_modifyitems(worker, items)  # type: ignore[arg-type]
    assert [GROUP_UNKNOWN in item.stash for item in items] == [True, False, True]
    with pytest.raises(pytest.UsageError, match="--dist loadgroup with the sanitizer on"):
        plugin.ensure_share(items[0])  # type: ignore[arg-type]
    # where xdist appended the groups to the node ids, the controller reads them from there
    suffixed = [_item("a.py::t0@owner", "owner"), _item("b.py::t0@owner", "owner")]
    assert publish_groups(worker, suffixed)[1] is None  # type: ignore[arg-type]


def _modules_of(ids: list[str], shares: list[int]) -> dict[str, set[int]]:
    out: dict[str, set[int]] = {}
    for nodeid, share in zip(ids, shares):
        out.setdefault(nodeid.split("::")[0], set()).add(share)
    return out


def test_with_several_shares_a_worker_a_share_ends_where_a_module_ends() -> None:
    """Equal costs: modules of 3, 6 and 3 tests, 2 workers x 2 shares (a mean of 3). One share a worker cuts
    the middle module wherever the cost says; several shares a worker cut only between modules, but for
    one that costs more than a share's mean: b (twice the mean) is cut in two pieces of three."""
    ids = [f"{m}.py::t{i}" for m, n in (("a", 3), ("b", 6), ("c", 3)) for i in range(n)]
    assert _cut(ids, "load", shares=2) == [0] * 3 + [1] * 3 + [2] * 3 + [3] * 3
    many = [f"{m}.py::t{i}" for m, n in (("a", 2), ("b", 7), ("c", 2), ("d", 1)) for i in range(n)]
    one = _cut(many, "load", shares=1)  # 2 shares of 6: b cut where the cost says
    assert one == [0] * 6 + [1] * 6 and len(_modules_of(many, one)["b.py"]) == 2
    several = _cut(many, "load", shares=2)  # a mean of 3: b (7, about two means) in two pieces; a, c, d whole
    pieces = _modules_of(many, several)
    assert all(len(pieces[m]) == 1 for m in ("a.py", "c.py", "d.py")) and len(pieces["b.py"]) == 2, several
    assert several == sorted(several)  # still contiguous runs, in collection order


def test_a_module_of_cheap_tests_is_not_cut_for_its_count() -> None:
    """Costs, not counts, decide: 40 tests of 0.01 s are one piece; a module of two 10 s tests, about one and
    a half shares' mean (12.6 s of 50.4 s over 4 shares), two."""
    ids = [f"a.py::t{i}" for i in range(40)] + ["b.py::slow", "c.py::t0", "c.py::t1"]
    cache = {CACHE_KEY: {**{n: 0.01 for n in ids}, "b.py::slow": 30.0, "c.py::t0": 10.0, "c.py::t1": 10.0}}
    assert _cut(ids, "load", workers=2, shares=2, cache=cache) == [0] * 40 + [1, 2, 3]
    assert _cut(ids, "load", workers=2, shares=1, cache=cache) == [0] * 40 + [0, 1, 1]  # cut where the cost says: 30.4 s and 20 s
