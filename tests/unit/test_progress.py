"""The soak's live line (stress/engine/progress.py): counts say what they count (issue 28)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stress.engine.config import SoakConfig
from stress.engine.progress import Progress
from stress.engine.tally import RunTally
from stress.programs import targets
from stress.ui import Status


@dataclass
class FakeWorker:
    ephemeral: bool


@dataclass
class FakeSession:
    workers: dict[int, FakeWorker]
    tally: RunTally


def session(workers: dict[int, FakeWorker], **counts: Any) -> FakeSession:
    tally = RunTally(started=0.0, soak_started=0.0)
    for name, value in counts.items():
        setattr(tally, name, value)
    return FakeSession(workers, tally)


def progress(s: FakeSession, **cfg: Any) -> Progress:
    config = SoakConfig(target=targets.parse("cpu"), driver="local-task", device_uri="",
                        programs=[], artifacts={}, patterns=["shared"], workers=2, threads=2,
                        seed=1, results_dir=Path("."), **cfg)
    return Progress(config, s.tally, s.workers, Status(True, io.StringIO()))


def test_workers_2_with_one_job_processes_never_reads_as_workers_3() -> None:
    s = session({0: FakeWorker(False), 1: FakeWorker(False), 2: FakeWorker(True)})
    line = progress(s, duration_s=20.0).line()
    assert "processes 3 (2 pool + 1 one-job)" in line
    assert "workers 3" not in line


def test_a_share_of_the_plan_done_is_said_as_done_not_as_a_bare_percentage() -> None:
    s = session({}, invocations=64, jobs_ended=4)
    line = progress(s, invocations=160).line()
    assert line.rstrip().endswith("done 40% of 160 invocations")


def test_repro_progress_says_runs_done_and_the_failure_rate_as_a_rate() -> None:
    s = session({0: FakeWorker(False)}, jobs_ended=5)
    s.tally.failures_by_class["crash"] = 3
    line = progress(s, invocations=20, repro_class="crash", repro_runs=20).line()
    assert "repro: 8/20 runs done, crash again in 3 (rate 38%)" in line
    assert not line.rstrip().endswith("%")  # the old line ended in a completion "40.0%"


def test_before_the_first_job_the_line_says_the_soak_clock_has_not_started() -> None:
    s = session({0: FakeWorker(False)}, soak_started=None)
    line = progress(s, duration_s=3.0).line()
    assert "starting processes 1" in line and "left" not in line
