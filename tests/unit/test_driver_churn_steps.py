"""Driver-churn's own driver is destroyed in its journaled step (review of issue 39), even when
no device could be made on it: a crash in that destroy then reads as driver-destroy, not as the
job's work. Fakes stand in for the binding: what is observed is the journal's steps and
whether the driver object was still alive when its release step ended."""

from __future__ import annotations

import weakref
from types import SimpleNamespace
from typing import Any

import pytest

from stress.engine.invocation import Device, InvocationError, JobResult
from stress.engine.journal import Step
from stress.engine.patterns import PATTERNS


class FakeDriver:
    def create_device_by_uri(self, uri: str) -> Any:
        raise RuntimeError(f"no device at {uri}")


class Writer:
    """Records the journal's steps, and at each step's end whether the driver still lived."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, str, bool]] = []
        self.driver: weakref.ref[FakeDriver] | None = None

    def _note(self, what: str, step: Step) -> None:
        alive = self.driver is not None and self.driver() is not None
        self.steps.append((what, step.label, alive))

    def begin(self, step: Step, device: int = 0, aux: int = 0) -> None:
        self._note("begin", step)

    def end(self, step: Step, device: int = 0, aux: int = 0) -> None:
        self._note("end", step)

    def fail(self, step: Step, device: int = 0, status: int = 1) -> None:
        self._note("fail", step)


@pytest.mark.parametrize("name", ["driver-churn", "instance-churn"])
def test_a_driver_without_a_device_is_destroyed_in_its_release_step(name: str) -> None:
    writer = Writer()

    def create_hal_driver(_: str) -> FakeDriver:
        d = FakeDriver()
        writer.driver = weakref.ref(d)
        return d

    b = SimpleNamespace(create_hal_driver=create_hal_driver, VmInstance=object)
    w = SimpleNamespace(b=b, instance=object(), driver_name="fake", uri="fake://0")
    work = SimpleNamespace(result=JobResult(), job=SimpleNamespace(invocations=3),
                           program=SimpleNamespace(name="p"))
    with pytest.raises(InvocationError):
        PATTERNS[name].run(w, SimpleNamespace(writer=writer), work)  # type: ignore[arg-type]
    steps = [(what, step) for what, step, _ in writer.steps]
    assert steps[steps.index(("fail", "device-create")) + 1] == ("begin", "driver-release")
    released = next(alive for what, step, alive in writer.steps
                    if (what, step) == ("end", "gc"))
    assert not released, writer.steps


class FakeProgram:
    def close(self) -> None:
        pass


class WorkingDriver:
    def create_device_by_uri(self, uri: str) -> Any:
        return object()


def test_each_driver_churn_job_makes_its_own_driver_and_destroys_it_in_its_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Not the process's cached driver: every job asks the binding for a new one, and that
    one is gone when the job's gc step ends (the exposure count says one per job; this is
    what backs it)."""
    monkeypatch.setattr(Device, "load", lambda *a, **k: FakeProgram())
    writer = Writer()
    made: list[weakref.ref[WorkingDriver]] = []

    def create_hal_driver(_: str) -> WorkingDriver:
        d = WorkingDriver()
        made.append(weakref.ref(d))
        writer.driver = made[-1]
        return d

    cached = WorkingDriver()
    w = SimpleNamespace(b=SimpleNamespace(create_hal_driver=create_hal_driver),
                        instance=object(), driver=cached, driver_name="fake", uri="fake://0",
                        vm_module=lambda *a: object(), call=lambda *a: None)
    for _ in range(2):
        work = SimpleNamespace(result=JobResult(), job=SimpleNamespace(invocations=2),
                               program=SimpleNamespace(name="p"), inputs=[], expect=None)
        PATTERNS["driver-churn"].run(w, SimpleNamespace(writer=writer), work)  # type: ignore[arg-type]
    assert len(made) == 2 and all(r() is None for r in made)
    gc_ends = [alive for what, step, alive in writer.steps if (what, step) == ("end", "gc")]
    assert gc_ends == [False, False], writer.steps
