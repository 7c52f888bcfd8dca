"""iree-stress compile: whole corpus for cpu and rocm, warm cache, bad MLIR (issue #2)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.helpers import heartbeat

pytestmark = pytest.mark.system


def counts(stdout: str) -> tuple[int, int, int]:
    m = re.search(r"(\d+) compiled, (\d+) cached, (\d+) failed", stdout)
    assert m, stdout
    return int(m[1]), int(m[2]), int(m[3])


@pytest.mark.parametrize("target", ["cpu", "rocm"])
def test_whole_corpus_compiles_and_a_second_run_compiles_nothing(
        cache_dir: Path, target: str, pytestconfig: pytest.Config) -> None:
    # a cold compile of the corpus takes minutes: its progress line goes to the terminal, past
    #   pytest's capture (the first `dev.py test` on a fresh clone was silent here for 106 s,
    #   bench/results/quickstart_latency.txt at 9bdd964)
    with heartbeat.live(pytestconfig) as stream:
        stream.own_line()
        first = run_cli("compile", "--target", target, "-j", "2", stderr_shown=True)
    assert first.rc == 0  # (what went wrong is on the terminal, above)
    compiled, cached, failed = counts(first.stdout)
    assert compiled + cached >= 60 and failed == 0
    second = run_cli("compile", "--target", target)
    assert second.rc == 0
    assert counts(second.stdout) == (0, compiled + cached, 0)


def test_a_program_that_does_not_compile_is_one_line_naming_the_users_file_and_line(
        tmp_path: Path) -> None:
    """issue 28 item 5: `compile --mlir bad.mlir` printed five lines (the diagnostics with
    the compiler's caret, its whole command line through the cache's copy of the file, the
    cache's path); soak says it in one line and exit 2. --verbose shows the rest."""
    (tmp_path / "bad.mlir").write_text(
        "func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %0 = arith.addf %a, %nope : tensor<4xf32>\n  return %0 : tensor<4xf32>\n}\n")
    env = {"IREE_STRESS_CACHE": str(tmp_path / "cache")}
    args = ["compile", "--target", "cpu", "--mlir", "bad.mlir", "--programs", "unary.abs.f32.*"]
    said = ("iree-stress: error: 1 program(s) failed to compile for cpu:generic: user.bad: "
            "bad.mlir:2:23: error: use of undeclared SSA value name (`iree-stress compile "
            "--verbose --target cpu:generic --programs 'unary.abs.f32.*' --mlir bad.mlir` "
            "shows each in full)")
    quiet = run_cli(*args, "-q", env=env, cwd=tmp_path)
    assert (quiet.rc, quiet.stdout, quiet.stderr.splitlines()) == (2, "", [said]), quiet
    shown = run_cli(*args, env=env, cwd=tmp_path)  # (its progress lines, then the error)
    assert shown.rc == 2 and shown.stderr.splitlines()[-1] == said, shown.stderr
    assert counts(shown.stdout)[2] == 1, shown.stdout  # the summary, the failure counted
    assert "argv" not in shown.stderr and str(tmp_path / "cache") not in shown.stderr
    verbose = run_cli(*args, "--verbose", env=env, cwd=tmp_path)
    assert verbose.rc == 2 and verbose.stderr.splitlines()[-1] == said
    assert "argv: " in verbose.stderr and "--iree-hal-target-device=local" in verbose.stderr
    assert "Traceback" not in quiet.stderr + shown.stderr + verbose.stderr
    rest = run_cli("compile", "--target", "cpu", "--programs", "unary.abs.f32.*", env=env)
    compiled, cached, _ = counts(rest.stdout)  # the others compiled beside the bad one
    assert rest.rc == 0 and compiled == 0 and cached > 0, rest.stdout


def test_concurrent_compiles_into_one_cache_never_leave_a_torn_file(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    code = ("import sys; from pathlib import Path; from stress.programs import corpus, targets;"
            "from stress.programs.cache import ArtifactCache;"
            "r = ArtifactCache(Path(sys.argv[1])).compile_all(corpus.select(['unary.exp.*',"
            "'binary.add.f32.*']), targets.parse('cpu'), jobs=1); sys.exit(len(r.errors))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(cache)]) for _ in range(2)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    from iree.runtime import _binding as b

    vmfbs = list(cache.rglob("*.vmfb"))
    from stress.programs import corpus

    expected = len(corpus.select(["unary.exp.*", "binary.add.f32.*"]))
    assert len(vmfbs) == expected and not list(cache.rglob("*.tmp"))
    instance = b.VmInstance()
    for f in vmfbs:
        assert "main" in b.VmModule.copy_buffer(instance, f.read_bytes()).function_names


def test_compile_errors_are_one_line_and_exit_2() -> None:
    for args, message in ((["--target", "tpu"], "unknown target 'tpu'"),
                          (["--programs", "zzz.*"], "no corpus program matches 'zzz.*'"),
                          (["--cache-dir", "/proc/nope"], "is not writable")):
        res = run_cli("compile", *args)
        assert res.rc == 2 and message in res.stderr and "Traceback" not in res.stderr
    listing = run_cli("programs", "--kind", "nosuchkind")
    assert listing.rc == 2 and "no program matches" in listing.stderr


def test_compile_export_with_a_failure_exports_what_compiled_and_still_exits_2_naming_each(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """Compile here, soak elsewhere (docs/soak.md): `compile --export DIR` with a broken user
    file among the programs exported nothing after 678ab95; what compiled goes to DIR as
    before, the summary counts the failures, and the one-line error names every program that
    failed and the command that shows each (exit 2)."""
    bad = ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
           "  return %nope : tensor<4xf32>\n}\n")
    (tmp_path / "bad.mlir").write_text(bad)
    (tmp_path / "worse.mlir").write_text(bad)
    res = run_cli("compile", "-t", "cpu", "--programs", "unary.abs.f32.*", "--mlir", "bad.mlir",
                  "--mlir", "worse.mlir", "--export", "out", cwd=tmp_path)
    assert res.rc == 2, res.stderr
    good = sorted(n for n in cpu_artifacts if n.startswith("unary.abs.f32."))
    assert good and counts(res.stdout) == (0, len(good), 2), res.stdout
    manifest = json.loads((tmp_path / "out" / "artifacts.json").read_text())
    assert sorted(manifest["programs"]) == good
    assert all((tmp_path / "out" / e["file"]).is_file() for e in manifest["programs"].values())
    line = res.stderr.splitlines()[-1]
    assert line.startswith("iree-stress: error: 2 program(s) failed to compile for cpu:generic: "
                           "user.bad: bad.mlir:2:10: error: "), line
    assert "; and 1 more: user.worse (`iree-stress compile --verbose --target cpu:generic " \
           "--programs 'unary.abs.f32.*' --mlir bad.mlir --mlir worse.mlir` shows each in " \
           "full)" in line, line
