#!/usr/bin/env bash
# The whole GPU tier in one call, offline: installs pipecheck (no network, no build isolation:
# setuptools must already be there), runs the GPU test tier under `pytest --pipecheck`, then each
# GPU evidence script, and packs every log and result into one archive.
#
#   scripts/gpu-check.sh OUTDIR [PART...]
#
# PART is any of: pytest, scripts, evidence, examples, examples-fla, pinned-all, toolkit-all, toolkit-default,
# mutants-pinned, mutants-toolkit, consan, targeted, targeted-toolkit, bench-wrapper,
# gluon-racecheck-toolkit, tier-profile, durations, plugin-profile, compare-gate, speed, or the name of one script in scripts/gpu/ (without .py), optionally
# with its options after '=' separated by commas (cuda_ladder_bench=--quick, perf_gate_rates=--budget,110).
# Every script takes its output folder first, except ladder_profile, which takes the builds to launch
# (ladder_profile=k3_cp_async:4,k3_cp_async_wide:4) and runs under Nsight Compute (ncu), its report in
# OUTDIR/ladder_profile/ncu.csv; without ncu it is skipped and steps.txt says so. (A build with
# several macros needs commas of its own: run ladder_profile.py under ncu by hand for that.)
# compare-gate measures --pipecheck-compare against the stored-baseline gate (scripts/gpu/compare_gate_rates.py, about six
# minutes on one H100; COMPARE_GATE_BUDGET seconds of work, default 330).
# PARALLEL=1 runs the parts side by side. TIMING_RERUN=0 leaves out tier-profile's second step (the tests
# whose timings xdist workers sharing the GPU skipped, timed again alone). Default: pytest scripts. PYTEST_ARGS replaces the pytest step's paths and extra options. Each step has its own time limit (STEP_TIMEOUT, default 420 s), so one
# hang cannot eat the whole run; a step's exit code and duration go to OUTDIR/steps.txt.
set -u
out=${1:?usage: scripts/gpu-check.sh OUTDIR [PART...]}
shift
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(pytest scripts)
mkdir -p "$out"
export PYTHONUNBUFFERED=1
step_timeout=${STEP_TIMEOUT:-420}

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader
  python3 --version
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  # the tree that was sent, not the commit it started from (uncommitted changes travel too)
  if git rev-parse --git-dir > /dev/null 2>&1; then
    echo "commit: $(git rev-parse HEAD) (changes against it: $(git status --porcelain | wc -l) files)"
    files=$(git ls-files -co --exclude-standard)
  else
    files=$(find . -type f -not -path './.git/*' -not -path '*/__pycache__/*' -not -path './.whl/*' | sort)
  fi
  echo "tree sha256: $(printf '%s\n' "$files" | LC_ALL=C sort | xargs -d '\n' sha256sum 2>/dev/null | sha256sum | cut -c1-16)"
} > "$out/environment.txt" 2>&1
export PIPECHECK_EVIDENCE_DIR="$out/evidence"

# The toolkit's compute-sanitizer, found before any wheel is installed (PATH): the toolkit-* parts use it.
toolkit_sanitizer=$(command -v compute-sanitizer || true)

python3 -m pip install -q --no-deps --no-build-isolation -e . > "$out/install.log" 2>&1 \
  || { echo "install failed"; cat "$out/install.log"; exit 1; }

# Wheels carried in .whl/ (for a GPU machine without network access): NVIDIA's compute-sanitizer package goes
# into the interpreter's own site-packages, as the `[sanitizer]` extra puts it (so
# discovery is exercised as a user meets it); the third-party kernel libraries of examples/ go to
# /tmp/site on PYTHONPATH.
if ls .whl/*.whl > /dev/null 2>&1; then
  for w in .whl/nvidia_cuda_sanitizer_api-*.whl; do
    [ -e "$w" ] && python3 -m pip install -q --no-index --no-deps --no-cache-dir "$w" >> "$out/install.log" 2>&1
  done
  others=$(ls .whl/*.whl | grep -v nvidia_cuda_sanitizer_api || true)
  if [ -n "$others" ]; then
    # shellcheck disable=SC2086
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
      $others >> "$out/install.log" 2>&1 || { echo "wheel install failed"; tail "$out/install.log"; exit 1; }
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
fi
{
  echo "compute-sanitizer (toolkit, PATH): ${toolkit_sanitizer:-none} $(${toolkit_sanitizer:-false} --version 2>/dev/null | grep -i version | head -1)"
  found=$(python3 -c "from pytest_pipecheck.sanitizer.locate import find_compute_sanitizer as f; print(f() or 'none')" 2>&1)
  echo "compute-sanitizer (pipecheck's discovery): $found $("$found" --version 2>/dev/null | grep -i version | head -1)"
} >> "$out/environment.txt" 2>&1

# Modules of scripts/gpu/ that the other scripts use (a shared part, the CPU sampler, a pytest plugin): the
# scripts part does not run them as evidence scripts.
HELPERS=(_gemm_bench cpu_use sync_probe)

# Builds ladder_profile launches when none are named (see scripts/gpu/ladder_profile.py).
LADDER_PROFILE_BUILDS=(k3_cp_async:4 k3_cp_async_wide:4 k3_cp_async_wide:4:PIPECHECK_XTILE)

step() {
  local name=$1; shift
  local t0; t0=$(date +%s)
  timeout --kill-after=10 "$step_timeout" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$out/steps.txt"
  tail -n 25 "$out/$name.log"
}

# ladder_profile.py measures nothing itself: it launches the builds named in its arguments once each,
# for the profiler around it. It needs build names, not an output folder.
ladder_profile() {
  local builds=("$@")
  [ ${#builds[@]} -eq 0 ] && builds=("${LADDER_PROFILE_BUILDS[@]}")
  if ! command -v ncu > /dev/null 2>&1; then
    echo "ladder_profile skipped: ncu (Nsight Compute) not found" | tee -a "$out/steps.txt"
    return
  fi
  mkdir -p "$out/ladder_profile"
  step ladder_profile ncu --target-processes all --kernel-name regex:gemm_k --section SpeedOfLight \
    --section WarpStateStats --csv --page details --log-file "$out/ladder_profile/ncu.csv" \
    python3 scripts/gpu/ladder_profile.py "${builds[@]}"
}

# The node ids of a pipecheck JSON report's tests whose timings were skipped because xdist workers shared
# their GPU (pytest_pipecheck.device.TIMING_ALONE), one per line: they are timed again alone.
untimed() {
  python3 - "$1" <<'PY'
import json, sys
from pytest_pipecheck.device import TIMING_ALONE
try:
    doc = json.load(open(sys.argv[1], encoding="utf-8"))
except (OSError, ValueError):
    sys.exit(0)  # no report (the run was cut off): nothing to time again
seen = []
for r in doc.get("results", []):
    if r.get("verdict") == "skip" and TIMING_ALONE in r.get("summary", "") and r["nodeid"] not in seen:
        seen.append(r["nodeid"])
if seen:  # nothing at all when every timing ran (an empty line would be read as one node id: the whole tier)
    print("\n".join(seen))
PY
}

run_part() {
  local part=$1
  case "$part" in
    pytest)
      # shellcheck disable=SC2086
      step pytest-gpu python3 -m pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider -rs \
        --durations=30 --pipecheck-json="$out/pipecheck.json" --pipecheck-html="$out/pipecheck.html" \
        --junitxml="$out/junit.xml" ${PYTEST_ARGS:-tests reference_kernels}
      ;;
    evidence)
      # the tests the per-merge GPU tier leaves out (marked gpu_evidence in tests/: nested sessions under a real
      # tool, 45-100 s each on an H100; tests/conftest.py says why)
      step evidence env PIPECHECK_GPU_EVIDENCE=1 python3 -m pytest --pipecheck --pipecheck-tier=gpu \
        -p no:cacheprovider -rA -m gpu_evidence --durations=10 tests
      ;;
    examples)
      # the third-party kernel libraries (their wheels carried in .whl/), default sanitizer tools
      step examples python3 -m pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider -rs \
        --pipecheck-json="$out/examples.json" examples
      ;;
    pinned-all|toolkit-all)
      # every compute-sanitizer tool on every reference kernel: with the version discovery finds (the
      # pinned package when its wheel was carried), or with the toolkit's
      if [ "$part" = toolkit-all ]; then export PIPECHECK_COMPUTE_SANITIZER=$toolkit_sanitizer; fi
      step "$part" python3 -m pytest --pipecheck --pipecheck-tier=gpu --pipecheck-sanitizer=all \
        -p no:cacheprovider -rA --pipecheck-json="$out/$part.json" reference_kernels
      unset PIPECHECK_COMPUTE_SANITIZER
      ;;
    toolkit-default)
      # the default tools (racecheck, synccheck) with the toolkit's compute-sanitizer: the exclusions and
      # rules keyed to its version at work
      export PIPECHECK_COMPUTE_SANITIZER=$toolkit_sanitizer
      step "$part" python3 -m pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider -rA \
        --pipecheck-json="$out/$part.json" reference_kernels
      unset PIPECHECK_COMPUTE_SANITIZER
      ;;
    examples-fla)
      step "$part" python3 -m pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider -rs --durations=0 \
        --pipecheck-json="$out/$part.json" examples/fla
      ;;
    mutants-pinned|mutants-toolkit)
      # the CUDA sanitizer mutants in one pipecheck run, and the Gluon mutants and ConSan under Triton
      if [ "$part" = mutants-toolkit ]; then export PIPECHECK_COMPUTE_SANITIZER=$toolkit_sanitizer; fi
      step "$part" python3 -m pytest -p no:cacheprovider -rA -v \
        tests/gpu/test_cuda_kernels_gpu.py::test_sanitizer_mutants_caught_by_pipecheck_in_one_batch
      unset PIPECHECK_COMPUTE_SANITIZER
      ;;
    targeted|targeted-toolkit)
      # the GPU tests of the version-gated sanitizer options, the autotuned and wrapper forms; with the
      # sanitizer discovery finds (the pinned package when carried) or with the toolkit's
      if [ "$part" = targeted-toolkit ]; then
        export PIPECHECK_COMPUTE_SANITIZER=$toolkit_sanitizer
        step "$part" python3 -m pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider -rA -v \
          tests/gpu/test_sanitizer_gpu.py
        unset PIPECHECK_COMPUTE_SANITIZER
      else
        step "$part" python3 -m pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider -rA -v \
          --pipecheck-json="$out/$part.json" tests/gpu/test_sanitizer_gpu.py tests/gpu/test_autotune_gpu.py \
          tests/gpu/test_wrapper_gpu.py
      fi
      ;;
    bench-wrapper)
      step "$part" python3 benchmarks/bench_wrapper.py --device cuda
      ;;
    gluon-racecheck-toolkit)
      # the toolkit's racecheck on one launch of the Gluon GEMM, its report as printed (default analysis
      # mode): the records the rule triton-ws-dispatch-state is written for
      step "$part" "$toolkit_sanitizer" --tool racecheck --print-limit 100 python3 -c \
        "import torch; from reference_kernels.triton import gluon_gemm as gg; a = torch.randn((256, 512), device='cuda', dtype=torch.float16); b = torch.randn((512, 256), device='cuda', dtype=torch.float16); gg.launch_gluon_gemm(a, b, torch.empty((256, 256), device='cuda', dtype=torch.float16)); torch.cuda.synchronize(); print('launched')"
      ;;
    tier-profile)
      # the whole GPU tier with a time stamp on every line (-v prints each test as it ends), so a run cut
      # off by the time limit still shows where its time went; then, alone on the GPU, the tests whose
      # timings were skipped because pytest-xdist workers shared it (none without -n, and none where the
      # workers took the GPU alone for their timings: pytest_pipecheck/gpu_lease.py)
      step "$part" bash -c "python3 -m pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider -rfE -v \
        --durations=40 --pipecheck-json='$out/tier.json' ${PYTEST_ARGS:-} 2>&1 \
        | while IFS= read -r l; do printf '%s %s\n' \"\$(date +%s)\" \"\$l\"; done"
      untimed "$out/tier.json" > "$out/untimed.txt"
      if [ -s "$out/untimed.txt" ] && [ "${TIMING_RERUN:-1}" = 0 ]; then
        echo "$part-timing not run (TIMING_RERUN=0): $(wc -l < "$out/untimed.txt") tests untimed" | tee -a "$out/steps.txt"
      elif [ -s "$out/untimed.txt" ]; then
        step "$part-timing" bash -c "xargs -d '\n' -a '$out/untimed.txt' python3 -m pytest --pipecheck \
          --pipecheck-tier=gpu -p no:cacheprovider -p no:xdist -rfE -v --pipecheck-json='$out/tier-timing.json' \
          2>&1 | while IFS= read -r l; do printf '%s %s\n' \"\$(date +%s)\" \"\$l\"; done"
      fi
      ;;
    plugin-profile)
      # where pipecheck's own CPU-only tests spend their time on a GPU machine: one inner pytest session
      # (what each tests/plugin test starts) with the GPU visible and hidden, the plugin's import, then
      # tests/plugin and tests/unit on 6 workers each, with their durations (PIPECHECK_GPU_TIER_ALL=1: the
      # tests marked cpu_only too, which the GPU tier otherwise leaves to the CPU job)
      step inner-session bash -c 'TIMEFORMAT="%R s"; for v in visible hidden; do for i in 1 2 3; do
          echo "inner session, GPU $v:"; if [ $v = hidden ]; then export CUDA_VISIBLE_DEVICES=; fi
          time python3 -m pytest --pipecheck -q -p no:cacheprovider --co tests/unit/test_arch.py > /dev/null; done; done
        unset CUDA_VISIBLE_DEVICES; python3 -X importtime -c "import pytest_pipecheck.plugin" 2>&1 | sort -t"|" -k2 -n | tail -12'
      local d
      for d in plugin unit; do
        step "$d-n6" env PIPECHECK_GPU_TIER_ALL=1 python3 -m pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider -n 6 -q -rfE \
          --durations=25 --store-durations --durations-path="$out/durations-$d.json" "tests/$d"
      done
      ;;
    durations)
      # each test's whole cost (its sanitizer seconds included) on this GPU, in pytest-split's format, for
      # the repository's .test_durations (shares balance by it on a machine without pytest's cache, and
      # pytest-split splits CI machines by it): the GPU tests and the rest side by side, 4 workers each,
      # each line time-stamped; the two files merged into test_durations.json
      local d
      for d in gpu rest; do
        local paths="tests/gpu"
        [ "$d" = rest ] && paths="tests/unit tests/plugin reference_kernels"
        step "durations-$d" bash -c "python3 -m pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider -n 4 \
          -v -rfE --tb=short --store-durations --durations-path='$out/durations-$d.json' $paths 2>&1 \
          | while IFS= read -r l; do printf '%s %s\n' \"\$(date +%s)\" \"\$l\"; done" &
      done
      wait
      python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
merged = {}
for name in ("durations-gpu.json", "durations-rest.json"):
    p = out / name
    if p.exists():
        merged.update(json.loads(p.read_text()))
    else:
        print(f"{name}: not written (its run did not finish)")
(out / "test_durations.json").write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")
print(f"test_durations.json: {len(merged)} tests, {sum(merged.values()):.0f} s in all")
PY
      ;;
    compare-gate)
      # compare mode's false alarms, detection and time per check next to the stored gate's (alone on the GPU)
      step compare_gate_rates python3 scripts/gpu/compare_gate_rates.py "$out/compare_gate_rates" \
        --budget "${COMPARE_GATE_BUDGET:-330}"
      ;;
    speed)
      # the bundled suite from cold caches (empty Triton, CuPy and pipecheck build caches of its own, no pytest
      # cache), the sanitizer children running beside the tests (PIPECHECK_SANITIZER_OVERLAP=1, the default), then (=0) to their
      # end before the first test; then the examples with their default timeouts, from cold caches too; each
      # step's time in steps.txt, every test's in its log, each verdict in its JSON report (the two
      # reference_kernels reports must agree)
      local ov cold
      for ov in 1 0; do
        cold="$out/caches-overlap$ov"
        rm -rf "$cold"
        step "reference-overlap$ov" env TRITON_CACHE_DIR="$cold/triton" CUPY_CACHE_DIR="$cold/cupy" \
          PIPECHECK_CACHE_DIR="$cold/pipecheck" PIPECHECK_SANITIZER_OVERLAP=$ov \
          python3 -m pytest --pipecheck --pipecheck-tier=gpu -p no:cacheprovider -rs --durations=15 \
          --pipecheck-json="$out/reference-overlap$ov.json" reference_kernels
      done
      cold="$out/caches-examples"
      rm -rf "$cold"
      step examples-speed env TRITON_CACHE_DIR="$cold/triton" CUPY_CACHE_DIR="$cold/cupy" \
        PIPECHECK_CACHE_DIR="$cold/pipecheck" python3 -m pytest --pipecheck --pipecheck-tier=gpu \
        -p no:cacheprovider -rs --durations=15 --pipecheck-json="$out/examples-speed.json" examples
      ;;
    consan)
      step consan python3 -m pytest -p no:cacheprovider -rA -v -s tests/gpu/test_consan_gpu.py \
        tests/gpu/test_gluon_mutants_gpu.py
      ;;
    scripts)
      for s in scripts/gpu/*.py; do
        n=$(basename "$s" .py)
        if [[ " ${HELPERS[*]} " == *" $n "* ]]; then
          continue  # used by the other scripts, not run on its own
        elif [ "$n" = ladder_profile ]; then
          ladder_profile
        else
          step "$n" python3 "$s" "$out/$n"
        fi
      done
      ;;
    *)
      # NAME or NAME=ARG,ARG...: one script of scripts/gpu/, with its options (cuda_ladder_bench=--quick)
      name=${part%%=*}; extra=()
      [ "$name" != "$part" ] && IFS=, read -r -a extra <<< "${part#*=}"
      if [ "$name" = ladder_profile ]; then
        ladder_profile "${extra[@]}"
      else
        step "$name" python3 "scripts/gpu/$name.py" "$out/$name" "${extra[@]}"
      fi
      ;;
  esac
}

# PARALLEL=1 runs the parts side by side (each in its own shell, on the one GPU): for runs whose
# verdicts are the evidence, not their timings.
for part in "${parts[@]}"; do
  if [ "${PARALLEL:-0}" = 1 ]; then run_part "$part" & else run_part "$part"; fi
done
wait

tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")" && echo "archive: $out.tgz"
