#!/usr/bin/env bash
# The fault matrix (bench/gpu_fault_matrix.py) on a lent GPU in one device call: debuggers on
# PATH and none, each split in two lanes (the join faults, the exit faults), all four lanes side
# by side so the whole matrix fits one call's ten minutes. Prepared here (no compiler and no
# registry there): the cp312 iree-base-runtime and py-spy wheels in DIR/wheels, the artifacts
# of `iree-stress compile --target cuda --programs 'unary.*.f32.*' --export DIR/cuda`, and a
# copy of this tree at DIR/tree (DIR/tree/COMMIT names its commit). DIR must lie in the checkout
# the device tool sends (the session's own, not a helper's worktree), git-ignored, e.g.
# .cache/gpu41 there. Carry DIR; run
# `bash DIR/tree/bench/fault_matrix_gpu.sh`. Outputs go to $OUT (at most 8 files come back):
# fault_matrix-<target>-on.txt and -off.txt (each lane's table under a header naming the commit
# and the GPU), and evidence.tgz (every cell's text report and summary.json, the evidence of
# failures of an unexpected class, the lanes' logs).
#
#   TARGET=cuda MATRIX_S=12 WORKERS=4 WAIT_S=530 bash DIR/tree/bench/fault_matrix_gpu.sh
#
# Tried on the cpu target first (TARGET=cpu, no DIR/cpu: the local compiler cache serves).
set -u
HERE=$(cd "$(dirname "$0")/.." && pwd)
HG=$(cd "$HERE/.." && pwd)
TARGET=${TARGET:-cuda}
OUT=${OUT:?the folder whose files come back}
if [ -d "$HG/wheels" ] && ! python3 -c "import iree.runtime" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$HG"/wheels/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$HERE PATH=/tmp/site/bin:$PATH
fi
export PYTHONUNBUFFERED=1
cd "$HERE" || exit 1
ART=(); [ -d "$HG/$TARGET" ] && ART=(--artifacts "$HG/$TARGET")
MACHINE=$(nvidia-smi -L 2>/dev/null | head -1); MACHINE=${MACHINE:-$(uname -n), no nvidia-smi}
COMMIT=$(cat COMMIT 2>/dev/null || git rev-parse --short HEAD)
T=$(mktemp -d /tmp/fault-matrix-lanes.XXXX)
echo "machine: $MACHINE; commit $COMMIT; $(nproc) cores"
which gdb cuda-gdb rocgdb py-spy 2>&1
for mode in on off; do
  for family in join exit; do
    faults=$(printf "%s-segv,%s-spin,%s-block" "$family" "$family" "$family")
    lane=$mode-$family
    ( timeout "${LANE_S:-900}" python3 bench/gpu_fault_matrix.py --target "$TARGET" "${ART[@]}" \
        --duration "${MATRIX_S:-12}" --workers "${WORKERS:-4}" --teardown-timeout 5 \
        --debuggers $mode --faults "$faults" --keep-odd "$T/odd-$lane" \
        --reports "$T/reports-$lane" --out "$T/$lane.txt" > "$T/$lane.log" 2>&1
      echo "lane $lane exit $?" >> "$T/lanes.log"; touch "$T/$lane.done" ) < /dev/null &
  done
done
for _ in $(seq 1 "${WAIT_S:-530}"); do
  n=$(ls "$T"/*.done 2>/dev/null | wc -l); [ "$n" = 4 ] && break; sleep 1
done
cat "$T/lanes.log" 2>/dev/null
for mode in on off; do
  f="$OUT/fault_matrix-$TARGET-$mode.txt"
  { echo "# bash bench/fault_matrix_gpu.sh (TARGET=$TARGET MATRIX_S=${MATRIX_S:-12}" \
         "WORKERS=${WORKERS:-4}): commit $COMMIT; machine: $MACHINE; $(nproc) cores"
    for family in join exit; do
      lane=$mode-$family
      if [ -f "$T/$lane.txt" ]; then cat "$T/$lane.txt"
      else echo "# lane $lane did not finish in time; its rows so far:"; cat "$T/$lane.log"; fi
    done; } > "$f"
  cat "$f"
done
tar czf "$OUT/evidence.tgz" -C "$T" . 2>/dev/null
ls -la "$OUT"
