"""pytest-xdist: one GPU per worker, the run's seed on every worker, ``-n auto`` as one worker per GPU.

The hooks here are xdist's; pytest calls them only where xdist is installed. They are re-exported by the
entry module (:mod:`.plugin`), because ``-n auto`` is resolved before any plugin registered later is asked.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from .device import list_devices
from .state import RUN_CONFIG, RUN_SEED

__all__ = ["is_controller", "pin_worker_gpu", "pytest_configure_node", "pytest_xdist_auto_num_workers",
           "worker_seed", "workers_on_my_gpu"]


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
