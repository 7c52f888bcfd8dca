#!/bin/bash
# the session of docs/reports.md, rerun; writes docs/reports-example.txt (the soak's terminal
# summary and the text report) and docs/img/report-html.png (the HTML report in Chromium)
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
iree-stress() { PYTHONPATH="$PWD" "$PY" -m stress "$@"; }  # this checkout's code, as `iree-stress`
rm -rf /tmp/cstk; mkdir -p /tmp/cstk
O=docs/reports-example.txt
{
echo "# the session of docs/reports.md, rerun at commit $(git rev-parse --short HEAD), $(date -u +%F), $(nproc) cores${SHARED:+ ($SHARED)}"
echo '$ cc -shared -fPIC -O1 -g -o /tmp/cstk/libfault.so.1 tests/native/libfault.c -ldl -lpthread'
cc -shared -fPIC -O1 -g -o /tmp/cstk/libfault.so.1 tests/native/libfault.c -ldl -lpthread
echo "\$ iree-stress soak --target cpu --programs 'unary.*.f32.*' --workers 3 --threads 2 --duration 12s --seed 9 --env LD_PRELOAD=/tmp/cstk/libfault.so.1 --env IREE_FAULT_JOIN=segv --env IREE_FAULT_JOIN_PROB=0.05 --inject raise@upload:0.01 -q --results /tmp/cstk/demo"
iree-stress soak --target cpu --programs 'unary.*.f32.*' --workers 3 --threads 2 --duration 12s --seed 9 --env LD_PRELOAD=/tmp/cstk/libfault.so.1 --env IREE_FAULT_JOIN=segv --env IREE_FAULT_JOIN_PROB=0.05 --inject raise@upload:0.01 -q --results /tmp/cstk/demo > /tmp/cstk/soak.out 2>&1
echo "(exit $?)"
cat /tmp/cstk/soak.out
printf '[[known]]\nmatch = "error|*|upload|*"\nnote = "injected on purpose (--inject raise@upload)"\n' > /tmp/cstk/known.toml
echo '$ cat /tmp/cstk/known.toml'; cat /tmp/cstk/known.toml
echo '$ iree-stress report /tmp/cstk/demo --known /tmp/cstk/known.toml'
iree-stress report /tmp/cstk/demo --known /tmp/cstk/known.toml
echo "(exit $?)"
echo '$ iree-stress report /tmp/cstk/demo --known /tmp/cstk/known.toml --format html -o /tmp/cstk/report.html'
iree-stress report /tmp/cstk/demo --known /tmp/cstk/known.toml --format html -o /tmp/cstk/report.html
echo "(exit $?)"
echo '$ python bench/report_screenshot.py /tmp/cstk/report.html docs/img/report-html.png'
"$PY" bench/report_screenshot.py /tmp/cstk/report.html docs/img/report-html.png
} > $O 2>&1
