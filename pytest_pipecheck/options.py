"""pipecheck's settings as pytest sees them: the ``--pipecheck-*`` options and ini keys it registers, the
run's configuration read from them, and each test's configuration with its markers applied.

The table of settings and their parsers is :mod:`.config` (no pytest there); this module is where pytest's
command line, ini file and markers meet it, each error naming the source of the bad value.
"""

from __future__ import annotations

import difflib
import os
from typing import Any

import pytest

from .config import SETTINGS, ConfigError, PipecheckConfig, apply_marker, resolve

__all__ = ["add_options", "ini_file", "item_config", "read_run_config"]


def add_options(parser: pytest.Parser) -> None:
    """Register every setting's ``--pipecheck-*`` option and ini key, and the internal options that start
    pipecheck's own child processes (:mod:`.children`)."""
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
    from .children import add_child_options

    add_child_options(group)


def ini_file(config: pytest.Config) -> str:
    """The ini file's name, for messages."""
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
    if not raw:
        return
    known = [s.ini_name for s in SETTINGS if s.ini]
    for key in raw:
        if key.lower().startswith("pipecheck") and key not in known:
            hint = difflib.get_close_matches(key, known, n=1)
            extra = f"; did you mean {hint[0]!r}?" if hint else ""
            raise pytest.UsageError(
                f"pipecheck: unknown key `{key}` in the {ini_file(config)}{extra} (pipecheck's keys: "
                f"{', '.join(known)})"
            )


def _overridden(config: pytest.Config) -> set[str]:
    """The ini keys given with ``-o KEY=VALUE`` on the command line (``--override-ini``)."""
    pairs = getattr(config.option, "override_ini", None) or []
    return {str(p).split("=", 1)[0].strip() for p in pairs}


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
                # present but empty: pytest's getini cannot tell it from absent, the raw table can; passed on
                # as "", which config.resolve refuses, so that `pipecheck_compare =` (or `-o
                # pipecheck_compare=$UNSET`) is an error rather than a silent default
                ini[s.name] = ""
        if s.cli:
            value = config.getoption(s.dest, default=None)
            if value is not None:
                cli[s.name] = value
    return ini, cli


def read_run_config(config: pytest.Config) -> PipecheckConfig:
    """The run's configuration: defaults < ini file < command line; a bad value is a usage error."""
    ini, cli = _read_layers(config)
    keys = _overridden(config)
    try:
        return resolve(ini, cli, ini_file=ini_file(config),
                       overridden={s.name for s in SETTINGS if s.ini and s.ini_name in keys})
    except ConfigError as exc:
        raise pytest.UsageError(f"pipecheck: {exc}") from None


def markers_applied(base: PipecheckConfig, markers: list[pytest.Mark], nodeid: str) -> PipecheckConfig:
    """``base`` with the pipecheck markers of a test applied, the closest last so that it wins
    (module < class < function). Raises ConfigError naming the test and the bad keyword."""
    cfg = base
    for marker in reversed(markers):
        if marker.args:
            raise ConfigError(f"the pipecheck marker on {nodeid} takes keywords only, got positional "
                              f"{marker.args[0]!r}")
        cfg = apply_marker(cfg, marker.kwargs, nodeid)
    return cfg


def item_config(item: pytest.Item, base: PipecheckConfig) -> tuple[PipecheckConfig, str | None]:
    """The test's configuration, and why its markers are invalid (None when they are not): an invalid
    marker fails that test at setup, never the collection."""
    try:
        return markers_applied(base, list(item.iter_markers("pipecheck")), item.nodeid), None
    except ConfigError as exc:
        return base, str(exc)
