"""Compare mode times what REV contains: a kernel submodule bumped to a slower version, on a GPU.

Usage::

    python3 scripts/gpu/compare_submodule_bump.py OUTDIR [--budget 150] [--cpu-rehearsal]

Run from this checkout installed with ``python3 -m pip install -e .`` (``scripts/gpu-check.sh OUTDIR
compare_submodule_bump`` installs it and runs this). Offline: it builds, in a temporary directory, a kernel
library's repository (an fp32 add of 2^24 elements) and a superproject that has it as the submodule ``kern``
and a test that times ``kern.kernel`` with ``check_perf``, and runs one real ``pytest --pipecheck-compare``
session per scenario:

1. ``bump``: the pull request bumps the submodule to a commit whose add does 1.5x the elements; compare mode
   against the commit before must fail it, near +50% (REV's tree holds the submodule at REV's commit);
2. ``unchanged``: the same head against itself (REV = HEAD, the submodule at the same commit): a pass;
3. ``commit-not-here``: REV records a submodule commit that the submodule's repository no longer has (reset
   and pruned): every compared check is an error that names the submodule and the commit;
4. ``head-module``: REV's test imports a module that only the head's checkout has (untracked, on
   ``PYTHONPATH``): an error naming the module, never a comparison of the head's code with itself.

Writes ``OUTDIR/compare_submodule_bump.{json,md}`` (each scenario's verdict and summary, and whether it is
the one expected) and prints the Markdown; exits 1 when a scenario's verdict is not the expected one.
``--cpu-rehearsal`` runs the same sessions without a GPU through compare mode's test seam (the kernel returns
its time); its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

from compare_sessions import git, plugin_elsewhere, run_session  # noqa: E402 (scripts/, on the path above)

N_ELEMENTS = 1 << 24  # REV's add: about 200 MB of traffic, tens of microseconds on an H100 or H200

KERNEL = '''
import os

FACTOR = {factor}
N = int({n} * FACTOR)


def make():
    if os.environ.get("CSB_FAKE") == "1":  # --cpu-rehearsal: the "kernel" returns its time in us
        import numpy as np

        rng = np.random.default_rng()
        return lambda: float(100.0 * FACTOR * np.exp(rng.normal(0.0, 0.01)))
    import torch

    x, y, z = (torch.randn(N, device="cuda") for _ in range(3))
    return lambda: torch.add(x, y, out=z)
'''

TEST = '''
from kern.kernel import make


def test_add(pipecheck):
    pipecheck.check_perf(make(), case="add", n_samples=100)
'''

HEAD_MODULE_TEST = '''
from local_kernel import make


def test_add(pipecheck):
    pipecheck.check_perf(make(), case="add", n_samples=100)
'''


def _git(repo: Path, *args: str) -> str:
    return git(repo, *args, who="csb")


def _repo(where: Path, files: dict[str, str], message: str, submodule: Path | None = None) -> Path:
    """A new repository at ``where`` with ``files`` (name -> text), and ``submodule`` as its submodule ``kern``
    when given, committed as ``message``."""
    where.mkdir(parents=True)
    _git(where, "init", "-q")
    if submodule is not None:
        _git(where, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(submodule), "kern")
    for name, text in files.items():
        (where / name).write_text(text)
    _git(where, "add", "-A")
    _git(where, "commit", "-q", "-m", message)
    return where


def _library(where: Path, factor: float) -> Path:
    return _repo(where, {"__init__.py": "", "kernel.py": KERNEL.format(factor=factor, n=N_ELEMENTS)},
                 f"kernel x{factor}")


def _superproject(where: Path, library: Path) -> Path:
    _repo(where, {"pytest.ini": "[pytest]\n", "test_k.py": TEST}, "base", submodule=library)
    _git(where, "tag", "base")
    return where


def _bump(top: Path, factor: float) -> str:
    (top / "kern" / "kernel.py").write_text(KERNEL.format(factor=factor, n=N_ELEMENTS))
    _git(top / "kern", "commit", "-q", "-am", f"kernel x{factor}")
    return _git(top / "kern", "rev-parse", "HEAD")


def _session(repo: Path, outdir: Path, label: str, rev: str, deadline: float, rehearsal: bool,
             env_extra: dict[str, str] | None = None) -> dict[str, Any]:
    left = deadline - time.monotonic()
    if left < 15:
        return {"label": label, "skipped": f"budget spent ({left:.0f} s left)"}
    report = outdir / f"{label}.json"
    env = {**os.environ, **(env_extra or {})}
    if rehearsal:
        env.update(CSB_FAKE="1", PIPECHECK_TEST_FAKE_TIMER="return")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE", f"--pipecheck-json={report}",
           f"--pipecheck-compare={rev}", "--pipecheck-baseline-dir=none", "test_k.py",
           *(["--pipecheck-tier=cpu"] if rehearsal else [])]
    t0 = time.monotonic()
    rc, tail = run_session(cmd, repo, env, left, 4000)
    (outdir / f"{label}.log").write_text(tail)
    out: dict[str, Any] = {"label": label, "rc": rc, "wall_s": time.monotonic() - t0}
    try:
        perf = [r for r in json.loads(report.read_text()).get("results", []) if r.get("check") == "perf"]
        out["verdict"] = perf[0]["verdict"] if perf else "none"
        out["summary"] = perf[0].get("summary", "") if perf else ""
        out["compare"] = {k: v for k, v in ((perf[0].get("details") or {}).get("compare") or {}).items()
                          if k in ("status", "ratio", "ci_low", "ci_high", "p_value", "n_pairs", "n_tied",
                                   "decision", "reason")} if perf else {}
    except (OSError, ValueError) as exc:
        out["verdict"], out["summary"] = "none", f"no report: {exc}"
    return out


def _expect(result: dict[str, Any], verdict: str, says: str, ratio: tuple[float, float] | None = None) -> None:
    ok = result.get("verdict") == verdict and says in result.get("summary", "")
    got_ratio = (result.get("compare") or {}).get("ratio")
    if ratio is not None:
        ok = ok and isinstance(got_ratio, (int, float)) and ratio[0] < got_ratio < ratio[1]
    result["expected"] = f"{verdict}, saying {says!r}" + (f", ratio in {ratio}" if ratio else "")
    result["as_expected"] = bool(ok)


def render(doc: dict[str, Any]) -> str:
    lines = ["# compare mode and a kernel submodule bump", "",
             f"{doc['gpu']}; torch {doc['torch']}; git {doc['git']}; {doc['date']}; `{doc['command']}`; "
             f"{doc['elapsed_s']:.0f} s", "",
             "| scenario | verdict | as expected | expected | summary |", "|---|---|---|---|---|"]
    for r in doc["scenarios"]:
        summary = (r.get("summary") or r.get("skipped", "")).replace("|", "\\|")[:400]
        lines.append(f"| {r['label']} | {r.get('verdict', '-')} | {'yes' if r.get('as_expected') else '**no**'} | "
                     f"{r.get('expected', '-')} | {summary} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--budget", type=float, default=150.0, help="seconds of work before sessions are cut short")
    ap.add_argument("--cpu-rehearsal", action="store_true",
                    help="run the sessions without a GPU through compare mode's test seam; its numbers mean nothing")
    args = ap.parse_args()
    t_start = time.monotonic()
    deadline = t_start + args.budget
    outdir = Path(args.outdir).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    import torch

    if plugin_elsewhere("compare_submodule_bump"):
        return 2
    if not args.cpu_rehearsal and not torch.cuda.is_available():
        print("compare_submodule_bump: needs a CUDA GPU; --cpu-rehearsal checks the script alone", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="compare-submodule-"))
    scenarios: list[dict[str, Any]] = []
    try:
        # 1 and 2: a submodule bump to a 1.5x slower add, then the head against itself
        top = _superproject(work / "bump" / "super", _library(work / "bump" / "kern", 1.0))
        _bump(top, 1.5)
        _git(top, "commit", "-q", "-am", "bump the kernel submodule")
        scenarios.append(_session(top, outdir, "bump", "base", deadline, args.cpu_rehearsal))
        _expect(scenarios[-1], "fail", "regression against base", ratio=(1.3, 1.7))
        scenarios.append(_session(top, outdir, "unchanged", "HEAD", deadline, args.cpu_rehearsal))
        _expect(scenarios[-1], "pass", "paired")
        # 3: REV records a submodule commit its repository no longer has
        top = _superproject(work / "gone" / "super", _library(work / "gone" / "kern", 1.5))
        gone = _bump(top, 1.0)
        _git(top, "commit", "-q", "-am", "REV: the submodule at a commit only one clone had")
        _git(top, "tag", "rev")
        _git(top / "kern", "reset", "-q", "--hard", "HEAD~1")
        _git(top / "kern", "reflog", "expire", "--expire=now", "--all")
        _git(top / "kern", "gc", "-q", "--prune=now")
        scenarios.append(_session(top, outdir, "commit-not-here", "rev", deadline, args.cpu_rehearsal))
        _expect(scenarios[-1], "error", f"REV records its commit {gone[:10]}, which is not in its local repository")
        # 4: REV's test imports a module only the head's checkout has
        top = _repo(work / "local", {"pytest.ini": "[pytest]\n", "test_k.py": HEAD_MODULE_TEST},
                    "the test, without its kernel")
        (top / "local_kernel.py").write_text(KERNEL.format(factor=1.5, n=N_ELEMENTS))
        path = os.pathsep.join(filter(None, [str(top), os.environ.get("PYTHONPATH")]))
        scenarios.append(_session(top, outdir, "head-module", "HEAD", deadline, args.cpu_rehearsal,
                                  {"PYTHONPATH": path}))
        _expect(scenarios[-1], "error", "REV's process imported local_kernel (local_kernel.py) from the head's checkout")
        git_version = _git(work, "--version")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = {"gpu": "CPU rehearsal (the numbers mean nothing)" if args.cpu_rehearsal else torch.cuda.get_device_name(0),
           "torch": torch.__version__, "git": git_version, "python": platform.python_version(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "command": " ".join([os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]), "scenarios": scenarios,
           "elapsed_s": time.monotonic() - t_start}
    (outdir / "compare_submodule_bump.json").write_text(json.dumps(doc, indent=1, default=str))
    text = render(doc)
    (outdir / "compare_submodule_bump.md").write_text(text)
    print(text)
    return 0 if all(r.get("as_expected") for r in scenarios) else 1


if __name__ == "__main__":
    raise SystemExit(main())
