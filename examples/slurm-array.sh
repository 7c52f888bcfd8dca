#!/bin/bash
# iree-stress gate on Slurm: an array of N tasks runs the N shards of one seeded plan
# (iree-stress reads SLURM_ARRAY_TASK_ID/COUNT/MIN), then a dependent job merges and decides.
# Run it with bash, not sbatch: it submits the array (this file) and the gate job itself.
#
#   bash examples/slurm-array.sh --partition=gpu          # rocm, 4 tasks with one GPU each
#   IREE_STRESS_TARGET=cpu bash examples/slurm-array.sh --partition=cpu --array=1-8  # no GPU
#
# Environment: IREE_STRESS_TARGET (rocm), IREE_STRESS_GPUS_PER_TASK (unset: 1, or 0 for cpu;
# 0 or empty asks for none), IREE_STRESS_DURATION per task (20m), IREE_STRESS_MAX_RATE (0.01),
# IREE_STRESS_SEED, IREE_STRESS_RESULTS (./iree-stress-results, on a file system every node
# sees). Arguments go to the array's sbatch (--array=1-8, --partition=gpu); SBATCH_ACCOUNT
# and the other SBATCH_* variables reach both jobs, as sbatch reads them.
# docs/ci.md explains the verdicts; a task that died leaves no folder: INCONCLUSIVE (exit 3).
#SBATCH --job-name=iree-stress-soak
#SBATCH --array=1-4
#SBATCH --time=00:30:00
#SBATCH --output=iree-stress-%A_%a.log
set -euo pipefail

export IREE_STRESS_TARGET="${IREE_STRESS_TARGET:-rocm}"
export IREE_STRESS_RESULTS="${IREE_STRESS_RESULTS:-$PWD/iree-stress-results}"
export IREE_STRESS_SEED="${IREE_STRESS_SEED:-20251201}"  # one seed for every task
DURATION="${IREE_STRESS_DURATION:-20m}"
MAX_RATE="${IREE_STRESS_MAX_RATE:-0.01}"

if [[ "${1:-}" == gate ]]; then
  # the gate job (after every task ended): merge the shards that arrived, decide, say so
  dir="${IREE_STRESS_RESULTS}/$2"
  shopt -s nullglob
  shards=("$dir"/shard-*)
  echo "iree-stress gate of array $2: merging ${#shards[@]} shard folder(s) into $dir/merged"
  if [[ ${#shards[@]} -eq 0 ]]; then echo "no shard arrived: INCONCLUSIVE (exit 3)"; exit 3; fi
  iree-stress merge "${shards[@]}" -o "$dir/merged"
  rc=0
  iree-stress gate --from "$dir/merged" --max-rate "$MAX_RATE" --junit "$dir/gate.xml" || rc=$?
  verdict=([0]=PASS [1]=FAIL [3]=INCONCLUSIVE)
  echo "iree-stress gate of array $2: ${verdict[$rc]:-ERROR} (exit $rc), JUnit $dir/gate.xml"
  exit "$rc"
fi

if [[ -z "${SLURM_ARRAY_TASK_ID:-}" ]]; then
  # not inside the array yet: submit it, then the gate once every task ended (afterany: a
  # failed task must not keep the verdict from being written). #SBATCH lines cannot be
  # conditional, so the GPU request goes on the command line.
  if [[ "$IREE_STRESS_TARGET" == cpu ]]; then gpus_default=0; else gpus_default=1; fi
  gpus="${IREE_STRESS_GPUS_PER_TASK-$gpus_default}"
  gpu_request=()
  if [[ "${gpus:-0}" != 0 ]]; then gpu_request=(--gpus-per-task="$gpus"); fi
  array=$(sbatch --parsable --export=ALL "${gpu_request[@]}" "$@" "$0")
  array="${array%%;*}"  # "id;cluster" on a federation
  gate=$(sbatch --parsable --dependency="afterany:${array}" --job-name=iree-stress-gate \
    --output=iree-stress-gate-%j.log --export=ALL --wrap="bash '$(realpath "$0")' gate ${array}")
  echo "submitted array ${array} (target ${IREE_STRESS_TARGET}, ${gpu_request[*]:-no GPU})" \
    "and gate job ${gate%%;*}; logs iree-stress-${array}_*.log and" \
    "iree-stress-gate-${gate%%;*}.log, JUnit ${IREE_STRESS_RESULTS}/${array}/gate.xml"
  exit 0
fi

shard="$((SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN + 1))/${SLURM_ARRAY_TASK_COUNT}"
out="${IREE_STRESS_RESULTS}/${SLURM_ARRAY_JOB_ID}/shard-${SLURM_ARRAY_TASK_ID}"
echo "iree-stress task ${SLURM_ARRAY_TASK_ID} on $(hostname): shard ${shard}," \
  "target ${IREE_STRESS_TARGET}, seed ${IREE_STRESS_SEED}, ${DURATION}, results ${out}"
rc=0
iree-stress soak --target "$IREE_STRESS_TARGET" --duration "$DURATION" --max-jobs-per-worker 100 --results "$out" || rc=$?
case "$rc" in
  0) meaning="no failures" ;;
  1) meaning="failures found (a result, not an error: the gate job decides)" ;;
  2) meaning="usage error (the line above says which)" ;;
  3) meaning="interrupted: the gate will say INCONCLUSIVE" ;;
  *) meaning="the soak died: with no results folder this shard counts as missing" ;;
esac
echo "iree-stress task ${SLURM_ARRAY_TASK_ID}: soak exit ${rc}: ${meaning}"
exit "$((rc == 1 ? 0 : rc))"  # failures found is a result: the task fails only when it broke
