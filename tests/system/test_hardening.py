"""A hostile runtime (issue 8): one that segfaults or stalls inside its own teardown, as in the
fusilli incident, built by the tests as an LD_PRELOAD library (tests/native/libfault.c). The
tool must test such a stack, not refuse it; end on time; and keep every piece of evidence."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stress.engine.journal import JournalReader, Step
from stress.store import db
from tests.conftest import REPO, TEST_CACHE, run_cli
from tests.helpers.waits import stored_jobs, wait_until

pytestmark = pytest.mark.system

PROGRAMS = "unary.*.f32.*,binary.add.*.2x16x64x64+1x16x1x1"


def fault_env(lib: Path, count_file: Path, **modes: str) -> list[str]:
    args = ["--env", f"LD_PRELOAD={lib}", "--env", f"IREE_FAULT_COUNT_FILE={count_file}"]
    for key, value in modes.items():
        args += ["--env", f"IREE_FAULT_{key.upper()}={value}"]
    return args


def fired(count_file: Path) -> list[tuple[str, str, int]]:
    """Ground truth from the library itself: (where, mode, pid) per fault that fired."""
    if not count_file.exists():
        return []
    out = []
    for line in count_file.read_text().splitlines():
        where, mode, pid = line.split()
        out.append((where, mode, int(pid)))
    return out


def failure_rows(run: Path) -> list[dict]:  # type: ignore[type-arg]
    conn = db.connect(run / db.DB_NAME, readonly=True)
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM failures ORDER BY id")]
    finally:
        conn.close()


def test_a_runtime_that_segfaults_in_teardown_is_tested_not_refused(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    """Before: `driver 'local-task' is not usable here: probe exited -11`, exit 2."""
    for attempt in range(2):
        run, count = tmp_path / f"r{attempt}", tmp_path / f"count{attempt}"
        res = run_cli("soak", "--target", "cpu", "--programs", PROGRAMS, "--duration", "5s",
                      "--workers", "2", "--json", "-q", "--results", str(run),
                      *fault_env(fault_lib, count, join="segv", join_prob="0.3"))
        assert res.rc == 1, (res.rc, res.stderr[-2000:])
        s = res.json()
        assert s["jobs"] > 0 and s["failures"]["crash"] >= 1
        crashes = [f for f in failure_rows(run) if f["class"] == "crash"]
        # every crash is in a release step or the worker's exit, with the native frame that
        # faulted, read post mortem from its core
        for f in crashes:
            assert f["last_step"] in ("device-release", "driver-release", "worker-exit"), f
            ev = json.loads(f["evidence"])
            assert ev["stack_source"] == "core+gdb", ev
            assert ev["crash_frames"][0] == "iree_fault_segv", ev
            assert f["artifacts"] and "iree_fault_segv" in \
                Path(f["artifacts"], "stacks.txt").read_text()
        # no core is left behind (they are large)
        assert not list((run / "cores").rglob("core*"))


def test_a_runtime_that_stalls_in_teardown_ends_in_time_with_every_stall_recorded(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    """Before: a stall in the facts step (no deadline) left the parent ticking forever."""
    run, count = tmp_path / "r", tmp_path / "count"
    duration, timeout, teardown = 6.0, 2.0, 2.0
    t0 = time.monotonic()
    res = run_cli("soak", "--target", "cpu", "--programs", PROGRAMS, "--duration",
                  f"{duration:g}s", "--timeout", f"{timeout:g}s", "--teardown-timeout",
                  f"{teardown:g}s", "--workers", "2", "--json", "-q", "--results", str(run),
                  *fault_env(fault_lib, count, join="block", join_prob="0.05"), timeout=300)
    wall = time.monotonic() - t0
    assert res.rc == 1, (res.rc, res.stderr[-2000:])
    # duration + deadlines + evidence (bounded ~15 s per batch of stuck workers) + start-up
    assert wall < duration + timeout + teardown + 60, wall
    s = res.json()
    rows = failure_rows(run)
    stalled = {pid for where, mode, pid in fired(count) if mode == "block"}
    worker_pids = {r["pid"] for r in rows if r["pid"]}
    hung = [r for r in rows if r["class"] in ("hang", "teardown_hang")]
    assert hung and s["failures"]["crash"] == 0
    conn = db.connect(run / db.DB_NAME, readonly=True)
    workers = {r[0] for r in conn.execute("SELECT pid FROM workers")}
    conn.close()
    # every worker process where the runtime stalled has its failure recorded
    assert stalled & workers <= worker_pids, (stalled, worker_pids)
    for r in hung:
        stacks = Path(r["artifacts"], "stacks.txt").read_text()
        assert "iree_fault_block" in stacks, r["artifacts"]  # the stuck native frame


def test_errors_never_take_the_evidence_folders_of_later_crashes(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """Before: errors counted toward the 200 evidence folders, so after a burst of errors
    (1,736 in 2 minutes on the H200) every later crash lost its folder."""
    res = run_cli("soak", "--target", "cpu", "--patterns", "shared", "--programs",
                  "unary.abs.f32.*", "--workers", "1", "--threads", "2", "--duration", "4s",
                  "--inject", "raise@invoke:1", "--inject", "segv@worker-exit:1", "--json",
                  "-q", "--results", str(tmp_path / "r"))
    assert res.rc == 1, res.stderr[-2000:]
    s = res.json()
    assert s["failures"]["error"] > 200 and s["failures"]["crash"] >= 1
    crashes = [f for f in failure_rows(tmp_path / "r") if f["class"] == "crash"]
    assert crashes and all(f["artifacts"] for f in crashes)
    assert all(Path(f["artifacts"], "stacks.txt").exists() for f in crashes)


def test_an_interrupted_run_without_failures_is_inconclusive_exit_3(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """Before: an interrupted run with no failures exited 0 (exit 3 was never produced)."""
    run = tmp_path / "r"
    env = {**os.environ, "IREE_STRESS_CACHE": str(TEST_CACHE)}
    proc = subprocess.Popen([sys.executable, "-m", "stress", "soak", "--target", "cpu",
                             "--duration", "60s", "--workers", "2", "--programs", PROGRAMS,
                             "--results", str(run), "-q"], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # interrupted mid-soak: once the session has stored a finished job
    assert wait_until(lambda: stored_jobs(run) >= 1, 90), "no job stored within 90 s"
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # a second Ctrl-C while it shuts down: still no traceback
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, (proc.returncode, err[-2000:])
    assert "Traceback" not in err
    s = json.loads((run / "summary.json").read_text())
    assert s["status"] == "interrupted" and "interrupted by SIGINT" in s["stop_reason"]


def test_a_worker_whose_command_reader_dies_ends_as_a_harness_error(
        tmp_path: Path, cpu_artifacts: dict[str, Path]) -> None:
    """Before: if the stdin reader thread died, the job threads waited forever."""
    name = next(n for n in cpu_artifacts if n.startswith("unary.abs.f32"))
    from stress.programs import corpus

    prog = next(p for p in corpus.corpus() if p.name == name)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "driver": "local-task", "device_uri": "local-task", "threads": 2, "seed": 1,
        "inject": [], "programs": {name: {"program": prog.to_dict(),
                                          "vmfb": str(cpu_artifacts[name])}}}))
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "stress.engine.worker", "--config",
                             str(config), "--worker-id", "0", "--journal",
                             str(tmp_path / "j.bin"), "--msg-fd", str(write_fd)],
                            stdin=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=[write_fd],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    os.close(write_fd)
    assert proc.stdin is not None
    proc.stdin.write(b"this is not a command\n")
    proc.stdin.flush()
    try:
        rc = proc.wait(timeout=60)
    finally:
        proc.kill()
        os.close(read_fd)
    assert rc == 70  # EXIT_HARNESS: our own code failed, not the runtime
    assert proc.stderr is not None and b"JSONDecodeError" in proc.stderr.read()
    reader = JournalReader(tmp_path / "j.bin")
    # the worker still tore down in order and reached its exit step
    assert any(e.step is Step.WORKER_EXIT for v in reader.all_slots() for e in v.entries)
    reader.close()


def journal_job_ends(run: Path) -> tuple[dict[int, int], list[int]]:
    """Ground truth from the workers' own journals: job index -> when its JOB step ended
    (CLOCK_MONOTONIC ns, comparable with ours), and the pid of every worker that ran."""
    ends: dict[int, int] = {}
    pids = []
    for f in (run / "journal").glob("*.bin"):
        try:
            reader = JournalReader(f)
        except (OSError, ValueError):
            continue
        pids.append(reader.pid)
        for view in reader.all_slots():
            for e in view.entries:
                if e.step is Step.JOB and e.phase.name == "END":
                    ends[e.job] = e.ts_ns
        reader.close()
    return ends, pids


@pytest.mark.parametrize("kill_after_s", [1.3, 3.7])
def test_a_sigkilled_parent_leaves_no_worker_and_a_store_with_every_job_older_than_a_second(
        tmp_path: Path, kill_after_s: float, cpu_artifacts: dict[str, Path]) -> None:
    """Before: job rows were committed in batches of 200 with no time flush, so a SIGKILLed
    run lost up to 199 healthy rows while its failures (committed at once) survived."""
    run = tmp_path / "r"
    env = {**os.environ, "IREE_STRESS_CACHE": str(TEST_CACHE)}
    proc = subprocess.Popen([sys.executable, "-m", "stress", "soak", "--target", "cpu",
                             "--duration", "60s", "--workers", "2", "--programs", PROGRAMS,
                             "--results", str(run), "-q"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and stored_jobs(run) < 20:
        time.sleep(0.1)
    # the journals are rings (a slot keeps its last ~80 invocations): read them every 50 ms
    # until the kill, so that every job end is seen before it is overwritten
    ends: dict[int, int] = {}
    pids: set[int] = set()
    stop = time.monotonic() + kill_after_s
    while time.monotonic() < stop:
        seen, ran = journal_job_ends(run)
        ends.update(seen)
        pids.update(ran)
        time.sleep(0.05)
    killed_ns = time.monotonic_ns()
    proc.kill()
    proc.wait(timeout=10)
    seen, ran = journal_job_ends(run)
    ends.update(seen)
    pids.update(ran)
    assert ends and pids
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    assert not [p for p in pids if _alive(p)], "a worker outlived its SIGKILLed parent"
    conn = db.connect(run / db.DB_NAME, readonly=True)
    stored = {r[0] for r in conn.execute("SELECT job_index FROM jobs")}
    conn.close()
    due = {j for j, t in ends.items() if killed_ns - t > 1_000_000_000}
    assert due, "no job ended a second before the kill: the test proves nothing"
    assert due <= stored, f"{len(due - stored)} of {len(due)} jobs older than 1 s are missing"
    rep = run_cli("report", str(run), "--format", "json")
    assert rep.rc in (0, 1) and rep.json()["runs"][0]["jobs"] >= len(due)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
