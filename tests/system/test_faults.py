"""Fault injection proves the harness (issue #4): every kind x every pattern is detected,
classified and attributed to the injected step; hung workers leave native stacks; no process
survives a run; a SIGKILLed harness leaves a readable store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from stress.engine.journal import JournalReader
from stress.engine.patterns import ALL_PATTERNS
from stress.store import db, summary
from tests.conftest import REPO, TEST_CACHE, run_cli

pytestmark = pytest.mark.system

# kind@step -> (class, signal)
MATRIX = {
    "segv@invoke": ("crash", "SIGSEGV"),
    "abort@invoke": ("crash", "SIGABRT"),
    "kill@invoke": ("crash", "SIGKILL"),
    "exit@invoke": ("crash", None),
    "raise@invoke": ("error", None),
    "corrupt@invoke": ("miscompare", None),
    "hang@invoke": ("hang", None),
    "hang@device-release": ("teardown_hang", None),
}
PROGRAMS = "unary.*.f32.*,binary.add.*.2x16x64x64+1x16x1x1"


def injected_markers(run: Path, per_process: bool = False) -> int:
    """Faults injected, counted by the journals; `per_process`: processes with at least one
    (a stuck process is one hang however many of its threads are stuck: in churn, the job's
    thread and its helper both hang at device-release)."""
    n = 0
    for f in (run / "journal").glob("*.bin"):
        reader = JournalReader(f)
        k = reader.injected()
        n += min(k, 1) if per_process else k
        reader.close()
    return n


def soak_with_fault(run: Path, spec: str, pattern: str, max_failures: int = 4) -> dict:  # type: ignore[type-arg]
    res = run_cli("soak", "--target", "cpu", "--patterns", pattern, "--programs", PROGRAMS,
                  "--inject", f"{spec}:1", "--max-failures", str(max_failures),
                  "--workers", "2", "--threads", "1", "--timeout", "1s",
                  "--teardown-timeout", "1s", "--duration", "30s", "--seed", "3", "--json",
                  "-q", "--results", str(run), timeout=300)
    assert res.rc == 1, (spec, pattern, res.rc, res.stderr[-3000:])
    return res.json()  # type: ignore[no-any-return]


def check_cell(run: Path, spec: str, pattern: str) -> int:
    """Runs one kind x pattern cell; asserts 100% detected, classified, located. Returns the
    number of injected faults (counted by the journal, independently of the failure records)."""
    cls, sig = MATRIX[spec]
    step = spec.split("@")[1]
    s = soak_with_fault(run, spec, pattern)
    injected = injected_markers(run, per_process=cls in ("hang", "teardown_hang"))
    assert injected >= 1, (spec, pattern)
    # 100% detected: every injected fault is one counted failure of the mapped class
    assert s["failures"][cls] == injected, (spec, pattern, s["failures"], injected)
    others = {k: v for k, v in s["failures"].items() if k != cls}
    assert not any(others.values()), (spec, pattern, s["failures"])
    for f in s["failures_detail"]:
        assert f["class"] == cls, (spec, pattern, f)
        assert f["last_step"] == step, (spec, pattern, f)
        assert f["job"]["pattern"] == pattern, (spec, pattern, f)
        if sig:
            assert f["signal"] == sig
        if cls in ("crash", "hang", "teardown_hang"):
            assert f["artifacts"] and Path(f["artifacts"], "repro.sh").exists()
    return injected


@pytest.mark.parametrize("spec", list(MATRIX))
def test_each_fault_kind_is_detected_classified_and_located(
        tmp_path: Path, spec: str, cpu_artifacts: dict[str, Path]) -> None:
    """Fast version: each kind on one pattern (the kinds rotate over all patterns)."""
    pattern = ALL_PATTERNS[list(MATRIX).index(spec) % len(ALL_PATTERNS)]
    check_cell(tmp_path / "r", spec, pattern)


@pytest.mark.slow
def test_full_fault_matrix_every_kind_on_every_pattern_over_200_faults(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    total = 0
    for spec in MATRIX:
        for pattern in ALL_PATTERNS:
            n = check_cell(tmp_path / f"{spec}-{pattern}", spec, pattern)
            print(f"{spec:22s} {pattern:16s} {n:5d} injected, 100% detected")
            total += n
    assert total >= 200


def test_a_hung_workers_folder_holds_native_stacks_showing_the_stuck_frame(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    s = soak_with_fault(tmp_path / "r", "hang@invoke", "shared", max_failures=1)
    folder = Path(s["failures_detail"][0]["artifacts"])
    stacks = (folder / "stacks.txt").read_text()
    assert "pause" in stacks  # the native frame the injected hang blocks in
    assert "py-spy dump --native" in stacks or "gdb" in stacks
    for name in ("telemetry_before.json", "telemetry_after.json", "journal.txt",
                 "stderr.tail", "job.json", "repro.sh"):
        assert (folder / name).exists(), name
    timing = json.loads((folder / "failure.json").read_text())["timing"]
    assert timing["evidence_and_kill_s"] < 10
    # the one hang of this soak: the parent was not busy elsewhere, so its previous deadline
    # scan was about one scan period (0.1 s) before, far less than the 2 s deadline
    assert 0 < timing["scan_gap_s"] < 1.0


def descendants_alive(root_pid: int) -> list[int]:
    return [p.pid for p in psutil.pids() if _is_worker_of(p, root_pid)]


def _is_worker_of(pid: int, root: int) -> bool:
    try:
        cmd = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return "stress.engine.worker" in cmd and str(root) in " ".join(cmd)


def start_soak(run: Path, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "IREE_STRESS_CACHE": str(TEST_CACHE)}
    return subprocess.Popen([sys.executable, "-m", "stress", "soak", "--target", "cpu",
                             "--duration", "60s", "--workers", "2", "--results", str(run),
                             "-q", "--programs", PROGRAMS, *extra], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_for_jobs(run: Path, n: int, limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            conn = db.connect(run / db.DB_NAME, readonly=True)
            done = conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
            conn.close()
            if done >= n:
                return
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError("soak made no progress")


def worker_pids(run: Path) -> list[int]:
    conn = db.connect(run / db.DB_NAME, readonly=True)
    pids = [r[0] for r in conn.execute("SELECT pid FROM workers")]
    conn.close()
    return pids


def alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_no_worker_survives_the_parent_being_interrupted_or_killed(
        tmp_path: Path, how: signal.Signals, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "r"
    proc = start_soak(run, "--inject", "hang@invoke:0.01", "--timeout", "2s")
    wait_for_jobs(run, 20)
    pids = worker_pids(run)
    assert alive(pids)
    proc.send_signal(how)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 10
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert alive(pids) == [], "orphaned worker processes"
    if how is signal.SIGINT:
        assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"


def committed_crashes(run: Path) -> list[str]:
    """Artifact folders of the crashes the store has committed so far (read-only)."""
    try:
        conn = db.connect(run / db.DB_NAME, readonly=True)
        try:
            return [r[0] for r in conn.execute(
                "SELECT artifacts FROM failures WHERE class='crash' ORDER BY id")]
        finally:
            conn.close()
    except Exception:  # not created yet
        return []


def _has_jobs(run: Path) -> bool:
    """At least one finished job is committed (at 2% per invocation most jobs crash: on a fast
    machine three crashes can be committed before any job has finished)."""
    try:
        conn = db.connect(run / db.DB_NAME, readonly=True)
        try:
            return bool(conn.execute("SELECT COUNT(*) FROM jobs").fetchone()[0])
        finally:
            conn.close()
    except Exception:  # not created yet
        return False


def test_a_sigkilled_harness_leaves_a_readable_store_with_every_failure_so_far(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "r"
    proc = start_soak(run, "--inject", "segv@invoke:0.02")
    deadline = time.monotonic() + 90
    before: list[str] = []
    while time.monotonic() < deadline and (len(before) < 3 or not _has_jobs(run)):
        time.sleep(0.2)
        before = committed_crashes(run)
    assert len(before) >= 3
    proc.kill()  # mid-run, possibly in the middle of recording the next failure
    proc.wait(timeout=10)
    assert db.integrity_ok(run / db.DB_NAME)
    assert not (run / "summary.json").exists()
    s = summary.write(run)  # rebuilt from the store alone
    assert s["status"] == "running" and s["invocations"] > 0
    recorded = [f["artifacts"] for f in s["failures_detail"] if f["class"] == "crash"]
    assert recorded[:len(before)] == before  # every failure committed before the kill
    assert all(Path(a, "failure.json").exists() for a in before)
    assert s["failures"]["crash"] >= len(before)
    rep = run_cli("report", str(run), "--format", "json")  # works on a run killed midway
    assert rep.rc == 1 and rep.json()["signatures"][0]["last_step"] == "invoke"


def test_a_fault_carried_in_the_worker_environment_is_injected_and_caught(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """A runtime stack under test can carry a fault: IREE_STRESS_INJECT in the workers' env."""
    res = run_cli("soak", "--target", "cpu", "--patterns", "per-thread", "--programs", PROGRAMS,
                  "--env", "IREE_STRESS_INJECT=segv@readback:1", "--max-failures", "2",
                  # one thread: two threads of one process can both begin a faulting step
                  # before the first SIGSEGV ends the process (two injections, one crash)
                  "--workers", "1", "--threads", "1", "--duration", "30s", "--json", "-q",
                  "--results", str(tmp_path / "r"))
    assert res.rc == 1
    s = res.json()
    assert s["failures"]["crash"] == injected_markers(tmp_path / "r") >= 2
    assert {(f["signal"], f["last_step"]) for f in s["failures_detail"]} == {
        ("SIGSEGV", "readback")}
