"""pytest entry point: options, ini keys, markers, the ``pipecheck`` fixture, header and summary.

Imports only pytest and the standard library (plus pipecheck's own light modules), so
``pytest --help`` and collection work on a machine with no GPU package installed. Feature plugins
(the sanitizer batch runner, the perf gate) are registered from here only when a run needs them.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Generator
from typing import Any

import pytest

from .config import (
    SETTINGS,
    ConfigError,
    PipecheckConfig,
    apply_marker,
    marker_signature,
    resolve,
)
from .device import arch_table_note, detect_tier, list_devices
from .fixture import Pipecheck
from .model import autotune
from .report.outcomes import TestOutcomes
from .results import CheckResult, Verdict
from .sanitizer.runner import child_tool
from .state import (
    ATTACHED,
    ITEM_CONFIG,
    ITEM_CONFIG_ERROR,
    ITEM_NODEID,
    ITEM_RESULTS,
    RUN_CONFIG,
    RUN_SEED,
    SESSION_OUTCOMES,
    SESSION_RESULTS,
    TIER,
    item_config,
    item_nodeid,
    item_results,
    restore_session_env,
    set_session_env,
)

MARKER_DOC = (
    "{sig}: configure pipecheck for this test; every keyword overrides the --pipecheck-* option / "
    "pipecheck_* ini key of the same name. Unknown keywords are errors."
)


# ----------------------------------------------------------------------------- options


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("pipecheck", "pipecheck: checks for pipelined GPU kernels")
    for s in SETTINGS:
        if s.cli:
            if s.flag:
                group.addoption(s.option, action="store_true", default=None, dest=s.dest, help=s.help)
            else:
                default = s.default if not isinstance(s.default, tuple) else ",".join(s.default) or "none"
                group.addoption(s.option, action="store", default=None, dest=s.dest, metavar=s.metavar,
                                help=f"{s.help} (default: {default})")
        if s.ini:
            parser.addini(s.ini_name, f"{s.help} (same as {s.option})", type="string", default="")
    # Internal: set by the sanitizer runner on the child pytest it starts.
    group.addoption("--pipecheck-child", action="store", default=None, dest="pipecheck_child",
                    metavar="TOOL", help="(internal) this pytest is a sanitizer child running under TOOL")
    # Internal: set on the fresh pytest that runs the tests after a kernel fault (containment.py).
    group.addoption("--pipecheck-relay", action="store", default=None, dest="pipecheck_relay",
                    metavar="FILE", help="(internal) this pytest runs tests for a parent whose CUDA context died; "
                    "its reports go to FILE")


def _ini_file(config: pytest.Config) -> str:
    path = getattr(config, "inipath", None)
    return os.path.basename(str(path)) if path else "ini file"


def _ini_values(config: pytest.Config) -> dict[str, Any] | None:
    """The ini file's raw key/value pairs (with ``-o`` overrides), or None where pytest hides them."""
    raw = getattr(config, "_inicfg", None)  # pytest >= 9
    if raw is None:
        raw = getattr(config, "inicfg", None)
    if raw is None:
        return None
    out: dict[str, Any] = {}
    for key in list(raw.keys()):
        value = raw[key]
        out[str(key)] = getattr(value, "value", value)
    return out


def _check_ini_keys(config: pytest.Config, raw: dict[str, Any] | None) -> None:
    """A misspelt pipecheck key in the ini file is an error, as an unknown marker keyword is.

    pytest only warns about unknown ini keys, and a warning scrolls past: ``pipecheck_min_block = 2``
    would leave the floor at its default while the author believes it is 2.
    """
    import difflib

    if not raw:
        return
    known = [s.ini_name for s in SETTINGS if s.ini]
    for key in raw:
        if key.lower().startswith("pipecheck") and key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise pytest.UsageError(
                f"pipecheck: unknown key `{key}` in the {_ini_file(config)}{extra} (pipecheck's keys: "
                f"{', '.join(known)})"
            )


def _read_layers(config: pytest.Config) -> tuple[dict[str, Any], dict[str, Any]]:
    ini: dict[str, Any] = {}
    cli: dict[str, Any] = {}
    raw = _ini_values(config)
    _check_ini_keys(config, raw)
    for s in SETTINGS:
        if s.ini:
            value = config.getini(s.ini_name)
            if value not in (None, "", []):
                ini[s.name] = value
            elif raw is not None and s.ini_name in raw:
                # present but empty: parsed like any value, so that `pipecheck_sanitizer =` is an
                # error rather than a silent default
                ini[s.name] = ""
        if s.cli:
            value = config.getoption(s.dest, default=None)
            if value is not None:
                cli[s.name] = value
    return ini, cli


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DOC.format(sig=marker_signature()))
    config.addinivalue_line(
        "markers",
        "gpu: the test needs a usable CUDA device; without one it is skipped with the reason",
    )
    ini, cli = _read_layers(config)
    try:
        run_config = resolve(ini, cli, ini_file=_ini_file(config))
    except ConfigError as exc:
        raise pytest.UsageError(f"pipecheck: {exc}") from None
    config.stash[RUN_CONFIG] = run_config

    seed = run_config.seed
    if seed is None:
        # a worker of pytest-xdist takes the controller's seed so node-id seeds agree
        workerinput = getattr(config, "workerinput", None)
        if workerinput and "pipecheck_seed" in workerinput:
            seed = int(workerinput["pipecheck_seed"])
        else:
            seed = int.from_bytes(os.urandom(4), "little")
    config.stash[RUN_SEED] = seed
    config.stash[SESSION_RESULTS] = []
    config.stash[SESSION_OUTCOMES] = TestOutcomes()
    config.pluginmanager.register(_ResultCollector(config), "pipecheck-results")
    _check_report_paths(config, run_config)

    if child_tool() is not None:
        # a sanitizer child: autotuned kernels launch each config once (sanitized) instead of timing them
        autotune.launch_each_config_once()

    workerinput = getattr(config, "workerinput", None)
    if workerinput and workerinput.get("pipecheck_gpu"):
        # an xdist worker sees only its own GPU, before anything in it initialises CUDA
        os.environ["CUDA_VISIBLE_DEVICES"] = str(workerinput["pipecheck_gpu"])
    tier = detect_tier(run_config.tier)
    if workerinput and tier.has_gpu:
        tier = dataclasses.replace(tier, gpu_shared_by=_workers_on_my_gpu(workerinput))
    if run_config.tier == "gpu" and not tier.has_gpu:
        raise pytest.UsageError(f"pipecheck: --pipecheck-tier=gpu but no usable CUDA GPU: {tier.reason}")
    config.stash[TIER] = tier
    if not tier.has_gpu and "TRITON_INTERPRET" not in os.environ:
        # The CPU tier runs Triton kernels in Triton's interpreter. triton.jit reads this variable
        # when a kernel is decorated, so it must be set before test modules are imported.
        set_session_env(config, "TRITON_INTERPRET", "1")

    child = config.getoption("pipecheck_child", default=None)
    relay = config.getoption("pipecheck_relay", default=None)
    # A relay child runs tests whose sanitizer verdicts its parent already has.
    if run_config.enabled and run_config.wants("sanitizer") and run_config.sanitizer and not relay:
        _register_feature(config, "pytest_pipecheck.sanitizer.pytest_hooks", "SanitizerPlugin",
                          "pipecheck-sanitizer")
    if child:
        _register_feature(config, "pytest_pipecheck.sanitizer.pytest_hooks", "ChildPlugin",
                          "pipecheck-sanitizer-child")
    elif run_config.enabled or relay:
        _register_feature(config, "pytest_pipecheck.containment", "ContainmentPlugin", "pipecheck-containment")
    if not child and (run_config.enabled or relay or "timeout" in run_config.sources):
        # the per-test timeout on every tier; a sanitizer child has the runner's watchdog instead
        _register_feature(config, "pytest_pipecheck.watchdog", "TimeoutPlugin", "pipecheck-timeout")
    if run_config.enabled and not child and not relay and _xdist_controller(config):
        # a test that no worker ran (crashed workers, restarts used up) is reported, never lost
        _register_feature(config, "pytest_pipecheck.sanitizer.xdist_shares", "LostTests", "pipecheck-lost-tests")


def pytest_unconfigure(config: pytest.Config) -> None:
    restore_session_env(config)  # what this session put into the environment goes back


def _workers_on_my_gpu(workerinput: dict[str, Any]) -> tuple[str, ...]:
    """The xdist workers pinned to this worker's GPU (itself included), as pytest_configure_node pins them:
    gw<i> gets GPU i mod the GPU count. Empty when the controller pinned none."""
    gpus = workerinput.get("pipecheck_gpu_count")
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "") or workerinput.get("workercount", 0))
        mine = int(str(workerinput.get("workerid", ""))[2:])
    except ValueError:
        return ()
    if not isinstance(gpus, int) or gpus < 1 or count < 1:
        return ()
    return tuple(f"gw{j}" for j in range(count) if j % gpus == mine % gpus)


def _xdist_controller(config: pytest.Config) -> bool:
    """This process hands tests to pytest-xdist workers (``-n N`` with N > 0, ``--dist ...``)."""
    return (config.pluginmanager.has_plugin("xdist") and getattr(config, "workerinput", None) is None
            and getattr(config.option, "dist", "no") != "no")


#: the exit status of a run whose report (--pipecheck-json / --pipecheck-html) could not be written at
#: the end, when it would otherwise have been 0: pytest's "usage error", as for a bad report path
#: caught at start-up. A run that already failed keeps its own status.
REPORT_WRITE_FAILED = int(pytest.ExitCode.USAGE_ERROR)


def _report_option(run_config: PipecheckConfig, name: str, value: str | None = None) -> str:
    """Where a report path came from (``--pipecheck-json`` or the ini key), with its value if given."""
    if run_config.sources.get(name, "") == "ini":
        return f"pipecheck_{name} = {value} in the ini file" if value is not None else f"pipecheck_{name} (ini file)"
    return f"--pipecheck-{name}={value}" if value is not None else f"--pipecheck-{name}"


def _not_the_report_writer(config: pytest.Config) -> bool:
    # an xdist worker, a sanitizer child or a relay child: their parent has every result and
    # writes the reports (a child started with the ini file would otherwise write them too)
    return bool(getattr(config, "workerinput", None) is not None or config.getoption("pipecheck_child", default=None)
                or config.getoption("pipecheck_relay", default=None))


def _check_report_paths(config: pytest.Config, run_config: PipecheckConfig) -> None:
    """A report path that cannot be written is a usage error now, not a line after the results.

    Checked on the process that writes the reports (not on an xdist worker, a sanitizer child or
    a relay child): the path must not be a directory, a symlink, a FIFO or a device (reports are
    written as regular files only), and its nearest existing parent must be a writable directory.
    """
    if _not_the_report_writer(config):
        return
    from ._atomic import describe_non_regular

    for name in ("json", "html"):
        path = getattr(run_config, name)
        if not path:
            continue
        option = _report_option(run_config, name, path)
        target = os.path.abspath(path)
        found = describe_non_regular(target)
        problem = f"the path is {found}; reports are written as regular files only" if found else None
        if problem is None:
            parent = os.path.dirname(target)
            while not os.path.lexists(parent) and os.path.dirname(parent) != parent:
                parent = os.path.dirname(parent)
            if not os.path.isdir(parent):
                problem = f"{parent!r} is not a directory"
            elif not os.access(parent, os.W_OK | os.X_OK):
                problem = f"the directory {parent!r} is not writable"
        if problem is not None:
            raise pytest.UsageError(f"pipecheck: {option}: the report cannot be written there: {problem}")


def _register_feature(config: pytest.Config, module: str, cls: str, name: str) -> None:
    import importlib

    # A feature that fails to load must not quietly turn its check off (a sanitizer that never
    # runs would read as clean), so this is an error, not a skip.
    try:
        factory = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise pytest.UsageError(f"pipecheck: {name} could not be loaded from {module}: {exc}") from None
    if not config.pluginmanager.has_plugin(name):
        config.pluginmanager.register(factory(config), name)


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

    tryfirst: the hook takes the first answer, and xdist's own (the CPU count) is a plain hookimpl.
    Which of the two is asked first otherwise depends on the order the plugins' entry points load
    in: on the 2-GPU machine xdist answered, and ``-n auto`` started 32 workers (2026-11-22).
    """
    if config.getoption("pipecheck_tier", default=None) == "cpu":
        return None
    devices, _ = list_devices()
    return len(devices) or None


def pytest_report_header(config: pytest.Config) -> str:
    return header_line(config)


def header_line(config: pytest.Config) -> str:
    tier = config.stash[TIER]
    seed = config.stash[RUN_SEED]
    run_config = config.stash[RUN_CONFIG]
    if tier.device is not None:
        d = tier.device
        where = f"gpu ({d.name}, {d.arch}, driver {d.driver})"
    else:
        where = f"cpu (no GPU: {tier.reason})"
    parts = [f"pipecheck: tier {where}", f"seed {seed}"]
    if tier.device is not None:
        parts.append(arch_table_note(tier))
    for name, version in tier.backends.items():
        parts.append(f"{name} {version or 'not installed'}")
    if run_config.enabled and run_config.wants("sanitizer") and set(run_config.sanitizer) - {"consan"}:
        from .sanitizer.locate import find_compute_sanitizer, not_found

        found = find_compute_sanitizer()
        parts.append(f"compute-sanitizer {found.version or 'unknown version'}" if found else not_found())
    if run_config.enabled and run_config.wants("sanitizer") and "consan" in run_config.sanitizer:
        parts.append("Triton ConSan selected")
    parts.append("checks on" if run_config.enabled else "checks off (use --pipecheck)")
    return ", ".join(parts)


# ----------------------------------------------------------------------------- collection


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    base = config.stash[RUN_CONFIG]
    for item in items:
        item.stash[ITEM_RESULTS] = []
        # before pytest-xdist's loadgroup appends "@group" to it: seeds and reports use this one
        item.stash[ITEM_NODEID] = item.nodeid
        cfg = base
        try:
            # closest marker last so it wins: module < class < function
            for marker in reversed(list(item.iter_markers("pipecheck"))):
                if marker.args:
                    raise ConfigError(
                        f"the pipecheck marker on {item.nodeid} takes keywords only, got positional "
                        f"{marker.args[0]!r}"
                    )
                cfg = apply_marker(cfg, marker.kwargs, item.nodeid)
        except ConfigError as exc:
            item.stash[ITEM_CONFIG_ERROR] = str(exc)
        item.stash[ITEM_CONFIG] = cfg


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``@pytest.mark.pipecheck(spec=SPEC)`` on a test taking ``shape`` parametrizes it with SPEC's shapes;
    one taking ``values`` too gets (shape, value pattern) pairs (see :func:`pytest_pipecheck.model.values.pair`),
    one taking only ``values`` every pattern of SPEC. One taking ``layout`` gets SPEC's layouts
    (:func:`pytest_pipecheck.model.layouts.generate`), paired with the other cases (see the comment below). One
    taking ``config``, when SPEC has ``autotune=``, runs each case once per config (ids ``...-config=BLOCK_M64-w4-s3``)."""
    wants_shape = "shape" in metafunc.fixturenames
    wants_values = "values" in metafunc.fixturenames
    wants_layout = "layout" in metafunc.fixturenames
    wants_config = "config" in metafunc.fixturenames
    if not wants_shape and not wants_values and not wants_layout and not wants_config:
        return
    markers = list(metafunc.definition.iter_markers("pipecheck"))
    if not any("spec" in m.kwargs for m in markers):
        return
    cfg = metafunc.config.stash[RUN_CONFIG]
    try:
        for marker in reversed(markers):
            cfg = apply_marker(cfg, marker.kwargs, metafunc.definition.nodeid)
    except ConfigError:
        return  # reported with the test at setup, as every marker error is
    if cfg.spec is None:
        return
    from .model import layouts, shapes, values

    spec = cfg.spec
    # a test taking `config` runs every case once per config of the spec's autotuned kernel; without
    # autotune= the name is left to the user's own fixture or parameter
    wants_config = wants_config and getattr(spec, "autotune", None) is not None
    if not wants_shape and not wants_values and not wants_layout and not wants_config:
        return
    # (shape, pattern) cases: every shape with normal, each other pattern at a few ragged shapes
    # (values.pair); without a shape argument, every pattern (or one case when values is not taken)
    why: dict[Any, str | None] = {None: None}
    kept: list[Any] = []
    if wants_shape:
        # a shape over the memory budget is a skip that says why, not an allocator traceback at run time
        cases = shapes.generate_cases(spec, level=cfg.shape_level, stages=cfg.stages,
                                      max_bytes=cfg.shape_budget_mib << 20)
        why.update({c.shape: c.dropped for c in cases})
        kept = [c.shape for c in cases if c.dropped is None]
        base: list[tuple[Any, Any]] = (values.pair(spec, [c.shape for c in cases], level=cfg.shape_level)
                                       if wants_values else [(c.shape, None) for c in cases])
    else:
        base = [(None, n) for n in values.names_for(spec)] if wants_values else [(None, None)]
    # Layouts do not multiply these cases: every one runs in the base layout, and each variant layout
    # runs at a few shapes (layouts.pair: PER_LAYOUT per level, shapes with a partial tile first) under
    # the normal pattern, or once when the test takes no shape. A stride mix-up shows at any shape and
    # under any pattern; shapes x patterns x layouts would be 13 x 4 cases at the small level for
    # nothing these 13 + 6 do not show.
    full: list[tuple[Any, Any, Any]] = [(s, n, None) for s, n in base]
    if wants_layout:
        first = layouts.base(spec)
        normal = "normal" if wants_values else None
        variants = (layouts.pair(spec, kept, level=cfg.shape_level) if wants_shape
                    else [(None, lay) for lay in layouts.generate(spec, level=cfg.shape_level)[1:]])
        full = [(s, n, first) for s, n in base] + [(s, normal, lay) for s, lay in variants]

    # every config at every case: a bug of one config (its block size, its split) shows at the shapes
    # generated for all of them, and each (case, config) is its own test, named by the config's id
    config_ids: list[str | None] = [c.id for c in spec.autotune_configs] if wants_config else [None]
    names = [name for name, wanted in (("shape", wants_shape), ("values", wants_values), ("layout", wants_layout),
                                       ("config", wants_config)) if wanted]
    params = []
    for s, n, lay in full:
        for cid in config_ids:
            args = [a for a, wanted in ((s, wants_shape), (n, wants_values), (lay, wants_layout),
                                        (cid, wants_config)) if wanted]
            ident = "-".join(part for part, wanted in ((str(s), wants_shape), (f"values={n}", wants_values),
                                                       (str(lay), wants_layout), (f"config={cid}", wants_config))
                             if wanted)
            dropped = why.get(s)
            params.append(pytest.param(*args, id=ident, marks=() if dropped is None
                                       else pytest.mark.skip(reason=f"pipecheck: {dropped}")))
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
    pc = Pipecheck(item_nodeid(item), item_config(item), config.stash[TIER], config.stash[RUN_SEED])
    pc.results = item_results(item)
    pc.rootdir = str(config.rootpath)
    return pc


# ----------------------------------------------------------------------------- reporting


def _uses_pipecheck(item: pytest.Item) -> bool:
    return "pipecheck" in getattr(item, "fixturenames", ()) or item.get_closest_marker("pipecheck") is not None


def _verdicts_that_fail_a_passing_test(item: pytest.Item, results: list[CheckResult]) -> str | None:
    """Why a test whose body passed must still fail: a check it recorded did not pass, or the
    failures it declared (``expect_failures``) did not happen. None when its verdict stands."""
    from .contract import unmet_expectation
    from .report.terminal import status

    # sanitizer verdicts are enforced by the sanitizer plugin itself: a finding fails the call, an
    # inconclusive run errors the teardown
    bad = [r for r in results if status(r) in ("fail", "error") and not r.check.startswith("sanitizer:")]
    if bad:
        lines = [f"pipecheck: {len(bad)} check result(s) did not pass, but the test body did not fail:"]
        lines += [f"  {r.verdict.value.upper()} {r.check}: {r.summary}" for r in bad]
        lines.append("(a failing check fails its test; a test that provokes failures on purpose declares "
                     "expect_failures in its pipecheck marker)")
        return "\n".join(lines)
    cfg = item_config(item)
    # a sanitizer child only runs the test for the tool; whether the mutant was caught is decided in
    # the parent, where the tool's verdicts are
    if cfg.expect_failures and not item.config.getoption("pipecheck_child", default=None):
        where = "the pipecheck marker" if cfg.sources.get("expect_failures") == "marker" else "the configuration"
        return unmet_expectation(results, cfg.expect_failures, f"{where} on {item_nodeid(item)}")
    return None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    results = item_results(item)
    if report.when == "call" and report.passed and _uses_pipecheck(item) and not hasattr(report, "wasxfail"):
        why = _verdicts_that_fail_a_passing_test(item, results)
        if why:
            report.outcome = "failed"
            report.longrepr = why
    if not (report.when == "setup" and report.passed):
        # each result travels once, on the first report after it was recorded (a kernel fault found
        # at teardown adds one after the call's report went out)
        attached = item.stash.get(ATTACHED, 0)
        if len(results) > attached:
            fresh = results[attached:]
            report.pipecheck_results = [r.to_json() for r in fresh]
            for r in fresh:
                # junitxml writes the properties of the teardown report, which copies the item's
                prop = (f"pipecheck.{r.check}", f"{r.verdict.value}: {r.summary}")
                report.user_properties.append(prop)
                item.user_properties.append(prop)
            item.stash[ATTACHED] = len(results)
    if report.failed and "pipecheck" in getattr(item, "fixturenames", ()):
        seed = item.config.stash[RUN_SEED]
        report.sections.append(("pipecheck: reproduce", f"pytest '{item_nodeid(item)}' --pipecheck-seed={seed}"))
    return report


class _ResultCollector:
    """Gathers every test's check results on this process (the controller, under xdist)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.config.stash[SESSION_OUTCOMES].add(report)
        data = getattr(report, "pipecheck_results", None)
        if data:
            self.config.stash[SESSION_RESULTS].extend(CheckResult.from_json(d) for d in data)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.config.stash[SESSION_OUTCOMES].add(report)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if not session.config.option.collectonly:
            self.config.stash[SESSION_OUTCOMES].expect(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        # the controller of pytest-xdist collects nothing itself: each worker sends its node ids
        if not self.config.option.collectonly:
            self.config.stash[SESSION_OUTCOMES].expect(ids)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if getattr(config, "workerinput", None) is not None:
        return
    results = config.stash.get(SESSION_RESULTS, [])
    run_config = config.stash[RUN_CONFIG]
    if not results and not run_config.enabled:
        return
    from .report import terminal

    terminal.write_summary(terminalreporter, results, config.stash[TIER], run_config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _not_the_report_writer(config):
        return
    run_config = config.stash.get(RUN_CONFIG, None)
    if run_config is None:
        return
    results = config.stash.get(SESSION_RESULTS, [])
    outcomes = config.stash.get(SESSION_OUTCOMES, None) or TestOutcomes()
    status = int(exitstatus)
    tr = config.pluginmanager.get_plugin("terminalreporter")
    failed: list[str] = []
    if run_config.json:
        from .report import json_report

        try:
            json_report.write(run_config.json, results, config.stash[TIER], config.stash[RUN_SEED], outcomes, status)
        except Exception as exc:  # a bug in the report must not hide the results: it fails the run instead
            reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
            failed.append(f"pipecheck: could not write the JSON report to {run_config.json!r} "
                          f"({_report_option(run_config, 'json')}): {reason}")
    if run_config.html:
        from .report import html as html_report

        # never raises: a bad path or a plotting bug becomes a red line and a failed run
        written, line = html_report.write_html_for_run(run_config.html, results, config.stash[TIER],
                                                       config.stash[RUN_SEED], run_config, outcomes=outcomes,
                                                       exitstatus=status, source_roots=[str(config.rootpath)])
        if written:
            if tr is not None:
                tr.write_line(line)
        else:
            failed.append(f"{line} ({_report_option(run_config, 'html')})")
    if failed:
        for line in failed:
            if tr is not None:
                tr.write_line(line, red=True)
        if session.exitstatus == 0:
            # a report that CI relies on is missing: the run must not read as a success
            session.exitstatus = REPORT_WRITE_FAILED
            if tr is not None:
                tr.write_line(f"pipecheck: exit status {REPORT_WRITE_FAILED}: a requested report could not be "
                              "written", red=True)


__all__ = ["Verdict", "pipecheck"]
