#!/bin/bash
# iree-stress gate on Slurm: an array of N tasks runs the N shards of one seeded plan
# (iree-stress reads SLURM_ARRAY_TASK_ID/COUNT/MIN), then a dependent job merges and decides.
#
#   sbatch examples/slurm-array.sh            # submits the array and the gate job
#
# docs/ci.md explains the verdicts; a task that died leaves no folder: INCONCLUSIVE (exit 3).
#SBATCH --job-name=iree-stress-soak
#SBATCH --array=1-4
#SBATCH --gpus-per-task=1
#SBATCH --time=00:30:00
#SBATCH --output=iree-stress-%A_%a.log
set -euo pipefail

RESULTS="${IREE_STRESS_RESULTS:-$PWD/iree-stress-results}"
export IREE_STRESS_SEED="${IREE_STRESS_SEED:-20251201}"  # one seed for every task

if [[ -z "${SLURM_ARRAY_TASK_ID:-}" ]]; then
  # not inside the array yet: submit it, then the gate after every task ended (afterany: a
  # failed task must not keep the verdict from being written)
  array=$(sbatch --parsable --export=ALL "$0")
  sbatch --dependency="afterany:${array}" --job-name=iree-stress-gate \
    --output=iree-stress-gate-%j.log --export=ALL \
    --wrap="iree-stress merge ${RESULTS}/shard-* -o ${RESULTS}/merged-${array} && \
iree-stress gate --from ${RESULTS}/merged-${array} --max-rate ${MAX_RATE:-0.01} \
--junit ${RESULTS}/gate-${array}.xml"
  exit 0
fi

mkdir -p "$RESULTS"
# exit 1 (failures found) is a result, not an error: the gate job decides
iree-stress soak --target "${IREE_STRESS_TARGET:-rocm}" --duration "${DURATION:-20m}" --quiet \
  --max-jobs-per-worker 100 --results "${RESULTS}/shard-${SLURM_ARRAY_TASK_ID}" || test "$?" -eq 1
