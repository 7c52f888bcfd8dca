"""Issue 27 item 1: one crash, one signature, however far its unwind got and whether its
runtime library had symbols. The same SIGSEGV in the runtime's teardown join unwound by gdb
as `pthread_join < ?? [_runtime.so] < Py_DECREF` in most runs, one frame short in some, and
as `?? < ?? (_runtime.so) < ??` on the H200 (no symbols at all)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stress.analysis import known, report, signatures
from stress.analysis.rundata import RunData
from stress.analysis.signatures import SignatureKey

RT = ("/venv/lib/python3.11/site-packages/iree/_runtime_libs/"
      "_runtime.cpython-311-x86_64-linux-gnu.so")
FULL = ["0x1 in pthread_join () from /lib/x86_64-linux-gnu/libc.so.6",
        f"0x2 in ?? () from {RT}", "0x3 in Py_DECREF (op=0x0) at ./Include/object.h:500",
        "0x4 in dict_dealloc (mp=0x1) at Objects/dictobject.c:2000"]
SHORT = FULL[:2]  # gdb's unwind stopped a frame earlier
BARE = ["0x1 in ?? ()", f"0x2 in ?? () from {RT}", "0x3 in ?? ()"]  # no symbols (the H200)
OTHER = [f"0x1 in iree_task_worker_main () from {RT}", f"0x2 in ?? () from {RT}",
         "0x3 in start_thread () from /lib/x86_64-linux-gnu/libc.so.6"]


def core_folder(tmp: Path, name: str, frames: list[str], tid: int = 100) -> str:
    d = tmp / name
    d.mkdir()
    body = "\n".join(f"#{i}  {f}" for i, f in enumerate(frames))
    (d / "stacks.txt").write_text(f"# core+gdb\n# thread {tid} took SIGSEGV; crashing frames: x"
                                  f"\nThread 1 (Thread 0x7f (LWP {tid})):\n{body}\n")
    (d / "failure.json").write_text(json.dumps({"native_tid": tid}))
    return str(d)


def crash_row(i: int, folder: str) -> dict[str, Any]:
    return {"run_id": "r1", "class": "crash", "signal": "SIGSEGV", "job_index": i,
            "program": "unary.exp.f32.64x64", "pattern": "per-call", "seed": i, "worker": 0,
            "pid": 100 + i, "last_step": "device-release", "in_flight": [], "steps": [],
            "artifacts": folder, "message": "killed by SIGSEGV", "attribution": "core",
            "detected_at": 0.0, "elapsed_s": float(i), "native_tid": 100,
            "exposure": None, "evidence": {"crashed_tid": 100}}


def data(rows: list[dict[str, Any]]) -> RunData:
    d = RunData([], runs=[{"run_id": "r1", "config": {"workers": 2, "threads": 2}}])
    d.jobs = [{"run_id": "r1", "job_index": i, "program": "unary.exp.f32.64x64",
               "pattern": "per-call", "worker": 0, "pid": 100 + i, "invocations": 4,
               "errors": 0, "miscompare": 0} for i in range(10)]
    d.failures = rows
    return d


def test_a_truncated_and_a_full_unwind_of_one_crash_make_one_signature(tmp_path: Path) -> None:
    rows = [crash_row(i, core_folder(tmp_path, f"f{i}", FULL)) for i in range(3)]
    rows.append(crash_row(3, core_folder(tmp_path, "s", SHORT)))
    sigs = signatures.build(data(rows))
    assert len(sigs) == 1, [s.describe() for s in sigs]
    s = sigs[0]
    assert s.count == 4 and s.frames == ("pthread_join", "?? [_runtime.so]", "Py_DECREF")
    assert s.merged == {"pthread_join < ?? [_runtime.so] (unwind stopped early)": 1}
    assert "1 with pthread_join < ?? [_runtime.so] (unwind stopped early)" in \
        dict(report.Finding(s, None).rows())["merged"]


def test_without_the_full_unwind_the_short_one_is_its_own_signature(tmp_path: Path) -> None:
    sigs = signatures.build(data([crash_row(0, core_folder(tmp_path, "s", SHORT))]))
    assert len(sigs) == 1 and sigs[0].frames == ("pthread_join", "?? [_runtime.so]")
    assert not sigs[0].merged


def test_two_different_crashes_are_never_merged(tmp_path: Path) -> None:
    rows = [crash_row(0, core_folder(tmp_path, "a", FULL)),
            crash_row(1, core_folder(tmp_path, "b", OTHER))]
    assert len(signatures.build(data(rows))) == 2


def test_an_unsymbolized_unwind_folds_into_the_symbolized_one_of_its_mode(tmp_path: Path) -> None:
    rows = [crash_row(0, core_folder(tmp_path, "a", FULL)),
            crash_row(1, core_folder(tmp_path, "b", BARE))]
    sigs = signatures.build(data(rows))
    assert len(sigs) == 1 and sigs[0].count == 2
    assert list(sigs[0].merged) == ["?? [] < ?? [_runtime.so] < ?? [] (2 frame(s) unsymbolized)"]


def test_a_known_key_from_a_symbolized_run_matches_the_unsymbolized_run_and_says_how(
        tmp_path: Path) -> None:
    cpu = signatures.build(data([crash_row(0, core_folder(tmp_path, "a", FULL))]))[0]
    h200 = signatures.build(data([crash_row(0, core_folder(tmp_path, "b", BARE))]))[0]
    assert cpu.id != h200.id
    f = tmp_path / "known.toml"
    f.write_text(f'[[known]]\nkey = "{cpu.key.text()}"\nnote = "teardown join segfault"\n')
    kf = known.load(f)
    assert kf.lookup_signature(cpu) is not None and cpu.known_how == ""  # exact
    hit = kf.lookup_signature(h200)
    assert hit is not None and hit.note == "teardown join segfault"
    assert h200.known_how == f"matched {cpu.key.text()!r} compatibly: 2 frame(s) unsymbolized"
    other = signatures.build(data([crash_row(0, core_folder(tmp_path, "c", OTHER))]))[0]
    assert kf.lookup_signature(other) is None


@pytest.mark.parametrize(("a", "b", "why"), [
    ("crash|SIGSEGV|teardown||f < g < h|", "crash|SIGSEGV|teardown||f < g|",
     "unwind stopped early"),
    ("crash|SIGSEGV|teardown||f < ?? [x.so] < h|", "crash|SIGSEGV|teardown||f < g < h|",
     "1 frame(s) unsymbolized"),
    ("crash|SIGSEGV|teardown||f < g < h|", "crash|SIGABRT|teardown||f < g|", None),
    ("crash|SIGSEGV|teardown||?? < ?? < ??|", "crash|SIGSEGV|teardown||f < g < h|", None),
    ("crash|SIGSEGV|teardown||f < g < h|", "crash|SIGSEGV|teardown||f < g < k|", None),
    ("crash|SIGSEGV|teardown||f < g < h|", "crash|SIGSEGV|teardown||f < g < h|", None),
])
def test_compatibility_is_position_by_position_with_one_named_frame_in_common(
        a: str, b: str, why: str | None) -> None:
    assert signatures.compatible(SignatureKey.parse(a), SignatureKey.parse(b)) == why
    assert signatures.compatible(SignatureKey.parse(b), SignatureKey.parse(a)) == why


def test_an_unsymbolized_frame_of_another_module_is_not_compatible() -> None:
    a = SignatureKey.parse("crash|SIGSEGV|teardown||f < ?? [libcuda.so] < h|")
    b = SignatureKey("crash", "SIGSEGV", "teardown", "", ("f", "g", "h"), "",
                     ("libc.so", "_runtime.so", "python"))
    assert signatures.compatible(a, b) is None
