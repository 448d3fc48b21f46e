"""pytest-xdist: one GPU per worker, the run's seed on every worker, ``-n auto`` as one worker per GPU, and
which tests the run's ``--dist`` mode keeps on one worker.

Under ``--dist loadgroup`` xdist's workers append ``@group`` to the node id of a test with an
``xdist_group`` mark, and its scheduler reads the group back from there. With the sanitizer on, pipecheck's
scheduler needs the groups on the controller too, and not every pytest lets xdist change a node id (where
the node id is a structured value the assignment is lost, and the ids arrive without their groups). So each
worker also writes the groups it collected to a file the controller named (:func:`publish_groups`), before
it sends its collection; the controller reads it when it cuts the shares (:func:`read_groups`).

The hooks here are xdist's; pytest calls them only where xdist is installed. They are re-exported by the
entry module (:mod:`.plugin`), because ``-n auto`` is resolved before any plugin registered later is asked.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest

from .device import list_devices
from .state import RUN_CONFIG, RUN_SEED

__all__ = ["KEEPS_TOGETHER", "SHARE_SCHEDULED", "base_nodeid", "dist_mode", "groups_path", "is_controller",
           "item_group", "pin_worker_gpu", "publish_groups", "pytest_configure_node", "pytest_xdist_auto_num_workers",
           "read_groups", "reporting_as", "together_key", "worker_interactor", "worker_seed", "workers_on_my_gpu",
           "xdist_group"]

#: ``--dist`` modes that send each test to one worker and promise nothing about which: pipecheck's share
#: scheduler (sanitizer/xdist_shares.py) may replace them without changing what they mean
SHARE_SCHEDULED = ("load", "worksteal")
#: ``--dist`` modes that keep some tests on one worker: the share scheduler keeps each such set in one share
KEEPS_TOGETHER = ("loadscope", "loadfile", "loadgroup")
#: on the controller: the file its workers write their xdist groups to (:func:`groups_path`)
GROUPS_PATH = pytest.StashKey[str]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller hook: send the run seed and each worker's GPU to the worker."""
    node.workerinput["pipecheck_seed"] = node.config.stash[RUN_SEED]
    devices, _ = list_devices()
    if devices and node.config.stash[RUN_CONFIG].tier != "cpu":
        # gw0, gw1, ... each get one GPU, round robin; pinned before the worker touches CUDA
        index = int(str(node.workerinput.get("workerid", "gw0"))[2:] or 0)
        chosen = devices[index % len(devices)]
        node.workerinput["pipecheck_gpu"] = chosen.uuid or str(chosen.index)
        node.workerinput["pipecheck_gpu_count"] = len(devices)  # the worker works out who shares its GPU
        from .gpu_lease import LEASE_KEY, lease_dir

        node.workerinput[LEASE_KEY] = lease_dir(node.config)  # where workers sharing a GPU take it alone to time
    # xdist sets a worker's --dist to "no"; a worker cuts the sanitizer shares as the controller does
    dist = str(node.config.getvalue("dist"))
    node.workerinput["pipecheck_dist"] = dist
    if dist == "loadgroup" and node.config.pluginmanager.has_plugin("pipecheck-sanitizer"):
        node.workerinput["pipecheck_groups"] = groups_path(node.config)  # for the share scheduler alone


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` means one worker per visible GPU on the GPU tier (the CPU count otherwise).

    tryfirst: the hook takes the first answer, and xdist's own (the CPU count) is a plain hookimpl;
    which of the two is asked first otherwise depends on the order the plugins' entry points load in.
    """
    if config.getoption("pipecheck_tier", default=None) == "cpu":
        return None
    devices, _ = list_devices()
    return len(devices) or None


def worker_seed(config: pytest.Config) -> int | None:
    """The controller's seed, on an xdist worker (node-id seeds must agree across workers)."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput and "pipecheck_seed" in workerinput:
        return int(workerinput["pipecheck_seed"])
    return None


def pin_worker_gpu(config: pytest.Config) -> None:
    """On an xdist worker the controller gave a GPU: see only that GPU, before anything initialises CUDA."""
    workerinput = getattr(config, "workerinput", None)
    if workerinput and workerinput.get("pipecheck_gpu"):
        os.environ["CUDA_VISIBLE_DEVICES"] = str(workerinput["pipecheck_gpu"])


def workers_on_my_gpu(workerinput: dict[str, Any]) -> tuple[str, ...]:
    """The xdist workers pinned to this worker's GPU (itself included), as :func:`pytest_configure_node` pins
    them: gw<i> gets GPU i mod the GPU count. Empty where the controller pinned none."""
    gpus = workerinput.get("pipecheck_gpu_count")
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "") or workerinput.get("workercount", 0))
        mine = int(str(workerinput.get("workerid", ""))[2:])
    except ValueError:
        return ()
    if not isinstance(gpus, int) or gpus < 1 or count < 1:
        return ()
    return tuple(f"gw{j}" for j in range(count) if j % gpus == mine % gpus)


def is_controller(config: pytest.Config) -> bool:
    """This process hands tests to pytest-xdist workers (``-n N`` with N > 0, ``--dist ...``)."""
    return (config.pluginmanager.has_plugin("xdist") and getattr(config, "workerinput", None) is None
            and getattr(config.option, "dist", "no") != "no")


def dist_mode(config: Any) -> str:
    """The run's ``--dist`` mode, on the controller and on an xdist worker alike ("no" without xdist)."""
    workerinput = getattr(config, "workerinput", None)
    option = getattr(config, "option", None)
    if workerinput is not None:
        given = workerinput.get("pipecheck_dist")
        if isinstance(given, str):
            return given
        # a controller that did not say: xdist still tells its workers whether groups are on
        return "loadgroup" if getattr(option, "loadgroup", False) else "load"
    return str(getattr(option, "dist", None) or "no")


def xdist_group(nodeid: str) -> str | None:
    """The group xdist's loadgroup appended to ``nodeid`` (``test.py::t@name``), read as xdist reads it: after
    the last ``@`` that comes after the last ``]`` (an ``@`` in a parameter id is no group)."""
    at = nodeid.rfind("@")
    return nodeid[at + 1:] if at > nodeid.rfind("]") else None


def base_nodeid(nodeid: str) -> str:
    """``nodeid`` without the ``@group`` suffix xdist's loadgroup appends, as the test was collected."""
    group = xdist_group(nodeid)
    return nodeid[:-len(group) - 1] if group is not None else nodeid


def item_group(item: pytest.Item) -> str | None:
    """The xdist group of a collected test as xdist's loadgroup names it: the names of its ``xdist_group``
    marks (the first argument, else ``name``, else "default"), sorted and joined by "_"; None without one."""
    names = {str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
             for mark in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) if names else None


def groups_path(config: pytest.Config) -> str:
    """On the controller: the file its workers write their groups to, in a directory made for this run and
    removed when the run ends."""
    path = config.stash.get(GROUPS_PATH, None)
    if path is None:
        folder = tempfile.mkdtemp(prefix="pipecheck-xdist-groups-")
        config.add_cleanup(functools.partial(shutil.rmtree, folder, ignore_errors=True))
        path = config.stash[GROUPS_PATH] = os.path.join(folder, "groups.json")
    return path


def publish_groups(config: pytest.Config, items: Iterable[pytest.Item]) -> tuple[dict[str, str], str | None]:
    """On a worker under loadgroup: the group of each grouped test, by the node id the controller is sent,
    written where the controller said. Every worker collects the same tests and writes the same file, each
    replacing it whole. Returns the groups, and why the controller cannot know them: where the file cannot
    be written and the node ids do not carry the groups either (None when it can)."""
    from ._atomic import atomic_write_text

    groups = {item.nodeid: group for item in items if (group := item_group(item)) is not None}
    path = (getattr(config, "workerinput", None) or {}).get("pipecheck_groups")
    problem = "the controller named no file for them"
    if path:
        try:
            atomic_write_text(str(path), json.dumps(groups), "pytest-xdist groups", make_dirs=False)
            return groups, None
        except OSError as exc:
            problem = f"they could not be written to {path} ({exc})"
    if all(xdist_group(nodeid) == group for nodeid, group in groups.items()):
        return groups, None
    return groups, (f"pipecheck: --dist loadgroup with the sanitizer on: the controller must know each test's "
                    f"xdist group to keep the group on one worker, and {problem}, while pytest-xdist did not append "
                    f"them to the node ids. Use --dist loadfile or --dist loadscope, run without xdist (-n 0), or "
                    f"turn the sanitizer off (--pipecheck-sanitizer=none)")


def read_groups(config: Any) -> dict[str, str]:
    """On the controller: the groups its workers wrote ({} where none did: the node ids carry them, or
    there are none)."""
    path = config.stash.get(GROUPS_PATH, None) if hasattr(config, "stash") else None
    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def together_key(nodeid: str, dist: str, groups: Mapping[str, str] | None = None) -> str | None:
    """What ``--dist`` ``dist`` keeps on one worker with ``nodeid``, by xdist's own rules (its schedulers'
    ``_split_scope``): the xdist group under loadgroup (from ``groups``, else from the node id; None for an
    ungrouped test), the module under loadfile, the class or else the module under loadscope; None for a
    mode that promises nothing."""
    if dist == "loadgroup":
        group = (groups or {}).get(nodeid)
        return group if group is not None else xdist_group(nodeid)
    if dist == "loadfile":
        return nodeid.split("::", 1)[0]
    if dist == "loadscope":
        return nodeid.rsplit("::", 1)[0]
    return None


def worker_interactor(config: pytest.Config) -> Any | None:
    """In a pytest-xdist worker, the plugin that sends the worker's reports to its controller, where it is the
    one pipecheck knows: it names the test it runs now (``item_index``, an index into the session's items) and
    sends each report as that test's, after checking that the report is. None elsewhere, or for another."""
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor" and isinstance(getattr(plugin, "item_index", None), int):
            return plugin
    return None


@contextlib.contextmanager
def reporting_as(interactor: Any | None, index: int) -> Iterator[None]:
    """Reports logged inside go to the controller as those of the session's test number ``index``, not of the
    test the worker runs now: how a worker logs a test whose reports it held while it ran later tests."""
    if interactor is None:
        yield
        return
    running = interactor.item_index
    interactor.item_index = index
    try:
        yield
    finally:
        interactor.item_index = running
