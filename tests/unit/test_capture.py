"""What a process's end means (stress/engine/capture.py): clean, a harness error or a
failure, and the Ending the session applies (which jobs run again, what is replaced)."""

from __future__ import annotations

from pathlib import Path

from stress.engine import capture
from stress.engine.jobs import Job
from stress.engine.journal import JournalWriter, Step
from stress.store.db import RunStore
from tests.helpers.engine import recorder
from tests.helpers.procs import ended_handle


def test_a_worker_dead_of_a_python_exception_before_hello_is_told_apart_from_a_crash(
        tmp_path: Path) -> None:
    """A stack whose workers cannot import (issue 11: an infrastructure failure, not a
    runtime crash) dies with a traceback and status 1 before its hello."""
    h = ended_handle(tmp_path, tmp_path / "j.bin")
    h.stderr_path.write_text("Traceback (most recent call last):\n  File \"x\", line 1\n"
                             "ModuleNotFoundError: No module named 'iree'\n")
    assert capture._python_exception(h) == "ModuleNotFoundError: No module named 'iree'"
    h.stderr_path.write_text("Fatal Python error: Segmentation fault\n\nCurrent thread 0x1\n")
    assert capture._python_exception(h) == ""
    h.close()


def _exit(rc: int, said_bye: bool = True, said_hello: bool = True, expected_rc: int = 0,
          exec_group: bool = False, python_exception: str = "") -> capture.ExitKind:
    return capture.classify_exit(rc, said_bye=said_bye, said_hello=said_hello,
                                 expected_rc=expected_rc, exec_group=exec_group,
                                 python_exception=python_exception)[0]


def test_an_exit_is_clean_only_with_a_bye_and_the_status_its_job_expects() -> None:
    from stress.engine.forkclient import RETURNCODE_LOST

    assert _exit(0) is capture.ExitKind.CLEAN
    assert _exit(-15, expected_rc=-15) is capture.ExitKind.CLEAN  # exit-sigterm's own end
    assert _exit(0, said_bye=False) is capture.ExitKind.FAILURE  # exited 0 before its jobs
    assert _exit(-11) is capture.ExitKind.FAILURE  # a crash in its exit: the status wins
    assert _exit(RETURNCODE_LOST) is capture.ExitKind.HARNESS


def test_harness_exit_codes_are_ours_except_for_a_users_command() -> None:
    assert capture.classify_exit(70, said_bye=False, said_hello=True, expected_rc=0,
                                 exec_group=False, python_exception="") == \
        (capture.ExitKind.HARNESS, "failed in iree-stress's own code")
    assert _exit(71, said_bye=False) is capture.ExitKind.HARNESS
    assert _exit(70, said_bye=False, exec_group=True) is capture.ExitKind.FAILURE
    assert _exit(71, exec_group=True) is capture.ExitKind.FAILURE


def test_a_worker_that_dies_of_an_import_error_before_its_hello_could_not_start() -> None:
    err = "ModuleNotFoundError: No module named 'iree'"
    kind, why = capture.classify_exit(1, said_bye=False, said_hello=False, expected_rc=0,
                                      exec_group=False, python_exception=err)
    assert kind is capture.ExitKind.HARNESS and why == f"could not start: {err}"
    assert _exit(1, said_bye=False, said_hello=True,
                 python_exception=err) is capture.ExitKind.FAILURE  # after hello: the run's
    assert _exit(1, said_bye=False, said_hello=False) is capture.ExitKind.FAILURE


def _jobs(*indices: int) -> dict[int, Job]:
    return {i: Job(i, "p", "shared", i, 10) for i in indices}


def test_a_dead_workers_jobs_run_again_but_the_one_that_failed(tmp_path: Path) -> None:
    h = ended_handle(tmp_path, tmp_path / "none.bin")
    h.outstanding = _jobs(1, 2, 3)
    assert [j.index for j in capture.rerun_jobs(h, h.outstanding[2])] == [1, 3]
    assert not h.outstanding  # taken off the dead worker
    h.close()


def test_a_failure_pinned_on_no_job_reruns_none_of_the_jobs_the_worker_had_begun(
        tmp_path: Path) -> None:
    """One of the begun jobs caused it: rerunning it elsewhere would spread the blame."""
    path = tmp_path / "j.bin"
    w = JournalWriter(path, slots=2)
    slot = w.acquire()
    slot.job = 1
    slot.begin(Step.INVOKE)
    h = ended_handle(tmp_path, path)
    h.outstanding = _jobs(1, 2, 3)
    assert [j.index for j in capture.rerun_jobs(h, None)] == [2, 3]
    h.close()


def test_a_job_process_that_cannot_start_is_a_harness_error_counted_in_the_restart_window(
        tmp_path: Path) -> None:
    """Status 70 (our own code failed in the worker): its job runs again, nothing is
    recorded as a failure, and a one-job process counts against --max-worker-restarts."""
    store = RunStore(tmp_path)
    rec = recorder(tmp_path, store)
    h = ended_handle(tmp_path, tmp_path / "none.bin", ephemeral=True)
    h.outstanding = _jobs(4)
    h.db_row = store.add_worker("r1", 0, 0, h.pid)
    ending = capture.on_exit(rec, h, capture.EXIT_HARNESS, 0)
    assert [j.index for j in ending.rerun] == [4] and ending.replace and ending.count_restart
    assert "failed in iree-stress's own code" in ending.harness_error
    assert ending.failed is None and rec.tally.failure_count == 0
    h.close()
    store.close()


def test_a_crash_is_recorded_once_pinned_on_its_job_which_does_not_run_again(
        tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    rec = recorder(tmp_path, store)
    h = ended_handle(tmp_path, tmp_path / "none.bin", ephemeral=True)
    h.outstanding = _jobs(4)
    h.db_row = store.add_worker("r1", 0, 0, h.pid)
    h.hello_at = 1.0
    ending = capture.on_exit(rec, h, 3, 0)  # exited with status 3 while running its job
    assert ending.rerun == [] and ending.replace and not ending.count_restart
    assert ending.failed is not None and ending.failed.job is not None
    assert ending.failed.job.index == 4 and ending.failed.classes == ("crash",)
    assert rec.tally.failures_by_class["crash"] == 1 and rec.folders == 1
    h.close()
    store.close()
