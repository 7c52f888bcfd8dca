"""Signatures of exec jobs (the user's own command, `soak -- CMD`; issue 9 item 1): without
native frames a crash or hang keys on the command's last output lines, which the exec engine
keeps in the failure's evidence as `output_key`; with native frames the frames decide."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from stress.analysis import report, signatures
from stress.analysis.rundata import RunData
from stress.engine.execrunner import output_key

STACKS = Path(__file__).resolve().parents[1] / "data" / "stacks"
PROGRAM = "exec:python:test_device.py"


def _exec_row(job: int, output: str, *, cls: str = "crash", signal: str | None = None,
              folder: str | None = None, message: str = "exited with status 1"
              ) -> dict[str, Any]:
    return {"run_id": "r1", "class": cls, "signal": signal, "job_index": job,
            "program": PROGRAM, "pattern": "exec", "seed": job, "worker": 0, "pid": 100 + job,
            "last_step": "run", "in_flight": ["t0:run"], "steps": [], "artifacts": folder,
            "message": message, "attribution": "exit-status", "detected_at": 0.0,
            "elapsed_s": 1.0 + job, "native_tid": None, "exposure": None,
            "evidence": {"output_key": output_key(output), "done_marker_seen": False}}


def _data(rows: list[dict[str, Any]], jobs: int = 20) -> RunData:
    data = RunData([], runs=[{"run_id": "r1", "config": {"workers": 1, "threads": 1}}])
    data.jobs = [{"run_id": "r1", "job_index": i, "program": PROGRAM, "pattern": "exec",
                  "worker": 0, "pid": 100 + i, "invocations": 1, "errors": 0, "miscompare": 0}
                 for i in range(jobs)]
    data.failures = rows
    return data


ASSERT_A = "running test_device\nassertion failed: result {n} != {m} at /tmp/{d}/t.cpp:41\n"
ASSERT_B = "running test_device\nCUDA_ERROR_INVALID_CONTEXT in stream {n} (/tmp/{d}/s.cpp:9)\n"


def test_exec_failures_without_frames_are_told_apart_by_their_last_output_lines() -> None:
    rows = [_exec_row(j, ASSERT_A.format(n=j, m=j + 1, d=f"b{j}")) for j in (1, 4, 7)]
    rows += [_exec_row(j, ASSERT_B.format(n=j, d=f"c{j}")) for j in (2, 9)]
    sigs = signatures.build(_data(rows))
    assert [(s.count, len(s.jobs)) for s in sigs] == [(3, 3), (2, 2)]
    a, b = sigs
    assert a.key.message == "running test_device / assertion failed: result # != # at <path>:#"
    assert "CUDA_ERROR_INVALID_CONTEXT in stream #" in b.key.message
    assert a.id != b.id and a.key.frames == b.key.frames == ()
    assert "assertion failed: result # != #" in a.describe()
    assert a.rate is not None and (a.rate.failures, a.rate.units) == (3, 20)


def test_the_first_screen_shows_an_exec_failures_last_output_instead_of_missing_frames(
        ) -> None:
    sig = signatures.build(_data([_exec_row(3, ASSERT_A.format(n=1, m=2, d="x"))]))[0]
    rows = dict(report.Finding(sig, None).rows())
    assert "frames" not in rows
    assert rows["last output"] == \
        "running test_device / assertion failed: result # != # at <path>:#"


def test_a_hang_of_an_exec_job_also_keys_on_its_output() -> None:
    rows = [_exec_row(j, f"waiting for device {j}\n", cls="hang", message="no progress")
            for j in (1, 2)]
    rows.append(_exec_row(5, "loading module 3\n", cls="hang", message="no progress"))
    sigs = signatures.build(_data(rows))
    assert sorted(s.key.message for s in sigs) == ["loading module #", "waiting for device #"]


def test_native_frames_win_over_the_output_so_one_crash_is_one_mode(tmp_path: Path) -> None:
    rows = []
    for j, out in enumerate(("step 1 ok\n", "step 2 ok\nsomething else entirely\n")):
        d = tmp_path / f"crash-{j}"
        d.mkdir()
        (d / "stacks.txt").write_text((STACKS / "gdb_core_segv.txt").read_text())
        (d / "failure.json").write_text(json.dumps({"native_tid": 5365}))
        rows.append(_exec_row(j, out, signal="SIGSEGV", folder=str(d)))
    sigs = signatures.build(_data(rows))
    assert len(sigs) == 1
    assert sigs[0].key.frames and sigs[0].key.message == ""
    assert "frames" in dict(report.Finding(sigs[0], None).rows())


def test_a_failure_with_neither_frames_nor_output_keeps_the_plain_key() -> None:
    row = _exec_row(1, "")
    row["evidence"] = {}  # a worker crash of the python engine: no output kept
    s = signatures.build(_data([row]))[0]
    assert s.key.message == "" and s.key.text() == "crash||run|||"
    assert dict(report.Finding(s, None).rows())["frames"].startswith("no native frames")


def _failed_row(job: int, output: str, tests: list[str] | None) -> dict[str, Any]:
    row = _exec_row(job, output, cls="failed")
    if tests is not None:
        row["evidence"]["tests"] = {"runner": "pytest", "failed": tests,
                                    "failed_count": len(tests), "counts": {}}
    return row


def test_a_failed_exec_job_keys_on_its_failing_tests_not_on_how_its_output_ends() -> None:
    rows = [_failed_row(1, "E assert 1 == 2\n1 failed in 0.2s\n", ["t.py::test_a"]),
            _failed_row(2, "E assert 7 == 9\nwarning: slow\n1 failed in 9s\n", ["t.py::test_a"]),
            _failed_row(3, "E assert x\n2 failed\n", ["t.py::test_b", "t.py::test_a"]),
            _failed_row(4, "Traceback ...\nRuntimeError: no device\n", None)]
    sigs = signatures.build(_data(rows))
    by_msg = {s.key.message: s for s in sigs}
    assert set(by_msg) == {"t.py::test_a", "t.py::test_a, t.py::test_b",
                           "Traceback ... / RuntimeError: no device"}  # no runner: its output
    a = by_msg["t.py::test_a"]
    assert (a.cls, a.key.signal, a.key.step, a.count) == ("failed", None, "run", 2)
    assert dict(report.Finding(a, None).rows())["tests"] == "t.py::test_a"
    assert a.describe() == "failed at run: t.py::test_a"
    many = signatures.tests_message({"evidence": {"tests": {
        "failed": [f"t.py::test_{i}" for i in range(5)], "failed_count": 5}}})
    assert many == "t.py::test_0, t.py::test_1, t.py::test_2, ..."


def test_a_child_s_crash_without_frames_keys_on_the_child_whichever_test_ran_it() -> None:
    rows = []
    for j, test in enumerate(("test_conv", "test_matmul")):
        row = _exec_row(j, f"FAILED t.py::{test} - CompilerToolError\n1 failed\n",
                        signal="SIGSEGV")
        row["evidence"]["child_crash"] = {"name": "iree-compile", "signal": "SIGSEGV",
                                          "source": "output", "pid": None}
        rows.append(row)
    sigs = signatures.build(_data(rows))
    assert len(sigs) == 1 and sigs[0].count == 2
    assert sigs[0].key.text() == "crash|SIGSEGV|run|||child iree-compile"
    assert dict(report.Finding(sigs[0], None).rows())["process"] == "child iree-compile"
