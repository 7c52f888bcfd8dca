"""Miscompares a user can act on (issue 37): the message names the program and dtype, and the
failure's folder keeps the inputs, the expected and the actual result (whole when small, else
the first differing elements) and the tolerance the check used."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from stress.engine import invocation, mismatch
from stress.engine.invocation import Expectation, JobResult
from stress.engine.jobs import Job
from stress.keys import message_key
from stress.programs import corpus, dtypes, reference
from stress.programs.program import make_inputs
from tests.helpers.engine import recorder


def _vulkan_wrong_neg(inputs: list[Any]) -> Any:
    """What IREE's default Vulkan target computes for an f16 negate (docs/findings/
    vulkan-narrow-types.md): only the upper half of each 32-bit word is negated."""
    out = np.array(inputs[0], copy=True)
    out.reshape(-1)[1::2] = -out.reshape(-1)[1::2]
    return out


@pytest.fixture(autouse=True)
def _fresh_process_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(invocation, "_EVIDENCED", set())


def test_a_miscompare_names_its_program_dtype_tolerance_and_first_differing_element() -> None:
    program = corpus.by_name()["unary.neg.f16.64x64"]
    inputs = make_inputs(program, 7)
    expect = Expectation(program, 7, inputs)
    ok, _, message, ev = expect.check([_vulkan_wrong_neg(inputs)])
    assert not ok
    head, detail = message.splitlines()
    # the first line is what signatures group on: the same key as before the detail came
    assert message_key(message) == "output # differs from the numpy reference (max abs error #)"
    assert head.startswith("output 0 differs from the numpy reference")
    x = float(dtypes.get("f16").decode(inputs[0].reshape(-1)[:1])[0])
    assert detail.startswith("unary.neg.f16.64x64 (f16), input seed 7: ")
    assert "of 4096 elements outside rtol 0.01 + atol 0.002" in detail
    assert f"first at [0, 0]: inputs ({x:.6g}), expected {-x:.6g}, got {x:.6g}" in detail
    assert ev is not None and ev["program"] == program.name and ev["dtype"] == "f16"
    assert ev["tolerance"]["rtol"] == 0.01 and ev["tolerance"]["atol"] == 0.002


def test_a_small_programs_folder_keeps_inputs_expected_and_actual_whole(tmp_path: Path) -> None:
    program = corpus.by_name()["unary.neg.f16.64x64"]
    inputs = make_inputs(program, 7)
    actual = _vulkan_wrong_neg(inputs)
    expected = reference.evaluate(program.op, program.dtype, inputs)
    mismatch.write(tmp_path, mismatch.evidence(program, 7, inputs, 0, "f16", actual, expected,
                                               0.01, 0.002))
    assert np.array_equal(np.load(tmp_path / "input-0.npy"), inputs[0])
    assert np.array_equal(np.load(tmp_path / "actual.npy"), actual)
    assert np.array_equal(np.load(tmp_path / "expected.npy"), expected)
    facts = json.loads((tmp_path / "miscompare.json").read_text())
    assert facts["tolerance"] == {"rtol": 0.01, "atol": 0.002, "test": "|actual - expected| "
                                  "<= atol + rtol * |expected|; NaN == NaN"}
    assert facts["seed"] == 7 and facts["elements"] == 4096
    assert 0 < facts["differing"] <= 2048  # the odd elements are right
    assert "unary.neg.f16.64x64 (f16)" in (tmp_path / "miscompare.txt").read_text()


def test_a_large_programs_folder_keeps_the_first_differing_elements_with_their_inputs(
        tmp_path: Path) -> None:
    program = corpus.by_name()["binary.add.f16.2x16x64x64+1x16x1x1"]
    inputs = make_inputs(program, 3)
    expected = reference.evaluate(program.op, program.dtype, inputs)
    actual = dtypes.get("f16").encode(expected)
    actual.reshape(-1)[5] = np.float16(np.inf)  # one element overflowed
    ev = mismatch.evidence(program, 3, inputs, 0, "f16", actual, expected, 0.01, 0.002)
    mismatch.write(tmp_path, ev)
    assert not list(tmp_path.glob("*.npy"))  # 131,072 elements: not kept whole
    (first,) = json.loads((tmp_path / "miscompare.json").read_text())["first"]
    a = np.broadcast_to(dtypes.get("f16").decode(inputs[0]), actual.shape)[0, 0, 0, 5]
    b = np.broadcast_to(dtypes.get("f16").decode(inputs[1]), actual.shape)[0, 0, 0, 5]
    assert first["index"] == [0, 0, 0, 5] and first["inputs"] == [a, b]
    assert first["actual"] == float("inf") and first["actual_bits"] == 0x7C00
    assert "not kept" in (tmp_path / "miscompare.txt").read_text()


def test_a_process_sends_one_programs_evidence_once() -> None:
    program = corpus.by_name()["unary.neg.f16.64x64"]
    inputs = make_inputs(program, 1)
    wrong = _vulkan_wrong_neg(inputs)
    first = Expectation(program, 1, inputs).check([wrong])[3]
    again = Expectation(program, 1, inputs).check([wrong])
    assert first is not None and again[0] is False and again[3] is None
    assert len(again[2].splitlines()) == 2  # the message still names it


class _Store:
    def __init__(self) -> None:
        self.failures: list[dict[str, Any]] = []

    def add_job(self, *_: Any) -> None:
        pass

    def add_failure_counts(self, *_: Any) -> None:
        pass

    def add_failure(self, run_id: str, row: dict[str, Any]) -> int:
        self.failures.append(row)
        return len(self.failures)


def test_the_recorder_gives_a_programs_first_miscompare_a_folder_and_no_more(
        tmp_path: Path) -> None:
    program = corpus.by_name()["unary.neg.f16.64x64"]
    inputs = make_inputs(program, 2)
    _, _, message, ev = Expectation(program, 2, inputs).check([_vulkan_wrong_neg(inputs)])
    store = _Store()
    rec = recorder(tmp_path, store)
    handle = SimpleNamespace(worker_id="w0", pid=1, tail=lambda _path: "",
                             stderr_path=tmp_path / "e", stdout_path=tmp_path / "o", judge=None)
    for i in range(3):
        job = Job(i, program.name, "shared", 2, 10)
        note = {"class": "miscompare", "step": "check", "message": message,
                **({"evidence": ev} if i < 2 else {})}
        res = {**JobResult(invocations=10, miscompare=1).as_dict(), "failures": [note]}
        rec.job_done(handle, job, {"job": job.as_dict(), "result": res})  # type: ignore[arg-type]
    (folder,) = (tmp_path / "failures").iterdir()
    assert folder.name == "m001-miscompare-unary.neg.f16.64x64"
    assert [bool(f["artifacts"]) for f in store.failures] == [True, False, False]
    for name in ("input-0.npy", "expected.npy", "actual.npy", "miscompare.json",
                 "miscompare.txt", "repro.sh", "job.json", "failure.json"):
        assert (folder / name).exists(), name


class _WrongEveryTime:
    """A loaded program whose every call returns the default Vulkan target's wrong negate."""

    def __init__(self, wrong: Any) -> None:
        self.wrong, self.calls = wrong, 0

    def call(self, _inputs: Any, _writer: Any, _device_id: int) -> list[Any]:
        self.calls += 1
        return [self.wrong.copy()]


def _counting_evidence(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    built: list[bool] = []  # one entry per evidence built: whether it kept the arrays
    real = mismatch.evidence

    def counted(*args: Any, **kw: Any) -> dict[str, Any]:
        ev = real(*args, **kw)
        built.append(bool(ev["arrays"]))
        return ev

    monkeypatch.setattr(mismatch, "evidence", counted)
    return built


def test_a_job_whose_every_invocation_miscompares_builds_evidence_only_for_its_kept_notes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot path: past the job's kept notes a miscompare is counted, not described (on the
    default Vulkan target every narrow-type invocation miscompares), and the arrays are
    encoded once per program and process."""
    from stress.engine.journal import JournalWriter

    built = _counting_evidence(monkeypatch)
    program = corpus.by_name()["unary.neg.f16.64x64"]
    inputs = make_inputs(program, 4)
    lp = _WrongEveryTime(_vulkan_wrong_neg(inputs))
    writer = JournalWriter(tmp_path / "journal.bin", slots=1).acquire()
    expect, result = Expectation(program, 4, inputs), JobResult()
    for i in range(40):
        invocation.timed_call(lp, inputs, writer, 0, expect, result, i)  # type: ignore[arg-type]
    assert result.miscompare == 40 and sum(result.counts.values()) == 40
    assert len(result.failures) == invocation._MAX_NOTES
    assert built == [True] + [False] * (invocation._MAX_NOTES - 1)
    assert result.failures[0].evidence is not None
    assert all(len(f.message.splitlines()) == 2 for f in result.failures)


def test_a_programs_evidence_is_not_spent_on_a_note_the_job_does_not_keep(
        tmp_path: Path) -> None:
    """A job that already has its notes (errors first) counts the miscompare without its
    evidence, and the program's next kept note in this process still carries it."""
    from stress.engine.invocation import FailureNote
    from stress.engine.journal import JournalWriter

    program = corpus.by_name()["unary.neg.f16.64x64"]
    inputs = make_inputs(program, 5)
    lp = _WrongEveryTime(_vulkan_wrong_neg(inputs))
    writer = JournalWriter(tmp_path / "journal.bin", slots=1).acquire()
    expect, full = Expectation(program, 5, inputs), JobResult()
    for i in range(invocation._MAX_NOTES):
        full.note(FailureNote("error", "call", f"error {i}", i, 0), writer)
    invocation.timed_call(lp, inputs, writer, 0, expect, full, 9)  # type: ignore[arg-type]
    assert full.miscompare == 1 and all(f.cls == "error" for f in full.failures)
    later = JobResult()
    invocation.timed_call(lp, inputs, writer, 0, expect, later, 0)  # type: ignore[arg-type]
    (note,) = later.failures
    assert note.evidence is not None and note.evidence["program"] == program.name
