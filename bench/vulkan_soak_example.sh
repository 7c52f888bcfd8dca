#!/bin/bash
# The Vulkan lane's session (issue 37), as a user sees it: a 20 s soak of the 64x64 corpus on
# the Vulkan device here (lavapipe in CI), its report, the same report with the known-failures
# file of IREE's default Vulkan target, and one miscompare's evidence folder. Writes
# bench/results/vulkan_soak-lavapipe.txt (or $OUT).
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
iree-stress() { PYTHONPATH="$PWD" "$PY" -m stress "$@"; }  # this checkout's code, as `iree-stress`
R=/tmp/vk-lane; rm -rf $R
O=${OUT:-bench/results/vulkan_soak-lavapipe.txt}
SOAK="soak --target vulkan --programs '*.64x64*' --workers 2 --duration 20s --seed 37 -q --results $R"
{
echo "# bash bench/vulkan_soak_example.sh  (commit $(git rev-parse --short HEAD)$(git status --porcelain --untracked-files=no -- stress bench | grep -q . && echo ' + uncommitted changes'), $(date -u +%F), $(nproc) cores${SHARED:+, $SHARED})"
echo "\$ iree-stress $SOAK"
eval iree-stress "$SOAK" > $R.out 2>&1; echo "(exit $?)"; cat $R.out
echo "\$ iree-stress report $R"
iree-stress report $R | sed -n '1,/^run /p'; echo "(exit ${PIPESTATUS[0]})"
echo "\$ iree-stress report $R --known docs/known/vulkan-default-target.toml"
iree-stress report $R --known docs/known/vulkan-default-target.toml | sed -n '/^ANSWER/,/^run /p'
echo "(exit ${PIPESTATUS[0]})"
F=$(ls -d $R/failures/m001-* | head -1)
echo "\$ ls $F"; ls $F
echo "\$ cat $F/miscompare.txt"; cat $F/miscompare.txt
} > "$O" 2>&1
