"""scripts/gpu/cpu_use.py without a GPU: the readings of /proc it rests on, against a stand-in /proc."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from _load import load_file

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cpu_use() -> ModuleType:
    return load_file("cpu_use", ROOT / "scripts" / "gpu" / "cpu_use.py")


def _stat(comm: str, utime: int, stime: int, start: int) -> str:
    # fields 3..22 of /proc/PID/stat: state, ppid, ..., utime (14), stime (15), ..., starttime (22)
    rest = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", str(utime), str(stime), "0", "0", "20", "0",
            "1", "0", str(start)]
    return f"123 ({comm}) " + " ".join(rest) + " 0 0\n"


def test_a_process_line_with_spaces_and_parentheses_in_its_name(cpu_use: ModuleType) -> None:
    assert cpu_use.read_process(_stat("py (x) y", 70, 30, 555)) == ("py (x) y", 100, 555)


def test_the_machine_busy_share_leaves_out_idle_and_iowait(cpu_use: ModuleType) -> None:
    before = cpu_use.read_cpu_line("cpu  100 0 100 700 100 0 0 0 0 0\ncpu0 1 2 3 4\n")
    after = cpu_use.read_cpu_line("cpu  200 0 200 750 150 0 0 0 0 0\n")
    assert before == (200, 1000)
    assert cpu_use.busy_fraction(before, after) == pytest.approx(200 / 300)
    with pytest.raises(ValueError):
        cpu_use.read_cpu_line("intr 5\n")


@pytest.mark.parametrize(("comm", "cmdline", "kind"), [
    ("compute-sanitiz", "compute-sanitizer --tool racecheck python3 -m pytest", "compute-sanitizer front end"),
    ("python3", "python3 -m pytest --pipecheck-child racecheck -q", "sanitizer child (the tool's target)"),
    ("ptxas", "ptxas -arch=sm_90", "CUDA compilers (nvcc, ptxas)"),
    ("python3", "python3 -c import sys;exec(eval(sys.stdin.readline()))", "pytest (the run and its xdist workers)"),
    ("bash", "bash -c true", "other"),
])
def test_kinds_of_process(cpu_use: ModuleType, comm: str, cmdline: str, kind: str) -> None:
    assert cpu_use.kind_of(comm, cmdline) == kind


def test_each_process_counts_only_what_it_used_while_sampled(cpu_use: ModuleType, tmp_path: Path) -> None:
    proc = tmp_path / "proc"

    def put(pid: int, comm: str, cmdline: str, ticks: int, start: int) -> None:
        d = proc / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "stat").write_text(_stat(comm, ticks, 0, start))
        (d / "cmdline").write_bytes(cmdline.replace(" ", "\0").encode())

    proc.mkdir()
    (proc / "stat").write_text("cpu  0 0 0 100 0 0 0 0\n")
    put(10, "python3", "python3 -m pytest", 500, 1)  # older than the run: 500 ticks before it count for nothing
    use = cpu_use.CpuUse(proc=proc, clock=iter([0.0, 4.0]).__next__)
    use.sample(first=True)
    (proc / "stat").write_text("cpu  100 0 0 100 0 0 0 0\n")  # every core busy
    put(10, "python3", "python3 -m pytest", 600, 1)
    put(11, "python3", "python3 -m pytest --pipecheck-child racecheck", 250, 9)
    use.sample()
    (proc / "stat").write_text("cpu  100 0 0 200 0 0 0 0\n")  # every core idle
    import shutil

    shutil.rmtree(proc / "11")  # a child that ended keeps what it used
    put(11, "python3", "python3 -m pytest", 40, 20)  # a new process with the old pid is another process
    use.sample()
    assert use.by_kind(ticks_per_s=100) == {"sanitizer child (the tool's target)": 2.5,
                                            "pytest (the run and its xdist workers)": 1.4}
    summary = use.summary(ticks_per_s=100)
    assert use.samples == [1.0, 0.0]
    assert summary["saturated_fraction"] == 0.5
    assert summary["busy_cores_max"] == pytest.approx(use.cores)


def test_the_command_line_runs_a_command_and_keeps_its_exit_status(cpu_use: ModuleType, tmp_path: Path) -> None:
    import json
    import sys

    out = tmp_path / "use.json"
    assert cpu_use.main([str(out), "--interval", "0.05", "--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
    summary = json.loads(out.read_text())
    assert summary["exit"] == 3 and summary["command"][-1] == "raise SystemExit(3)"
    assert summary["cores"] >= 1 and summary["wall_s"] >= 0
    assert cpu_use.main([str(out)]) == 2  # no command
