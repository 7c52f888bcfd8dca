"""A pattern that says "release" destroys the native device right there (issue #3).

Measured by counting OS threads: a local-task device owns one thread, which its native
destruction joins. The negative control shows the method can fail: the high-level
SystemContext path keeps a reference cycle and the device (and its thread) alive until gc.
"""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any

import pytest

from stress.engine.invocation import Device, Expectation, JobResult
from stress.engine.jobs import Job
from stress.engine.journal import JournalReader, JournalWriter, Step
from stress.engine.patterns import PATTERNS, ThreadState, Work, WorkerContext
from stress.programs import corpus
from stress.programs.program import make_inputs

pytestmark = pytest.mark.system

PROGRAM = "unary.relu.f32.64x64"


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def settled(base: int, limit_s: float = 2.0) -> int:
    """Thread count once exiting Python helper threads are gone: join() returns a moment before
    the OS thread leaves /proc. A device kept alive keeps its thread: that never settles."""
    deadline = time.monotonic() + limit_s
    n = threads()
    while n > base and time.monotonic() < deadline:
        time.sleep(0.01)
        n = threads()
    return n


@pytest.fixture
def ctx(cpu_artifacts: dict[str, Path], tmp_path: Path) -> Any:
    journal = JournalWriter(tmp_path / "j.bin", slots=8)
    p = corpus.by_name()[PROGRAM]
    w = WorkerContext("local-task", "local-task", journal, {PROGRAM: p},
                      {PROGRAM: cpu_artifacts[PROGRAM].read_bytes()})
    writer = journal.acquire()
    w.start(writer)
    yield w, writer, p, tmp_path / "j.bin"
    w.close(writer)


def test_a_local_task_device_owns_a_thread_that_its_release_joins(ctx: Any) -> None:
    w, writer, _p, _ = ctx
    gc.disable()
    try:
        base = threads()
        dev = Device(w.driver, "local-task", writer)
        assert threads() == base + 1
        dev.release(writer)
        assert threads() == base  # destroyed at release, without any gc pass
    finally:
        gc.enable()


@pytest.mark.parametrize("pattern", ["per-call", "churn", "cross-thread", "instance-churn",
                                     "process-per-job"])
def test_patterns_that_release_leave_no_device_alive(ctx: Any, pattern: str) -> None:
    w, writer, p, jpath = ctx
    gc.disable()  # any device kept alive only by a cycle would show up as an extra thread
    try:
        base = threads()
        job = Job(0, PROGRAM, pattern, 5, 12)
        inputs = make_inputs(p, 5)
        result = JobResult()
        state = ThreadState(writer)
        PATTERNS[pattern].run(w, state, Work(job, p, inputs, Expectation(p, 5, inputs), result))
        assert result.ok == result.invocations > 0
        assert result.devices_created > 1 or pattern in ("cross-thread", "process-per-job")
        assert result.devices_released == result.devices_created
        left = settled(base) - base
        assert left == 0, f"{pattern} left {left} device thread(s) alive"
    finally:
        gc.enable()
    entries = [e for v in JournalReader(jpath).all_slots() for e in v.entries]
    creates = {e.device for e in entries if e.step is Step.DEVICE_CREATE and e.phase.name == "END"}
    # every device created is released; churn journals a victim twice (the job thread's handle
    # release, then the helper's drop of the last reference)
    releases = {e.device for e in entries
                if e.step is Step.DEVICE_RELEASE and e.phase.name == "END"}
    assert creates == releases and len(creates) >= result.devices_created


def test_churn_releases_a_device_while_another_thread_still_invokes_on_it(ctx: Any) -> None:
    w, writer, p, jpath = ctx
    job = Job(0, PROGRAM, "churn", 4, 24)
    inputs = make_inputs(p, 4)
    result = JobResult()
    PATTERNS["churn"].run(w, ThreadState(writer),
                          Work(job, p, inputs, Expectation(p, 4, inputs), result))
    views = JournalReader(jpath).all_slots()
    helper_invokes = {e.device for v in views if v.slot != writer.slot for e in v.entries
                      if e.step is Step.INVOKE}
    released_by_main = {e.device for e in JournalReader(jpath).slot(writer.slot).entries
                        if e.step is Step.DEVICE_RELEASE}
    assert helper_invokes & released_by_main


def test_negative_control_system_context_keeps_the_device_until_gc(
        cpu_artifacts: dict[str, Path]) -> None:
    import iree.runtime as rt

    gc.disable()
    try:
        base = threads()
        dev = rt.get_device("local-task", cache=False)
        ctx = rt.SystemContext(config=rt.Config(device=dev))
        ctx.add_vm_module(rt.VmModule.copy_buffer(ctx.instance,
                                                  cpu_artifacts[PROGRAM].read_bytes()))
        grown = threads()
        del dev, ctx
        still = threads()
        gc.collect()
        after = threads()
    finally:
        gc.enable()
    assert grown > base
    assert still == grown, "expected the cycle to keep the device alive until gc"
    assert after < still
