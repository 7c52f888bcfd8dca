#!/usr/bin/env bash
# Issue 39: driver-churn on a lent NVIDIA GPU, in one device call. Prepared here (no compiler
# and no registry there): the cp312 iree-base-runtime wheel in .cache/hgpu/wheels, the cuda
# artifacts from `iree-stress compile --target cuda --programs 'unary.*.f32.*' --export
# .cache/hgpu/cuda`, and a copy of this tree at the commit in .cache/hgpu/tree (COMMIT names
# it). Carry .cache/hgpu; run `bash .cache/hgpu/tree/bench/driver_churn_gpu.sh`. Outputs go to
# $OUT: whether libcuda leaves the process with its driver (bench/driver_churn_maps.py), and a
# 120 s soak of driver-churn beside per-call (device releases) with its report.
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
HG=$(cd "$HERE/.." && pwd)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$HG"/wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$HERE PYTHONUNBUFFERED=1
COMMIT=$(cat "$HERE/COMMIT")
cd "$HERE" || exit 1
GPU=$(nvidia-smi -L | head -1)
{ echo "# command: python3 bench/driver_churn_maps.py cuda"; echo "# commit: $COMMIT";
  echo "# machine: $GPU"; timeout 120 python3 bench/driver_churn_maps.py cuda; } \
  > "$OUT/driver_churn_maps-cuda.txt" 2>&1
cat "$OUT/driver_churn_maps-cuda.txt"
CMD="python3 -m stress soak --target cuda --artifacts $HG/cuda --patterns driver-churn,per-call \
--programs 'unary.*.f32.*' --workers 4 --threads 2 --duration ${SOAK_S:-120}s --seed 39 -q --results /tmp/dc"
{ echo "# command: $CMD"; echo "# then: python3 -m stress report /tmp/dc"
  echo "# commit: $COMMIT"; echo "# machine: $GPU"
  eval "timeout 400 $CMD"; echo "# soak exit status: $?"
  timeout 120 python3 -m stress report /tmp/dc; echo "# report exit status: $?"; } \
  > "$OUT/driver_churn-cuda.txt" 2>&1
cp /tmp/dc/summary.json "$OUT/driver_churn-cuda-summary.json"
tail -40 "$OUT/driver_churn-cuda.txt"
