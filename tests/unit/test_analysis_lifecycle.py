"""The lifecycle phase of a failure (issue 39, analysis/lifecycle.py over siglists/phases.txt):
the journal step says it unless the failing thread's frames do."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.analysis import lifecycle
from stress.analysis.lifecycle import Phase
from stress.stacktext import Frame


def frames(*spec: tuple[str, str]) -> list[Frame]:
    return [Frame(fn, lib) for fn, lib in spec]


LD = "ld-linux-x86-64.so"


@pytest.mark.parametrize(("step", "phase"), [
    ("invoke", Phase.WORK), ("upload", Phase.WORK), ("device-create", Phase.WORK),
    ("device-release", Phase.DEVICE_RELEASE), ("driver-release", Phase.DRIVER_DESTROY),
    ("worker-exit", Phase.PROCESS_EXIT), (None, Phase.WORK), ("run", Phase.WORK)])
def test_without_telling_frames_the_step_says_the_phase(step: str | None, phase: Phase) -> None:
    assert lifecycle.phase_of(step, [frames(("iree_fault_segv", "libfault.so"))]) == (phase, "")


def test_an_elf_destructor_at_exit_is_process_exit_naming_its_library() -> None:
    th = frames(("iree_fault_segv", "libfault.so"), ("fault_at_exit", "libfault.so"),
                ("_dl_call_fini", LD), ("_dl_fini", LD), ("__run_exit_handlers", "libc.so"),
                ("exit", "libc.so"))
    assert lifecycle.phase_of("device-release", [th]) == (
        Phase.PROCESS_EXIT, "ELF destructor of libfault.so")


def test_an_atexit_handler_is_process_exit_in_its_library() -> None:
    th = frames(("hipDeviceReset", "libamdhip64.so"), ("cleanup", "libuser.so"),
                ("__run_exit_handlers", "libc.so"), ("exit", "libc.so"))
    assert lifecycle.phase_of(None, [th]) == (Phase.PROCESS_EXIT, "exit handler in libuser.so")


def test_a_dlclose_mid_process_is_driver_destroy_even_through_a_library_fini() -> None:
    th = frames(("??", "libhsa-runtime64.so"), ("rocr::core::Runtime::Unload()", "libhsa.so"),
                ("_dl_call_fini", LD), ("_dl_close_worker", LD), ("dlclose", "libc.so"),
                ("iree_dynamic_library_release", "_runtime.so"))
    assert lifecycle.phase_of("device-release", [th]) == (
        Phase.DRIVER_DESTROY, "ELF destructor of libhsa.so")


def test_a_dlclose_inside_an_exit_destructor_is_process_exit() -> None:
    th = frames(("crash", "libhsa.so"), ("_dl_call_fini", LD), ("_dl_close_worker", LD),
                ("dlclose", "libc.so"), ("hip_fini", "libamdhip64.so"), ("_dl_call_fini", LD),
                ("_dl_fini", LD), ("__run_exit_handlers", "libc.so"), ("exit", "libc.so"))
    assert lifecycle.phase_of(None, [th])[0] is Phase.PROCESS_EXIT


def test_the_interpreters_finalization_is_process_exit() -> None:
    th = frames(("??", "_runtime.so"), ("Py_DECREF", "python3.11"),
                ("finalize_modules", "python3.11"), ("Py_FinalizeEx", "python3.11"))
    assert lifecycle.phase_of("worker-exit", [th]) == (Phase.PROCESS_EXIT,
                                                       "interpreter finalization")


def test_a_later_thread_speaks_when_the_first_has_no_telling_frame() -> None:
    spinning = frames(("iree_fault_spin", "libfault.so"))
    joining = frames(("__pthread_clockjoin_ex", "libc.so"), ("fault_at_exit", "libfault.so"),
                     ("_dl_call_fini", LD), ("_dl_fini", LD))
    assert lifecycle.phase_of("worker-exit", [spinning, joining]) == (
        Phase.PROCESS_EXIT, "ELF destructor of libfault.so")


def test_a_malformed_rule_names_its_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "phases.txt"
    bad.write_text("step invoke work\nframe nowhere ^exit$ => x\n")
    with pytest.raises(ValueError, match="phases.txt:2"):
        lifecycle.PhaseRules.load(bad)


def test_the_teardown_table_rates_each_phase_per_its_own_exposure() -> None:
    from collections import Counter

    from stress.analysis import teardowns
    from stress.analysis.signatures import Signature, SignatureKey
    from stress.store.counts import Counts, PatternCounts

    crash = Signature(SignatureKey("crash", "SIGSEGV", "teardown", "", ("f",), ""))
    crash.phases = Counter({"driver-destroy": 3, "device-release": 1})
    error = Signature(SignatureKey("miscompare", None, "check", "", (), "m"))
    error.phases = Counter({"work": 5})
    totals = Counts()
    totals.patterns["driver-churn"] = PatternCounts("driver-churn", jobs=30, full_teardowns=20,
                                                    handle_releases=10, driver_teardowns=30)
    rows = {r.phase.value: r for r in teardowns.rows([crash, error], totals)}
    assert set(rows) == {"device-release", "driver-destroy"}  # no process exit was counted
    assert (rows["driver-destroy"].rate.failures, rows["driver-destroy"].rate.units) == (3, 30)
    assert (rows["device-release"].rate.failures, rows["device-release"].rate.units) == (1, 30)
    assert rows["driver-destroy"].cells()[0] == "driver-destroy (per driver destroyed)"


def test_a_failure_at_driver_churns_driver_release_is_rated_per_driver_teardown() -> None:
    from collections import Counter

    from stress.analysis import exposure
    from stress.analysis.rundata import RunData

    row = {"run_id": "r1", "job_index": 3, "pattern": "driver-churn", "pid": 11,
           "last_step": "driver-release", "exposure": None}
    assert exposure.exposure_of(row) is exposure.Exposure.DRIVER_TEARDOWN
    assert exposure.exposure_of({**row, "pattern": "per-call"}) is exposure.Exposure.JOB
    data = RunData([])
    data.jobs = [{"run_id": "r1", "job_index": i, "pattern": p, "pid": 10 + i % 2}
                 for i, p in enumerate(["driver-churn"] * 6 + ["instance-churn"] * 2)]
    data.failures = [row]
    rate = exposure.driver_teardown_rate(data, Counter({("r1", 3): 1}))
    # 6 driver-churn jobs x 1 + 2 instance-churn jobs x 3 (one per chunk); job 3 failed one
    assert (rate.failures, rate.units) == (1, 12)


def test_a_dlclose_during_a_work_step_stays_work() -> None:
    """An executable's library unloaded mid-job is not a driver's destroy (review of issue
    39): during a work step the dlclose frame does not move the phase."""
    th = frames(("iree_fault_segv", "libfault.so"), ("_dl_call_fini", LD),
                ("_dl_close_worker", LD), ("dlclose", "libc.so"),
                ("iree_dynamic_library_release", "_runtime.so"))
    assert lifecycle.phase_of("invoke", [th])[0] is Phase.WORK
    assert lifecycle.phase_of("driver-release", [th])[0] is Phase.DRIVER_DESTROY


@pytest.mark.parametrize("name", ["pthread_exit", "iree_exit_handler_run", "_exit",
                                  "exit_group", "Py_FinalizeExtra", "my_dlclose_wrapper_x"])
def test_a_name_that_only_contains_exit_or_dlclose_leaves_a_work_step_work(name: str) -> None:
    th = frames(("iree_fault_segv", "libfault.so"), (name, "libx.so"))
    assert lifecycle.phase_of("invoke", [th])[0] is Phase.WORK
