"""One repro story (issue 28, item 7): a python-engine failure's repro.sh runs `iree-stress
repro` on its own folder, like the exec and native engines' do; the reruns land under the
failure folder (not a results/ folder wherever the script runs); the answer says a rate; the
artifact cache is the one soak uses (XDG_CACHE_HOME without IREE_STRESS_CACHE)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

pytestmark = pytest.mark.system


def test_a_python_engine_failures_repro_sh_reruns_its_job_with_iree_stress_repro(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "run"
    res = run_cli("soak", "-t", "cpu", "-w", "1", "--threads", "1", "--programs",
                  "unary.exp.f32.64x64", "--patterns", "shared", "--inject", "segv@invoke:0.5",
                  "--max-failures", "1", "-d", "30s", "-q", "--results", str(run))
    assert res.rc == 1, res.stderr[-2000:]
    folder = next((run / "failures").iterdir())
    script = (folder / "repro.sh").read_text()
    assert "-m stress repro" in script and "soak" not in script.splitlines()[-1]
    # issue 36 item 12: no `iree-stress` on PATH, no PYTHONPATH (was "exec: iree-stress: not
    #   found"): the script names the interpreter that made the run
    env = {k: v for k, v in os.environ.items() if k not in ("IREE_STRESS_CACHE", "PYTHONPATH")}
    env.update(PATH="/usr/bin:/bin", XDG_CACHE_HOME=str(tmp_path / "xdg"))
    rerun = subprocess.run(["sh", str(folder / "repro.sh"), "--times", "2", "-q"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert rerun.returncode == 1, rerun.stderr[-3000:]  # it crashed again
    assert "crash again in 2/2 runs: rate 100%" in rerun.stdout
    assert not (tmp_path / "results").exists() and not (folder / "results").exists()
    reruns = list(folder.glob("repro-*"))
    assert len(reruns) == 1 and (reruns[0] / "stress.db").is_file()
    # what the reruns tested comes first, and its rerun line is this repro, not a soak
    #   (before: no header, and the reruns' store said `rerun: iree-stress soak`)
    head = rerun.stdout.split("\n\n", 1)[0].splitlines()
    assert head[0].startswith("iree-stress: ") and head[1].startswith("runtime: "), head
    again = f"rerun: iree-stress repro {folder.resolve()} --times 2"
    assert head[-1] == again, head
    report = run_cli("report", str(reruns[0]))
    assert again in report.stdout.splitlines(), report.stdout[:2000]
    assert list((tmp_path / "xdg" / "iree-stress" / "vmfb").glob("*/*.vmfb"))  # soak's cache


def test_a_repro_stopped_by_ctrl_c_before_it_failed_again_exits_3_and_says_so(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """Ctrl-C anywhere exits 3 (issue 28 item 5): a repro cut short with no failure seen is
    not "does not reproduce" (before: exit 0, "crash again in 0/52 runs: rate 0%" for 500
    asked, no word of the interruption)."""
    run = tmp_path / "run"
    res = run_cli("soak", "-t", "cpu", "-w", "1", "--threads", "1", "--programs",
                  "unary.exp.f32.64x64", "--patterns", "per-call", "--inject",
                  "segv@invoke:0.5", "--max-failures", "1", "-d", "30s", "-q",
                  "--results", str(run))
    assert res.rc == 1, res.stderr[-2000:]
    folder = next((run / "failures").iterdir())
    db = sqlite3.connect(run / "stress.db")  # the job no longer fails when rerun
    (run_id, config), = db.execute("SELECT run_id, config FROM runs").fetchall()
    db.execute("UPDATE runs SET config = ? WHERE run_id = ?",
               (json.dumps({**json.loads(config), "inject": []}), run_id))
    db.commit()
    db.close()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "stress", "repro", str(folder), "--times",
                             "100000", "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not _reruns_stored(folder):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, (out, err[-2000:])
    line = next(x for x in out.splitlines() if " again in " in x)
    assert "crash again in 0/" in line, out
    assert "interrupted after " in out and " of 100000 runs" in out, out


def _reruns_stored(folder: Path) -> bool:
    """A rerun job of `folder`'s repro has finished and is in its store."""
    for db_path in folder.glob("repro-*/stress.db"):
        try:
            db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=1)
            n = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
            db.close()
        except sqlite3.Error:
            continue
        if n:
            return True
    return False


_VARIANTS = '''
import ctypes, os
from pathlib import Path

# every other run aborts instead of segfaulting: a crash of the same class, another mode
runs = Path("runs.txt")
n = len(runs.read_text().splitlines()) if runs.exists() else 0
runs.write_text("run\\n" * (n + 1))
if n % 2:
    os.abort()
ctypes.string_at(0)
'''


def test_repro_counts_the_same_signature_and_lists_the_variants_it_saw(tmp_path: Path) -> None:
    """Issue 36 item 4: the runs that failed again *the same way* (its signature, not its
    class), compared with that signature's rate; another variant is listed, not counted
    (before: "crash again in 4/4 runs", two of them aborts)."""
    proj, run = tmp_path / "proj", tmp_path / "run"
    proj.mkdir()
    (proj / "variants.py").write_text(_VARIANTS)
    no_cores = ("sh", "-c", 'ulimit -c 0 && exec "$@"', "sh")  # the dump's top keys each
    res = run_cli("soak", "--engine", "exec", "-n", "1", "-q", "--results", str(run), "--",
                  sys.executable, "variants.py", cwd=proj, prefix=no_cores, timeout=300)
    assert res.rc == 1, res.stderr[-2000:]
    folder = next((run / "failures").iterdir())
    rerun = run_cli("repro", str(folder), "--times", "4", "-q", cwd=proj, prefix=no_cores,
                    timeout=300)
    assert rerun.rc == 1, rerun.stderr[-3000:]
    assert "crash again in 2/4 runs: rate 50%" in rerun.stdout, rerun.stdout
    assert "counted: the same signature" in rerun.stdout and "SIGSEGV" in rerun.stdout
    variant = [x for x in rerun.stdout.splitlines() if "another variant in 2/4 runs" in x]
    assert len(variant) == 1 and "SIGABRT" in variant[0], rerun.stdout
