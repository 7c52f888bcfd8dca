#!/usr/bin/env bash
# The H200 measurements of docs/gpu-runs.md and docs/performance.md, in two device calls (one
# call may run 10 minutes; the soak runs 10 and must not share the machine with the benches):
#
#   bench/h200_session.sh start    # installs the carried wheels, starts the >= 10 min soak in
#                                  # its own session (it outlives the call), waits ~9.5 min
#   bench/h200_session.sh finish   # waits for the soak, exports its time line and report,
#                                  # then the bench ratios on the now idle GPU
#   bench/h200_session.sh ratios   # the ratio benches alone, in one call of ~9 minutes
#   bench/h200_session.sh overhead # soak_overhead alone, 10 s rounds (~6 minutes)
#   bench/h200_session.sh latency  # failure_latency with time for all its samples
#   bench/h200_session.sh matrix-on|matrix-off  # the fault matrix, cuda-gdb on PATH or not
#   bench/h200_session.sh exits    # exit paths on cuda (no fault), then the evidence budget
#   bench/h200_session.sh truth    # issue 24/27 in two calls: starts three lanes in the
#                                  # background (the fault matrix with cuda-gdb on PATH; the same
#                                  # with no debugger; the exit paths with no fault, then the
#                                  # signature stability bench), waits ~9 min
#   bench/h200_session.sh matrices [-finish]  # issue 24 on the final code: the whole matrix,
#                                  # debuggers on and off side by side, in two calls
#   bench/h200_session.sh core-ab  # issue 25: soak_overhead of the redesign beside the tree
#                                  # before it, alternated; then a 60 s all-pattern soak
#   bench/h200_session.sh truth-finish  # waits for both lanes, then the evidence budget on the
#                                  # otherwise idle machine; brings every output back
#
# Prepared here (no compiler, no registry there): the cp312 iree-base-runtime and py-spy wheels
# in .cache/hgpu/wheels and `iree-stress compile --target cuda --export .cache/hgpu/cuda`.
# Carry .cache/hgpu. Outputs go to $OUT (the device tool brings them back).
set -u
ART=$PWD/.cache/hgpu/cuda
RUN=/tmp/soak
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
SOAK_S=${SOAK_S:-600}

install() {
  # the copy of the tree may not keep file modes: without this the outputs' headers would say
  #   "+ uncommitted changes" for an unchanged tree
  git config core.fileMode false 2>/dev/null
  [ -d /tmp/site/iree ] || python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site .cache/hgpu/wheels/*.whl || exit 1
}

case "${1:-}" in
start)
  install
  nvidia-smi -L
  python3 -c "import iree.runtime as r, numpy; print('iree.runtime', r.__file__)"
  rm -rf "$RUN" /tmp/soak.done
  setsid bash -c "python3 bench/parent_memory.py --target cuda --artifacts $ART \
      --only-all-patterns --programs '' --workers 8 --all-patterns-duration ${SOAK_S}s \
      --keep $RUN > /tmp/soak.log 2>&1; echo \$? > /tmp/soak.done" < /dev/null &
  sleep "${START_WAIT_S:-560}"
  tail -5 /tmp/soak.log
  ;;
finish)
  install
  for _ in $(seq 1 300); do [ -f /tmp/soak.done ] && break; sleep 1; done
  echo "soak exit: $(cat /tmp/soak.done 2>/dev/null || echo 'still running')"
  cp /tmp/soak.log "$OUT/parent_memory-cuda-h200.txt"
  mkdir -p /tmp/timeline
  timeout 60 python3 bench/timeline_export.py "$RUN" /tmp/timeline \
    --known docs/findings/known-cuda.toml > /tmp/timeline/export.log 2>&1
  cp "$RUN/summary.json" /tmp/timeline/soak-summary.json
  tar czf "$OUT/timeline.tgz" -C /tmp timeline  # the tool brings back at most 8 files
  timeout 140 python3 bench/soak_overhead.py --target cuda --artifacts "$ART" --procs 8 \
    --rounds 3 --seconds 5 > "$OUT/soak_overhead-cuda-h200.txt" 2>&1
  timeout 100 python3 bench/failure_latency.py --target cuda --artifacts "$ART" --workers 8 \
    > "$OUT/failure_latency-cuda-h200.txt" 2>&1
  timeout 170 python3 bench/native_throughput.py --target cuda --artifacts "$ART" \
    --parallel 8 --jobs 150 --rounds 3 --record-s 0 > "$OUT/native_throughput-cuda-h200.txt" 2>&1
  ls -la "$OUT" /tmp/timeline
  ;;
more)
  # a third call: the bench that failed in `finish` (bare loop readback on device memory) and
  # the parent's RSS over a shorter soak, sampled to a file, with the soak's stacks if it has
  # not exited a minute after its duration (the 600 s soak's parent had not, 5 min after)
  install
  timeout 130 python3 bench/soak_overhead.py --target cuda --artifacts "$ART" --procs 8 \
    --rounds 3 --seconds 4 > "$OUT/soak_overhead-cuda-h200.txt" 2>&1
  setsid python3 bench/parent_memory.py --target cuda --artifacts "$ART" --only-all-patterns \
    --programs '' --workers 8 --all-patterns-duration 120s --samples "$OUT/rss.csv" \
    > "$OUT/parent_memory-cuda-h200.txt" 2>&1 &
  pm=$!
  for _ in $(seq 1 185); do kill -0 $pm 2>/dev/null || break; sleep 1; done
  if kill -0 $pm 2>/dev/null; then
    for p in $(pgrep -f "stress soak --json"); do
      echo "== soak parent $p, $(date +%s)"; ps -o pid,stat,etime,wchan:30,cmd --ppid "$p"
      timeout 20 /tmp/site/bin/py-spy dump --native --pid "$p"
    done > "$OUT/soak-exit-stacks.txt" 2>&1
    kill -- -$pm  # its own session: the soak it started goes too
  fi
  ls -la "$OUT"
  ;;
ratios)
  # the harness-vs-bare-loop ratios (the bench `finish` and `more` could not complete), then
  # failure latency and native throughput again, for more samples than the first session's
  install
  nvidia-smi -L
  timeout 220 python3 bench/soak_overhead.py --target cuda --artifacts "$ART" --procs 8 \
    --rounds 3 --seconds 5 > "$OUT/soak_overhead-cuda-h200.txt" 2>&1
  timeout 120 python3 bench/failure_latency.py --target cuda --artifacts "$ART" --workers 8 \
    > "$OUT/failure_latency-cuda-h200-2.txt" 2>&1
  timeout 200 python3 bench/native_throughput.py --target cuda --artifacts "$ART" \
    --parallel 8 --jobs 150 --rounds 5 --record-s 0 > "$OUT/native_throughput-cuda-h200-2.txt" 2>&1
  ls -la "$OUT"
  ;;
overhead)
  # the harness-vs-bare ratios alone, with rounds long enough that the workers' staggered
  # CUDA context start-up (~0.2 s each, serialized) is a small part of each
  install
  nvidia-smi -L
  timeout "${OVERHEAD_TIMEOUT_S:-560}" python3 bench/soak_overhead.py --target cuda \
    --artifacts "$ART" --procs 8 --rounds "${ROUNDS:-3}" --seconds "${SECONDS_PER_RUN:-10}" \
    > "$OUT/soak_overhead-cuda-h200.txt" 2> "$OUT/soak_overhead-cuda-h200.log"
  echo "soak_overhead exit $?"; cat "$OUT/soak_overhead-cuda-h200.txt" "$OUT/soak_overhead-cuda-h200.log"
  ;;
latency)
  # failure_latency with all its samples (20 crashes, 10 hangs): the earlier runs had 3-6 of
  # each, because the cross-thread and churn patterns' known CUDA context errors filled
  # --max-failures first; those patterns are left out here
  install
  nvidia-smi -L
  timeout "${LATENCY_TIMEOUT_S:-500}" python3 bench/failure_latency.py --target cuda \
    --artifacts "$ART" --workers 8 --patterns "${LATENCY_PATTERNS:-shared,per-thread,per-call}" \
    > "$OUT/failure_latency-cuda-h200-8.txt" 2>&1
  echo "failure_latency exit $?"; cat "$OUT/failure_latency-cuda-h200-8.txt"; df -h /tmp | tail -1
  ;;
matrix-on|matrix-off)
  # issue 24: the fault matrix on cuda, cuda-gdb on PATH (on) or no debugger at all (off);
  # ~18 cells of MATRIX_S seconds each fit one call
  install
  nvidia-smi -L
  which gdb cuda-gdb rocgdb py-spy 2>&1 | head
  mode=${1#matrix-}
  timeout "${MATRIX_TIMEOUT_S:-570}" python3 bench/gpu_fault_matrix.py --target cuda \
    --artifacts "$ART" --duration "${MATRIX_S:-12}" --workers 4 --debuggers "$mode" \
    --out "$OUT/fault_matrix-cuda-h200-$mode.txt" > "$OUT/fault_matrix-cuda-h200-$mode.log" 2>&1
  echo "fault matrix exit $?"; cat "$OUT/fault_matrix-cuda-h200-$mode.log"
  ;;
exits)
  # issue 24: exit-inflight reaches its exit with no fault (>= 95% of jobs), then the
  # evidence budget's exits/s in a p = 0.5 exit-crash storm against a clean soak
  install
  nvidia-smi -L
  timeout 200 python3 -m stress soak --target cuda --artifacts "$ART" --patterns exit \
    --duration 90s --workers 4 --json -q --results /tmp/exits > "$OUT/exit_paths-cuda-h200.json" \
    2> "$OUT/exit_paths-cuda-h200.log"
  timeout 60 python3 -m stress report /tmp/exits > "$OUT/exit_paths-cuda-h200-report.txt" 2>&1
  timeout 330 python3 bench/evidence_budget.py --target cuda --artifacts "$ART" --rounds 3 \
    --duration 20 --workers 4 > "$OUT/evidence_budget-cuda-h200.txt" 2>&1
  cat "$OUT/exit_paths-cuda-h200-report.txt" "$OUT/evidence_budget-cuda-h200.txt" | tail -60
  ;;
truth)
  install
  nvidia-smi -L
  which gdb cuda-gdb rocgdb py-spy 2>&1 | head
  T=/tmp/truth; rm -rf "$T"; mkdir -p "$T"
  export PATH=/tmp/site/bin:$PATH  # the carried py-spy
  for mode in on off; do  # lanes A and C: the two matrices side by side
    setsid bash -c "
      timeout 900 python3 bench/gpu_fault_matrix.py --target cuda --artifacts $ART \
        --duration ${MATRIX_S:-12} --workers 4 --teardown-timeout 5 --debuggers $mode \
        --out $T/fault_matrix-cuda-h200-$mode.txt > $T/fault_matrix-cuda-h200-$mode.log 2>&1
      echo \"matrix $mode exit \$?\" >> $T/lanes.log; touch $T/lane-$mode.done
    " < /dev/null > /dev/null 2>&1 &
  done
  setsid bash -c "
    timeout 200 python3 -m stress soak --target cuda --artifacts $ART --patterns exit \
      --duration 90s --workers 4 --json -q --results $T/exits > $T/exit_paths-cuda-h200.json \
      2> $T/exit_paths-cuda-h200.log
    echo \"exits exit \$?\" >> $T/lanes.log
    timeout 60 python3 -m stress report $T/exits > $T/exit_paths-cuda-h200-report.txt 2>&1
    # issue 26 on one GPU: --gpus all, and two URIs of the one GPU (bookkeeping only: the
    #   same GPU twice is not two GPUs), each failure naming its device
    timeout 90 python3 -m stress soak --target cuda --artifacts $ART --gpus all \
      --patterns shared,per-call --duration 15s --workers 2 --threads 1 --json -q \
      --results $T/gpus-all > $T/gpus-all.json 2> $T/gpus-all.log
    timeout 90 python3 -m stress soak --target cuda --artifacts $ART \
      --device cuda://0,cuda://0 --patterns shared --duration 15s --workers 2 --threads 1 \
      --inject raise@invoke:0.02 --json -q --results $T/two-uris > $T/two-uris.json \
      2> $T/two-uris.log
    (timeout 60 python3 -m stress report $T/gpus-all; timeout 60 python3 -m stress report \
      $T/two-uris; python3 -c 'import sqlite3,sys; [print(p, sqlite3.connect(p + \"/stress.db\")
      .execute(\"SELECT worker, device FROM workers\").fetchall()) for p in sys.argv[1:]]' \
      $T/gpus-all $T/two-uris) > $T/gpus-cuda-h200.txt 2>&1
    echo \"gpus exit \$?\" >> $T/lanes.log
    timeout 500 python3 bench/signature_stability.py --target cuda --artifacts $ART --runs 10 \
      --duration 15 --parallel 4 > $T/signature_stability-cuda-h200.txt 2>&1
    echo \"stability exit \$?\" >> $T/lanes.log
    touch $T/lane-b.done" < /dev/null > /dev/null 2>&1 &
  for _ in $(seq 1 "${TRUTH_WAIT_S:-540}"); do
    [ -f $T/lane-on.done ] && [ -f $T/lane-off.done ] && [ -f $T/lane-b.done ] && break; sleep 1
  done
  cat $T/lanes.log 2>/dev/null; tail -3 $T/*.log
  cp $T/exit_paths-cuda-h200-report.txt $T/signature_stability-cuda-h200.txt "$OUT/" 2>/dev/null
  ;;
truth-finish)
  install
  T=/tmp/truth
  export PATH=/tmp/site/bin:$PATH
  for _ in $(seq 1 "${FINISH_WAIT_S:-300}"); do
    [ -f $T/lane-on.done ] && [ -f $T/lane-off.done ] && [ -f $T/lane-b.done ] && break; sleep 1
  done
  cat $T/lanes.log
  timeout "${BUDGET_TIMEOUT_S:-330}" python3 bench/evidence_budget.py --target cuda \
    --artifacts "$ART" --rounds 3 --duration 20 --workers 4 \
    > "$T/evidence_budget-cuda-h200.txt" 2>&1
  echo "evidence budget exit $?"
  cat "$T/evidence_budget-cuda-h200.txt"
  cp $T/fault_matrix-cuda-h200-on.txt $T/fault_matrix-cuda-h200-off.txt \
     $T/signature_stability-cuda-h200.txt $T/evidence_budget-cuda-h200.txt \
     $T/exit_paths-cuda-h200-report.txt $T/gpus-cuda-h200.txt "$OUT/" 2>/dev/null
  tar czf "$OUT/truth-logs.tgz" -C /tmp truth/lanes.log truth/exit_paths-cuda-h200.json \
    truth/exit_paths-cuda-h200.log truth/fault_matrix-cuda-h200-on.log \
    truth/fault_matrix-cuda-h200-off.log truth/gpus-all.json truth/two-uris.json 2>/dev/null
  ls -la "$OUT"
  ;;
joins)
  # the join-stall cells again (the GIL-waiter rule of the watchdog), cuda-gdb on PATH and off
  #   side by side; the evidence of any failure of an unexpected class comes back too
  install
  nvidia-smi -L
  export PATH=/tmp/site/bin:$PATH
  for mode in on off; do
    timeout 400 python3 bench/gpu_fault_matrix.py --target cuda --artifacts "$ART" \
      --duration "${MATRIX_S:-12}" --workers 4 --teardown-timeout 5 --debuggers $mode \
      --faults join-spin,join-block --keep-odd /tmp/odd-$mode \
      > "$OUT/fault_matrix-cuda-joins-$mode.txt" 2>&1 &
  done
  wait
  tail -9 "$OUT"/fault_matrix-cuda-joins-*.txt
  tar czf "$OUT/odd.tgz" -C /tmp odd-on odd-off 2>/dev/null
  ;;
matrices)
  # issue 24 on the final code: the whole matrix, cuda-gdb on PATH and no debugger, side by
  #   side in the background (they outlive the call); `matrices-finish` brings them back
  install
  nvidia-smi -L
  export PATH=/tmp/site/bin:$PATH
  T=/tmp/matrices; rm -rf "$T"; mkdir -p "$T"
  for mode in on off; do
    setsid bash -c "
      timeout 900 python3 bench/gpu_fault_matrix.py --target cuda --artifacts $ART \
        --duration ${MATRIX_S:-12} --workers 4 --teardown-timeout 5 --debuggers $mode \
        --keep-odd $T/odd-$mode --out $T/fault_matrix-cuda-$mode.txt \
        > $T/fault_matrix-cuda-$mode.log 2>&1
      echo \"matrix $mode exit \$?\" >> $T/lanes.log; touch $T/lane-$mode.done
    " < /dev/null > /dev/null 2>&1 &
  done
  # both lanes took ~9 min on the H200: wait for them here, and bring everything back in this
  #   call (a machine left idle is given back, and /tmp with it)
  for _ in $(seq 1 "${MATRICES_WAIT_S:-570}"); do
    [ -f $T/lane-on.done ] && [ -f $T/lane-off.done ] && break; sleep 1
  done
  cat $T/lanes.log 2>/dev/null
  cp $T/fault_matrix-cuda-on.txt $T/fault_matrix-cuda-off.txt $T/fault_matrix-cuda-on.log \
     $T/fault_matrix-cuda-off.log "$OUT/" 2>/dev/null
  tar czf "$OUT/odd.tgz" -C $T odd-on odd-off 2>/dev/null
  tail -n 22 $T/fault_matrix-cuda-on.txt $T/fault_matrix-cuda-off.txt
  ;;
core-ab)
  # issue 25: the harness-vs-bare ratios of the redesigned core beside the tree before it
  #   (.cache/hgpu/base = `git archive b54cf65`, main before the redesign's merge), run by run
  #   alternated on one machine (the order flips each round), then a one-minute all-pattern
  #   soak of the redesigned code (8 workers x 2 threads)
  install
  nvidia-smi -L
  B=$PWD/.cache/hgpu/base; H=$PWD
  for r in 1 2; do
    order="base this"; [ "$r" = 2 ] && order="this base"
    for tree in $order; do
      root=$H; [ "$tree" = base ] && root=$B
      f="$OUT/soak_overhead-cuda-$tree-$r.txt"
      echo "# tree: $tree ($root), round $r of 2" > "$f"
      (cd "$root" && PYTHONPATH=/tmp/site:$root timeout "${AB_TIMEOUT_S:-150}" \
        python3 bench/soak_overhead.py --target cuda --artifacts "$ART" --procs 8 --rounds 1 \
        --seconds "${AB_SECONDS:-6}") >> "$f" 2>&1
      echo "$tree round $r exit $?"; tail -n 5 "$f"
    done
  done
  rm -rf /tmp/ab-soak
  timeout 150 python3 -m stress soak --target cuda --artifacts "$ART" \
    --workers 8 --threads 2 --duration "${AB_SOAK:-60s}" --results /tmp/ab-soak \
    > "$OUT/soak-all-cuda-core.txt" 2>&1
  echo "soak exit $?"; tail -n 25 "$OUT/soak-all-cuda-core.txt"
  cp /tmp/ab-soak/summary.json "$OUT/soak-all-cuda-core-summary.json" 2>/dev/null
  ;;
core-ab-percall)
  # issue 25, more samples of the one case whose two-run medians differed (per-call: one CUDA
  #   context per invocation, ~6/s machine-wide): soak_overhead's per-call case alone, base and
  #   this alternated over ${AB_PAIRS:-5} pairs (order flips each pair). The base tree gets this
  #   tree's bench script (the same measurement; it drives its own tree's `python -m stress`)
  install
  nvidia-smi -L
  B=$PWD/.cache/hgpu/base; H=$PWD
  cp bench/soak_overhead.py "$B/bench/soak_overhead.py"
  f="$OUT/soak_overhead-cuda-percall-ab.txt"; : > "$f"
  for r in $(seq 1 "${AB_PAIRS:-5}"); do
    order="base this"; [ $((r % 2)) = 0 ] && order="this base"
    for tree in $order; do
      root=$H; [ "$tree" = base ] && root=$B
      echo "# tree: $tree ($root), pair $r" >> "$f"
      (cd "$root" && PYTHONPATH=/tmp/site:$root timeout 100 python3 bench/soak_overhead.py \
        --target cuda --artifacts "$ART" --procs 8 --rounds 1 --seconds "${AB_SECONDS:-8}" \
        --patterns per-call) >> "$f" 2>&1
      echo "$tree pair $r exit $?"
    done
  done
  cat "$f"
  ;;
matrices-finish)
  T=/tmp/matrices
  for _ in $(seq 1 "${FINISH_WAIT_S:-500}"); do
    [ -f $T/lane-on.done ] && [ -f $T/lane-off.done ] && break; sleep 1
  done
  cat $T/lanes.log
  cp $T/fault_matrix-cuda-on.txt $T/fault_matrix-cuda-off.txt $T/fault_matrix-cuda-on.log \
     $T/fault_matrix-cuda-off.log "$OUT/" 2>/dev/null
  tar czf "$OUT/odd.tgz" -C $T odd-on odd-off 2>/dev/null
  ls -la "$OUT"
  ;;
*)
  echo "usage: $0 start|finish|more|ratios|overhead|latency|matrix-on|matrix-off|exits|truth|truth-finish|joins|matrices|matrices-finish|core-ab|core-ab-percall" >&2
  exit 2
  ;;
esac
