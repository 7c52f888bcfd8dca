"""The lifecycle phase of every signature from real faults (issue 39): the fault library
(tests/native/libfault.c) crashes the runtime during the work (a runtime copy while devices are
created, programs loaded and buffers copied), while a device is released (the teardown join)
and after main (an ELF destructor at exit); and an exit whose thread joins a helper spinning at
100% CPU is a busy hang led by the spinning thread, not a blocked one keyed on the join."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.system

PROGRAMS = "unary.*.f32.*"


def fault_soak(run: Path, fault_lib: Path, pattern: str, env: dict[str, str],
               duration: str = "10s") -> dict[str, Any]:
    """A soak under the fault library, then `report --format json` of it."""
    extra = [x for k, v in env.items() for x in ("--env", f"{k}={v}")]
    res = run_cli("soak", "--target", "cpu", "--patterns", pattern, "--programs", PROGRAMS,
                  "--duration", duration, "--teardown-timeout", "2s", "--timeout", "5s",
                  "--workers", "2", "--threads", "1", "-q", "--results", str(run),
                  "--env", f"LD_PRELOAD={fault_lib}", *extra, timeout=400)
    assert res.rc == 1, (res.rc, res.stderr[-2000:])
    rep = run_cli("report", str(run), "--format", "json")
    assert rep.rc == 1, rep.stderr[-2000:]
    return rep.json()  # type: ignore[no-any-return]


def only(rep: dict[str, Any], cls: str) -> dict[str, Any]:
    mine = [s for s in rep["signatures"] if s["class"] == cls]
    assert len(mine) == 1, [s["description"] for s in rep["signatures"]]
    return mine[0]


def phase_words(s: dict[str, Any]) -> str:
    """How the answer's first line says a signature's phases (most failures first)."""
    if len(s["phases"]) == 1:
        return s["phase"] + (f" ({s['phase_detail']})" if s["phase_detail"] else "")
    return " / ".join(f"{p} {n}" for p, n in s["phases"].items())


def in_every_format(run: Path, text: str) -> None:
    """The phase words in the text, markdown and html answers and the JUnit file."""
    for fmt in ("text", "markdown", "html"):
        out = run_cli("report", str(run), "--format", fmt)
        assert text in out.stdout.replace("&#x27;", "'"), (fmt, out.stdout[:3000])
    junit = run.parent / f"{run.name}.xml"
    run_cli("report", str(run), "--junit", str(junit))
    assert text in junit.read_text(), junit.read_text()[:3000]


@pytest.mark.slow
def test_a_crash_during_the_work_is_in_phase_work(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "work"
    rep = fault_soak(run, fault_lib, "per-call",
                     {"IREE_FAULT_WORK": "segv", "IREE_FAULT_WORK_PROB": "0.05"})
    crashes = [s for s in rep["signatures"] if s["class"] == "crash"]
    assert crashes, [s["description"] for s in rep["signatures"]]
    for s in crashes:  # one per step it hit (device-create, module-load, upload): all work
        assert s["phases"] == {"work": s["count"]} and s["phase"] == "work", s
        assert s["frames"][:3] == ["iree_fault_segv", "fire", "memcpy"], s["frames"]
    in_every_format(run, f"crash SIGSEGV in work at {crashes[0]['last_step']}")


@pytest.mark.slow
def test_a_crash_in_the_teardown_join_is_in_phase_device_release(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "release"
    rep = fault_soak(run, fault_lib, "per-call",
                     {"IREE_FAULT_JOIN": "segv", "IREE_FAULT_JOIN_PROB": "0.2"})
    s = only(rep, "crash")
    # the join runs where the last reference to the task executor drops: a device's release,
    #   or the driver's at the worker's end
    assert s["phases"].get("device-release"), s
    assert set(s["phases"]) <= {"device-release", "driver-destroy"}, s
    assert "pthread_join" in s["frames"], s["frames"]
    in_every_format(run, f"crash SIGSEGV in {phase_words(s)} at teardown")


def test_a_crash_in_an_elf_destructor_at_exit_is_in_phase_process_exit_naming_it(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    run = tmp_path / "exit"
    rep = fault_soak(run, fault_lib, "exit-clean",
                     {"IREE_FAULT_EXIT": "segv", "IREE_FAULT_EXIT_PROB": "0.3"}, "8s")
    s = only(rep, "crash")
    assert s["phase"] == "process-exit", s
    assert s["phase_detail"].startswith("ELF destructor of fault_at_exit"), s["phase_detail"]
    summary = next(x for x in __import__("json").loads((run / "summary.json").read_text())
                   ["signatures"] if x["id"] == s["id"])
    assert summary["phase"] == "process-exit"
    in_every_format(run, f"crash SIGSEGV in {phase_words(s)} at teardown")


def test_an_exit_joining_a_spinning_thread_is_busy_led_by_the_spinning_thread(
        tmp_path: Path, fault_lib: Path, cpu_artifacts: dict[str, Path]) -> None:
    """Before issue 39: `blocked`, keyed on `__pthread_clockjoin_ex < ... < _dl_call_fini`."""
    run = tmp_path / "join-spin"
    rep = fault_soak(run, fault_lib, "exit-clean",
                     {"IREE_FAULT_EXIT": "join-spin", "IREE_FAULT_EXIT_PROB": "0.5"}, "8s")
    s = only(rep, "teardown_hang")
    assert s["thread_state"] == "busy", s
    assert s["frames"][:2] == ["iree_fault_spin", "iree_fault_spin_thread"], s["frames"]
    assert s["phase"] == "process-exit", s
    assert s["threads"] == "busy in iree_fault_spin; main thread joining a thread at exit", s
    text = run_cli("report", str(run)).stdout
    assert "threads       busy in iree_fault_spin; main thread joining a thread at exit" in text
