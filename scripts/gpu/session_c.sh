#!/usr/bin/env bash
# One GPU call: the CUDA ladder's k3 builds, the Triton sweep, and the GPU tier of the changed kernels
# (the Triton reference GEMM's paths and mutants, k3's wide build) under racecheck and synccheck.
# Everything lands in OUT/c.tgz.
set -u
out=${1:?usage: scripts/gpu/session_c.sh OUT}
w=/tmp/pipecheck-c
rm -rf "$w"; mkdir -p "$w"
python3 -m pip install -q --no-deps --no-build-isolation -e . > "$w/install.log" 2>&1 || { cat "$w/install.log"; exit 1; }
t0=$(date +%s)
timeout 240 python3 scripts/gpu/cuda_ladder_bench.py "$w/ladder" --quick > "$w/ladder.log" 2>&1
echo "ladder rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^\| k3|cuBLAS\)" "$w/ladder.log"
t0=$(date +%s)
timeout 200 python3 scripts/gpu/triton_gemm_perf.py "$w/triton" > "$w/triton.log" 2>&1
echo "triton rc=$? $(( $(date +%s) - t0 ))s"; tail -n 4 "$w/triton.log"
t0=$(date +%s)
timeout 330 python3 -m pytest --pipecheck --pipecheck-tier=gpu --pipecheck-sanitizer=racecheck,synccheck \
  -p no:cacheprovider -q -rfEs --pipecheck-json="$w/gpu-tests.json" --pipecheck-html="$w/gpu-tests.html" \
  reference_kernels/triton tests/unit/test_triton_gemm_variants.py tests/unit/test_triton_mutants.py \
  "reference_kernels/cuda/test_reference_cuda.py" -k "triton or gemm or wide or mutant" > "$w/gpu-tests.log" 2>&1
echo "gpu-tests rc=$? $(( $(date +%s) - t0 ))s"; tail -n 30 "$w/gpu-tests.log"
tar czf "$out/c.tgz" -C /tmp pipecheck-c
