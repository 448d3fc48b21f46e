"""What a compute-sanitizer child is started with: the batch it runs, its command line and its environment.

A :class:`BatchSpec` is the tests that share one child per tool (the same tool and the same sanitizer
options); :func:`build_command` is the child's full command line (compute-sanitizer, its options, then the
child pytest with its role and node ids) and :func:`default_child_env` its environment. A child may run the
tool's canary kernel after its tests: it prints it under :func:`canary_nodeid`, and the finding that proves
the tool works is :data:`CANARY_EXPECTS`. :mod:`.runner` starts these children; :mod:`.child_plugin` is
what runs in them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from .. import children
from .known import option_args

__all__ = [
    "CANARY_EXPECTS",
    "DEFAULT_PRINT_LIMIT",
    "ERROR_EXITCODE",
    "BatchSpec",
    "build_command",
    "canary_nodeid",
    "default_child_env",
]

#: the exit code compute-sanitizer is told to use when it found errors
ERROR_EXITCODE = 86
#: --print-limit given to the tool. The limit counts every error of the process, so a noisy test can
#: use it up before a later test's finding prints; reconciliation catches what is left, and
#: the bound keeps a child's output (held in memory) finite.
DEFAULT_PRINT_LIMIT = 1000
#: the finding kind that proves each tool works, caught in the canary kernel
CANARY_EXPECTS = {"racecheck": "race", "synccheck": "barrier", "memcheck": "invalid_access",
                  "initcheck": "uninit_read"}


def canary_nodeid(tool: str) -> str:
    """The pseudo node id the child prints around the canary kernel for ``tool``."""
    return f"pipecheck-canary::{tool}"


@dataclass(frozen=True)
class BatchSpec:
    """Tests that share one child per tool: same tool and the same sanitizer options."""

    tool: str
    nodeids: tuple[str, ...]
    racecheck_report: str = "analysis"
    suppressions: str | None = None
    kernel_filter: str | None = None
    kernel_exclude: str | None = None
    print_limit: int = DEFAULT_PRINT_LIMIT
    scope: str = "launch"  # what the child runs of each test (the setting sanitizer_scope)


def build_command(sanitizer: str, spec: BatchSpec, child_args: Sequence[str], nodeids: Sequence[str],
                  xml_path: str | None = None, version: tuple[int, ...] | None = None,
                  canary: bool = False) -> list[str]:
    """The full child command line: compute-sanitizer, its options (those gated on ``version`` only
    when the tool has them: :data:`.known.OPTIONS`), then the child pytest (``child_args``:
    :func:`pytest_pipecheck.children.base_command`) with its role and node ids."""
    cmd = [sanitizer, "--tool", spec.tool, "--error-exitcode", str(ERROR_EXITCODE),
           "--print-limit", str(spec.print_limit), *option_args(spec.tool, version)]
    if xml_path:
        cmd += ["--xml", "--save", xml_path]
    if spec.tool == "racecheck":
        cmd += ["--racecheck-report", spec.racecheck_report]
    if spec.tool in ("memcheck", "initcheck"):
        # CuPy and PyTorch pools are disabled in the child; padding makes small overruns visible
        cmd += ["--padding", "32"] if spec.tool == "memcheck" else []
        # Host API calls that return an error are not kernel findings: a clean test reports a few "api
        # errors" outside its body (torch/CuPy probing at import and exit). A failing call that
        # matters (a launch) raises in the test itself, which the child's own outcome reports.
        cmd += ["--report-api-errors", "no"]
    if spec.suppressions:
        cmd += ["--suppressions", spec.suppressions]
    if spec.kernel_filter:
        cmd += ["--kernel-name", f"kns={spec.kernel_filter}"]
    if spec.kernel_exclude:
        cmd += ["--kernel-name-exclude", f"kns={spec.kernel_exclude}"]
    role = children.sanitizer(spec.tool, spec.scope, canary)
    return cmd + list(child_args) + role.args() + list(nodeids)


def default_child_env(device_id: str | None) -> dict[str, str]:
    """The child's environment: pools off, output unbuffered, the parent's GPU pinned."""
    env = dict(os.environ)
    env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    if device_id is not None:
        env["CUDA_VISIBLE_DEVICES"] = device_id
    return env
