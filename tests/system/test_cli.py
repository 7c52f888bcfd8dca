"""What a user sees of the command line (issue 28, items 5 and 6): every usage error is one
line and exit 2 (click's own included), compile errors name the user's file and line, Ctrl-C
while compiling exits 3 and leaves a run that `report` reads, renamed options still work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.system

BAD_MLIR = """func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = arith.addf %a, %b : tensor<4xf32>
  return %0 : tensor<4xf32>
}
"""


@pytest.mark.parametrize("args,says", [
    (["soak", "--bogus"], "no such option --bogus"),
    (["soak", "--workers", "0"], "'--workers'"),
    (["gate", "--confidence", "high"], "'--confidence'"),
    (["repro"], "Missing argument 'FOLDER'"),
    (["report", "--format", "pdf", "x"], "'--format'"),
    (["nosuch"], "No such command 'nosuch'"),
    (["soak", "--jobs"], "soak: error: Option '--jobs' requires an argument"),  # old name
])
def test_every_usage_error_is_one_line_and_exit_2_clicks_own_included(
        args: list[str], says: str) -> None:
    res = run_cli(*args)
    assert res.rc == 2, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert says in res.stderr and "Usage:" not in res.stderr
    assert "--help" in res.stderr  # where to read more


def test_gate_takes_duration_like_soak_and_budget_still_works() -> None:
    for spelling in ("--duration", "--budget"):
        res = run_cli("gate", spelling, "5s", "-q")
        assert res.rc == 2
        assert "gate needs --max-rate" in res.stderr, res.stderr  # parsed: the next check


def test_a_program_that_does_not_compile_is_one_line_naming_the_users_file_and_line(
        tmp_path: Path) -> None:
    (tmp_path / "bad.mlir").write_text(BAD_MLIR)
    res = run_cli("soak", "-t", "cpu", "-d", "5s", "--mlir", "bad.mlir", "--results",
                  str(tmp_path / "run"), cwd=tmp_path)
    assert res.rc == 2
    last = res.stderr.strip().splitlines()[-1]
    assert "bad.mlir:2:23: error: use of undeclared SSA value name" in last, res.stderr
    # the command to see it in full is this run's own target and file, not a bare `compile`
    assert last.endswith("(`iree-stress compile --verbose --target cpu:generic --mlir bad.mlir` "
                         "shows each in full)"), last
    assert "/src/" not in res.stderr and "iree-stress/" not in last  # not the cache's copy
    assert not (tmp_path / "run").exists()  # a failed start leaves no folder (item 8)


def test_programs_refuses_a_broken_user_file_in_one_line_the_same_as_soaks(tmp_path: Path) -> None:
    """issue 28 item 5: `programs --program bad.mlir` listed a file that does not compile as
    fine; now it is refused, and said as soak says the same error (one line, exit 2)."""
    (tmp_path / "bad.mlir").write_text(BAD_MLIR)
    listed = run_cli("programs", "--program", "bad.mlir", cwd=tmp_path)  # (the old spelling)
    soaked = run_cli("soak", "-t", "cpu", "-d", "5s", "-q", "--mlir", "bad.mlir", "--results",
                     str(tmp_path / "run"), cwd=tmp_path)
    assert (listed.rc, soaked.rc) == (2, 2)
    said = ("iree-stress: error: 1 program(s) failed to compile for cpu:generic: user.bad: "
            "bad.mlir:2:23: error: use of undeclared SSA value name (`iree-stress compile "
            "--verbose --target cpu:generic --mlir bad.mlir` shows each in full)")
    assert (listed.stdout, listed.stderr) == ("", said + "\n"), listed  # nothing listed
    assert soaked.stderr.splitlines() == [said], soaked.stderr
    good = REPO / "stress" / "programs" / "mlir" / "examples" / "scale_shift.mlir"
    res = run_cli("programs", "--mlir", str(good))
    assert res.rc == 0 and "user.scale_shift" in res.stdout


def test_soak_quiet_writes_nothing_to_stderr_on_a_clean_run(tmp_path: Path) -> None:
    """-q: nothing on stderr when nothing goes wrong, the cold compile and the driver check
    included (the summary is stdout's)."""
    res = run_cli("soak", "-t", "cpu", "-w", "1", "--programs", "unary.exp.f32.64x64", "-d",
                  "2s", "-q", "--results", str(tmp_path / "run"),
                  env={"IREE_STRESS_CACHE": str(tmp_path / "cold-cache")})
    assert res.rc == 0, res.stderr
    assert res.stderr == ""
    assert res.stdout.strip().endswith("no failures"), res.stdout


def default_sigint() -> None:
    """Ctrl-C reaches the soak as from a terminal, also when this suite was started with
    SIGINT ignored (a shell's background job): then the soak would never see it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_compiling_exits_3_with_a_run_that_report_reads(tmp_path: Path) -> None:
    env = {**os.environ, "IREE_STRESS_CACHE": str(tmp_path / "cold-cache"),
           "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "stress", "soak", "-t", "cpu", "-d", "5s",
                             "--programs", "binary.*", "--results", str(tmp_path / "run")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=default_sigint)
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # the compile's progress line says it is compiling
        line = proc.stderr.readline()
        seen.append(line)
        if line.startswith("compiling for cpu"):
            break
    assert any("compiling for cpu" in x for x in seen), seen
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, (out, err)
    assert "interrupted by SIGINT while compiling" in out, (out, err)
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(tmp_path) in " ".join(
        p.info["cmdline"] or [])]  # no compiler left running into its cache
    report = run_cli("report", str(tmp_path / "run"))
    assert report.rc == 0, report.stderr
    assert "interrupted" in report.stdout
