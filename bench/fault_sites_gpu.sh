#!/usr/bin/env bash
# On a lent GPU machine (the device tool, from the checkout's root): iree-run-module on cuda under
# the native engine, its teardown joins segfaulting (tests/native/libfault.c, built here into
# .cache/gpu44/libfault.so.1), evidence budget 1: are the counted crashes' fault sites those of
# the crashes read? Carries .cache/gpu43/wheels (cp312 wheels), .cache/gpu43/cuda (`compile
# --target cuda --export`), .cache/gpu44; writes machine.txt, soak.txt, report.txt, sites.txt,
# leftover.txt under $OUT. Output committed: docs/fault-sites/native-cuda-h100.txt.
set -u
pip install -q --no-index --no-deps --target /tmp/site .cache/gpu43/wheels/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
{ nvidia-smi -L; python3 --version; command -v gdb cuda-gdb; cat /proc/sys/kernel/core_pattern; ulimit -c -H; git log -1 --format=%h 2>/dev/null; } > $OUT/machine.txt 2>&1
timeout 110 python3 -m stress soak --engine native --target cuda --artifacts .cache/gpu43/cuda \
  -n 12 --workers 2 --evidence-budget 1 --patterns native-run --results /tmp/run -q \
  --env LD_PRELOAD=$PWD/.cache/gpu44/libfault.so.1 --env IREE_FAULT_JOIN=segv \
  --env IREE_FAULT_JOIN_CALLER=iree- > $OUT/soak.txt 2>&1
echo "soak rc=$?" >> $OUT/soak.txt
timeout 30 python3 -m stress report /tmp/run > $OUT/report.txt 2>&1
python3 - > $OUT/sites.txt 2>&1 <<'PY'
import sqlite3, json, collections
db = sqlite3.connect('/tmp/run/stress.db')
c = collections.Counter()
for (e,) in db.execute('select evidence from failures'):
    ev = json.loads(e); b = ev.get('evidence_budget', {})
    c[('read' if b.get('full') else 'counted', (ev.get('fault_site') or {}).get('text'), ev.get('stack_source'))] += 1
for (k, site, src), n in sorted(c.items(), key=str): print(f'{n:3d} {k:8s} {site}  [{src}]')
PY
find /tmp/run -name 'core*' -type f | head > $OUT/leftover.txt
tar czf $OUT/run.tgz -C /tmp run --exclude='*.vmfb' 2>/dev/null
