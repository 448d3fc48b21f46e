"""pytest entry point: pipecheck's wiring.

It registers the options and markers, decodes what this process is for (:mod:`.children`), resolves the
run's configuration and tier, and registers the feature plugins the run needs: the reports
(:mod:`.report.reporter`), the verdicts (:mod:`.verdicts`), the sanitizer's parent or child
(:mod:`.sanitizer.parent_plugin`, :mod:`.sanitizer.child_plugin`), compare mode and REV's process
(:mod:`.perf.compare`), fault and crash containment (:mod:`.containment`), the per-test timeout
(:mod:`.watchdog`) and pytest-xdist's hooks (:mod:`.xdist_hooks`). It imports only pytest, the standard
library and pipecheck's light modules, so ``pytest --help`` and collection work without any GPU package.
"""

from __future__ import annotations

import dataclasses
import os

import pytest

from . import benchmark_dir, children, envvars, options
from .config import ConfigError, marker_signature
from .device import detect_tier
from .fixture import Pipecheck
from .results import Verdict
from .state import (
    ITEM_CONFIG,
    ITEM_CONFIG_ERROR,
    ITEM_NODEID,
    ITEM_RESULTS,
    ROLE,
    RUN_CONFIG,
    RUN_SEED,
    TIER,
    item_config,
    item_nodeid,
    item_results,
    restore_session_env,
    set_session_env,
)
from .xdist_hooks import pytest_configure_node, pytest_xdist_auto_num_workers  # re-exported: xdist asks early

#: this session made autotuned kernels compile their configs side by side (and takes that back at its end)
COMPILES_AT_ONCE = pytest.StashKey[bool]()
#: this session put the lock that shares compiles among processes around Triton's compile (and takes it away)
COMPILES_SHARED = pytest.StashKey[bool]()

MARKER_DOC = (
    "{sig}: configure pipecheck for this test; every keyword overrides the --pipecheck-* option / "
    "pipecheck_* ini key of the same name. Unknown keywords are errors."
)


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add_options(parser)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    role = config.stash[ROLE] = children.decode(config)  # first: what follows depends on it
    benchmark_dir.note(config)  # before pytest-benchmark creates its storage folder (its configure is trylast)
    try:
        envvars.check()  # a knob with a value it does not accept stops the run, as a bad option does
    except envvars.EnvError as exc:
        raise pytest.UsageError(f"pipecheck: {exc}") from None
    config.addinivalue_line("markers", MARKER_DOC.format(sig=marker_signature()))
    config.addinivalue_line(
        "markers", "gpu: the test needs a usable CUDA device; without one it is skipped with the reason")
    run_config = config.stash[RUN_CONFIG] = options.read_run_config(config)
    from .xdist_hooks import is_controller, pin_worker_gpu, worker_seed, workers_on_my_gpu

    seed = run_config.seed if run_config.seed is not None else worker_seed(config)
    config.stash[RUN_SEED] = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
    worker = getattr(config, "workerinput", None)
    from .report.reporter import ReportPlugin

    # the reports are written where every result arrives: not on an xdist worker or a child pipecheck started
    config.pluginmanager.register(ReportPlugin(config, writes=worker is None and not role.child), "pipecheck-results")
    from . import verdicts

    config.pluginmanager.register(verdicts, "pipecheck-verdicts")
    if role.sanitizer:
        from .model import autotune

        autotune.launch_each_config_once()  # an autotuned kernel launches each config once, sanitized
    pin_worker_gpu(config)
    tier = detect_tier(run_config.tier)
    if worker and tier.has_gpu:
        tier = dataclasses.replace(tier, gpu_shared_by=workers_on_my_gpu(worker))
    elif role.relay and tier.has_gpu and role.gpu_shared_by:
        tier = dataclasses.replace(tier, gpu_shared_by=role.gpu_shared_by)  # the parent's: a worker's GPU
    if run_config.tier == "gpu" and not tier.has_gpu:
        raise pytest.UsageError(f"pipecheck: --pipecheck-tier=gpu but no usable CUDA GPU: {tier.reason}")
    config.stash[TIER] = tier
    if not tier.has_gpu and "TRITON_INTERPRET" not in os.environ:
        # The CPU tier runs Triton kernels in Triton's interpreter. triton.jit reads this variable
        # when a kernel is decorated, so it must be set before test modules are imported.
        set_session_env(config, "TRITON_INTERPRET", "1")
    sanitizer_on = run_config.enabled and run_config.wants("sanitizer") and bool(run_config.sanitizer)
    if tier.has_gpu and (run_config.enabled or role.child):
        from .model import autotune, shared_compiles

        # an autotuned kernel's configs compile at once, not in turn
        config.stash[COMPILES_AT_ONCE] = autotune.compile_configs_side_by_side()
        # and each kernel once among the processes sharing the Triton cache (the sanitizer children, the parent)
        config.stash[COMPILES_SHARED] = shared_compiles.share_compiles()
    if role.sanitizer:
        from .sanitizer.child_plugin import ChildPlugin

        config.pluginmanager.register(ChildPlugin(config, role), "pipecheck-sanitizer-child")
        return
    if role.compare or run_config.compare is not None:
        from .perf import compare  # REV's process times perf checks for its parent, and runs nothing else

        compare.configure(config, role, run_config.compare or "", dict(run_config.sources),
                          needs_tree=tier.has_gpu or compare.fake_timer())
        if role.compare:
            return
    if worker is not None and run_config.enabled and not role.child:
        from .gpu_lease import worker_lease

        worker_lease(config)  # other workers on this GPU: a timing waits for the GPU alone, not skipped
    if sanitizer_on and not role.relay:  # a relay child runs tests whose verdicts its parent has
        from .sanitizer.parent_plugin import SanitizerPlugin

        config.pluginmanager.register(SanitizerPlugin(config), "pipecheck-sanitizer")
    if run_config.enabled or role.relay:
        from .containment import ContainmentPlugin, should_isolate

        config.pluginmanager.register(ContainmentPlugin(config, role, should_isolate(config, role)),
                                      "pipecheck-containment")
        if role.relay:
            from .gpu_lease import relay_gate

            relay_gate(config, role)  # a timing asks the parent for the GPU alone
    if run_config.enabled or role.relay or "timeout" in run_config.sources:
        from .watchdog import TimeoutPlugin  # a sanitizer child has the runner's watchdog instead

        config.pluginmanager.register(TimeoutPlugin(config), "pipecheck-timeout")
    if run_config.enabled and not role.relay and is_controller(config):
        from .sanitizer.xdist_shares import LostTests  # a test no worker ran is reported, never lost

        config.pluginmanager.register(LostTests(config), "pipecheck-lost-tests")


def pytest_unconfigure(config: pytest.Config) -> None:
    restore_session_env(config)  # what this session put into the environment goes back
    benchmark_dir.tidy(config)  # and pytest-benchmark's storage folder, if this run made it and left it empty
    from .model import autotune

    if config.stash.get(COMPILES_AT_ONCE, False):
        autotune.restore_compile()  # and so do the Autotuner's compiles side by side
    if config.stash.get(COMPILES_SHARED, False):
        from .model import shared_compiles

        shared_compiles.stop_sharing()  # and the lock around Triton's compiles
    if config.stash.get(ROLE, None) is not None and config.stash[ROLE].sanitizer:
        autotune.restore_benchmark()  # and the sanitizer child's benchmark policy


def pytest_report_header(config: pytest.Config) -> str:
    from .report.terminal import header_line

    role = config.stash[ROLE]  # a child's parent printed the run's header (and found the tool) already
    return f"pipecheck: {role.kind} child" + (f" ({role.tool})" if role.tool else "") if role.child else header_line(config)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    base = config.stash[RUN_CONFIG]
    for item in items:
        item.stash[ITEM_RESULTS] = []
        # before pytest-xdist's loadgroup appends "@group" to it: seeds and reports use this one
        item.stash[ITEM_NODEID] = item.nodeid
        item.stash[ITEM_CONFIG], error = options.item_config(item, base)
        if error:
            item.stash[ITEM_CONFIG_ERROR] = error


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``@pytest.mark.pipecheck(spec=SPEC)`` parametrizes the arguments of :data:`.model.cases.ARGUMENTS` a
    test takes with SPEC's cases (:func:`pytest_pipecheck.model.cases.cases`)."""
    from .model.cases import ARGUMENTS

    wanted = {name for name in ARGUMENTS if name in metafunc.fixturenames}
    markers = list(metafunc.definition.iter_markers("pipecheck"))
    if not wanted or not any("spec" in m.kwargs for m in markers):
        return
    try:
        cfg = options.markers_applied(metafunc.config.stash[RUN_CONFIG], markers, metafunc.definition.nodeid)
    except ConfigError:
        return  # reported with the test at setup, as every marker error is
    if cfg.spec is None:
        return
    from .model.cases import cases

    names, found = cases(cfg.spec, wanted, level=cfg.shape_level, stages=cfg.stages,
                         max_bytes=cfg.shape_budget_mib << 20)
    if not names:
        return
    params = [pytest.param(*c.args, id=c.id, marks=() if c.skip is None
                           else pytest.mark.skip(reason=f"pipecheck: {c.skip}")) for c in found]
    metafunc.parametrize(names if len(names) > 1 else names[0], params)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    error = item.stash.get(ITEM_CONFIG_ERROR, None)
    if error:
        pytest.fail(f"pipecheck: {error}", pytrace=False)
    if item.get_closest_marker("gpu") is not None:
        tier = item.config.stash[TIER]
        if not tier.has_gpu:
            pytest.skip(f"needs a CUDA GPU: {tier.reason}")


@pytest.fixture
def pipecheck(request: pytest.FixtureRequest) -> Pipecheck:
    """pipecheck's per-test handle: tier, seed, configuration and the check methods."""
    item = request.node
    config = request.config
    tier = config.stash[TIER]
    in_test = getattr(tier, "in_test", None)  # the tier beside the sanitizer children, or a GPU lease's
    if in_test is not None:
        tier = in_test()
    nodeid = item_nodeid(item)
    pc = Pipecheck(nodeid, item_config(item), tier, config.stash[RUN_SEED],
                   role=config.stash[ROLE], results=item_results(item), rootdir=str(config.rootpath),
                   reproduce=children.reproduce_line(config, nodeid, config.stash[RUN_SEED]))
    pc._hook = item.ihook  # where pipecheck.check finds the checks of this test's plugins and conftest files
    if pc.config.compare is not None:
        from .perf.compare import session_of

        pc.compare_session = session_of(config)
    return pc


__all__ = ["Verdict", "pipecheck", "pytest_configure_node", "pytest_xdist_auto_num_workers"]
