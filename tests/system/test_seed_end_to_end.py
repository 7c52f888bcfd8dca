"""The seed's question in one command (issue 38), end to end on cpu: which nightly broke *our*
test? A local HTTP server on 127.0.0.1 serves an index of TheRock-like nightlies (an S3 XML
listing and an HTML page of links; a +bkc build; the 7.11 -> 10.0 prefix jump), each a tarball
whose libamdhip64 (tests/native/nightlyhip.c, built here) is what a small fusilli-shaped test
program (tests/native/fusilli_like.c: creates the device, runs, exits) loads; from nightly K on
that library segfaults at the program's exit in ~40% of processes, and two consecutive nightlies
are identical builds. `stacks` writes the stacks file from the index; `bisect --engine exec --
PROGRAM` names K, tests the identical pair once and prints what changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers.nightly_build import (
    FIRST_BAD,
    NIGHTLIES,
    SAME,
    cc,
    program,
    simulated_nightlies,
)
from tests.helpers.nightly_index import serve, write_index

pytestmark = pytest.mark.system


def stack_names(path: Path) -> list[str]:
    from stress.runtimes import spec

    return list(spec.load(path))  # in file order


def test_bisect_of_a_fusilli_shaped_program_over_an_index_of_nightlies_names_the_one_that_broke_it(
        tmp_path: Path) -> None:
    if cc() is None:
        pytest.skip("no C compiler")
    nightlies = simulated_nightlies(tmp_path)
    write_index(tmp_path / "index", nightlies)
    exe = program(tmp_path, nightlies[0].library)
    cache = ["--cache-dir", str(tmp_path / "cache")]
    with serve(tmp_path / "index") as base:
        for listing, out in ((f"{base}/bucket/", "s3.toml"), (f"{base}/index.html",
                                                               "stacks.toml")):
            res = run_cli("stacks", "--index", listing, "--from", NIGHTLIES[0], "--to",
                          NIGHTLIES[-1], "-o", str(tmp_path / out), "-q", *cache,
                          timeout=300)
            assert res.rc == 0, res.stdout + res.stderr[-3000:]
            assert stack_names(tmp_path / out) == NIGHTLIES  # by build date, +bkc left out
    stacks = tmp_path / "stacks.toml"
    results = tmp_path / "bisect"
    res = run_cli("bisect", "--stacks", str(stacks), "--good", NIGHTLIES[0], "--bad",
                  NIGHTLIES[-1], "--engine", "exec", "-n", "2", "--workers", "1",
                  "--done-regex", "^All tests passed$", "--seed", "1", "--results",
                  str(results), *cache, "--", str(exe), timeout=900, cwd=tmp_path)
    assert res.rc == 0, res.stdout + res.stderr[-3000:]
    answer = res.stdout.partition("\n\n")[2]
    assert answer.startswith(f"BISECT  found: first bad stack: {FIRST_BAD} (last good: "
                             f"{SAME[1]}); posterior "), res.stdout
    saved = json.loads((results / "bisect.json").read_text())
    assert saved["first_bad"] == FIRST_BAD and saved["confidence"] >= 0.975
    assert f"identical: {SAME[0]} = {SAME[1]}: tested once" in answer
    tested = {p.parent.parent.name for p in results.glob("*/trial-*/summary.json")}
    assert not (set(SAME) <= tested), tested  # the pair ran under one of its names only
    assert FIRST_BAD in tested
    assert f"WHAT CHANGED  {SAME[1]} (last good) -> {FIRST_BAD} (first bad)" in answer
    assert "lib/libamdhip64.so.7 " in answer and "rocm-systems " in answer
    failing = [t for t in (results / "trials").rglob("trial-*.json")
               if json.loads(t.read_text())["failed"]]
    assert failing  # the program's exit crashed under the bad nightlies, really
    for t in failing:  # and only there
        stack = json.loads(t.read_text())["stack"]
        assert NIGHTLIES.index(stack) >= NIGHTLIES.index(FIRST_BAD), stack
