#!/usr/bin/env bash
# One GPU call: the Triton sweep, the perf-gate rates, the CUDA ladder (rungs + k3 builds) and an
# ncu profile of k3's builds. Everything lands in OUT/a.tgz (the per-step logs in OUT/a/).
set -u
out=${1:?usage: scripts/gpu/session_a.sh OUT}
w=/tmp/pipecheck-a
rm -rf "$w"; mkdir -p "$w"
STEP_TIMEOUT=240 scripts/gpu-check.sh "$w/check" triton_gemm_perf perf_gate_rates > "$w/check.log" 2>&1
tail -n 60 "$w/check.log"
t0=$(date +%s)
timeout 300 python3 scripts/gpu/cuda_ladder_bench.py "$w/ladder" --quick > "$w/ladder.log" 2>&1
echo "ladder rc=$? $(( $(date +%s) - t0 ))s"; tail -n 40 "$w/ladder.log"
t0=$(date +%s)
timeout 150 ncu --target-processes all --kernel-name regex:gemm_k3 --section SpeedOfLight --section WarpStateStats \
  --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy --csv --page details \
  python3 scripts/gpu/ladder_profile.py k3_cp_async:4 k3_cp_async_wide:4 k3_cp_async_wide:4:PIPECHECK_XTILE \
  k3_cp_async_wide:3:PIPECHECK_XTILE,PIPECHECK_SUBTILES=2 k3_cp_async:4:PIPECHECK_XTILE > "$w/ncu.csv" 2> "$w/ncu.err"
echo "ncu rc=$? $(( $(date +%s) - t0 ))s"; tail -n 5 "$w/ncu.err"
python3 - "$w/ncu.csv" <<'PY'
import csv, re, sys
keep = re.compile(r"Stall|Throughput|Duration|Issued|Eligible|Active Warps|Registers|Block Limit|Bank")
for row in csv.DictReader(line for line in open(sys.argv[1]) if line.startswith('"')):
    if keep.search(row.get("Metric Name", "")):
        print(row["ID"], row["Grid Size"], row["Metric Name"], row["Metric Value"], row["Metric Unit"], sep=" | ")
PY
tar czf "$out/a.tgz" -C /tmp pipecheck-a
