"""Issue 27 item 1: one crash, one signature, however far its unwind got and whether its
runtime library had symbols. The same SIGSEGV in the runtime's teardown join unwound by gdb
as `pthread_join < ?? [_runtime.so] < Py_DECREF` in most runs, one frame short in some, and
as `?? < ?? (_runtime.so) < ??` on the H200 (no symbols at all)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stress.analysis import known, report, sigkeys, signatures
from stress.analysis.rundata import RunData
from stress.analysis.sigkeys import SignatureKey

RT = ("/venv/lib/python3.11/site-packages/iree/_runtime_libs/"
      "_runtime.cpython-311-x86_64-linux-gnu.so")
FULL = ["0x1 in pthread_join () from /lib/x86_64-linux-gnu/libc.so.6",
        f"0x2 in ?? () from {RT}", "0x3 in Py_DECREF (op=0x0) at ./Include/object.h:500",
        "0x4 in dict_dealloc (mp=0x1) at Objects/dictobject.c:2000"]
SHORT = FULL[:2]  # gdb's unwind stopped a frame earlier
BARE = ["0x1 in ?? ()", f"0x2 in ?? () from {RT}", "0x3 in ?? ()"]  # no symbols (the H200)
SYM = [FULL[0], f"0x2 in iree_hal_task_device_destroy () from {RT}",
       f"0x3 in iree_vm_ref_release () from {RT}", "0x4 in Py_DECREF (op=0x0)"]
NO_LIBC = [SYM[0], f"0x2 in ?? () from {RT}", *SYM[2:]]  # one runtime symbol missing
ALIVE = ["0x1 in ?? ()", f"0x2 in ?? () from {RT}", FULL[2]]  # exit-alive's own crash
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


def test_an_unsymbolized_frame_of_a_known_module_folds_into_the_symbolized_unwind(
        tmp_path: Path) -> None:
    rows = [crash_row(0, core_folder(tmp_path, "a", SYM)),
            crash_row(1, core_folder(tmp_path, "b", NO_LIBC))]
    sigs = signatures.build(data(rows))
    assert len(sigs) == 1 and sigs[0].count == 2
    assert list(sigs[0].merged) == ["pthread_join < ?? [_runtime.so] < iree_vm_ref_release "
                                    "(1 frame(s) unsymbolized)"]


def test_a_frame_outside_every_module_is_not_a_missing_symbol(tmp_path: Path) -> None:
    """The join segfault in device release and exit-alive's crash at exit (a jump to an
    address outside every module) share `?? [_runtime.so] < Py_DECREF`: two modes."""
    rows = [crash_row(0, core_folder(tmp_path, "a", FULL))]
    alive = crash_row(1, core_folder(tmp_path, "b", ALIVE))
    alive["last_step"], alive["pattern"] = "worker-exit", "exit-alive"
    sigs = signatures.build(data([*rows, alive]))
    assert len(sigs) == 2 and not any(s.merged for s in sigs)


def test_a_shorter_unwind_at_another_precise_step_is_not_folded(tmp_path: Path) -> None:
    full = crash_row(0, core_folder(tmp_path, "a", FULL))
    short = crash_row(1, core_folder(tmp_path, "b", SHORT))
    short["last_step"] = "worker-exit"  # same `teardown` key step, another precise step
    assert len(signatures.build(data([full, short]))) == 2


def test_a_known_key_from_a_symbolized_run_matches_an_unwind_without_some_symbols(
        tmp_path: Path) -> None:
    cpu = signatures.build(data([crash_row(0, core_folder(tmp_path, "a", SYM))]))[0]
    stripped = signatures.build(data([crash_row(0, core_folder(tmp_path, "b", NO_LIBC))]))[0]
    assert cpu.id != stripped.id
    f = tmp_path / "known.toml"
    f.write_text(f'[[known]]\nkey = "{cpu.key.detailed()}"\nnote = "teardown join segfault"\n')
    kf = known.load(f)
    assert kf.lookup_signature(cpu) is not None and cpu.known_how == ""  # exact
    hit = kf.lookup_signature(stripped)
    assert hit is not None and hit.note == "teardown join segfault"
    assert stripped.known_how == \
        f"matched {cpu.key.detailed()!r} compatibly: 1 frame(s) unsymbolized"
    other = signatures.build(data([crash_row(0, core_folder(tmp_path, "c", OTHER))]))[0]
    assert kf.lookup_signature(other) is None


def test_an_unwind_with_no_symbols_or_modules_is_not_made_known_and_the_report_says_why(
        tmp_path: Path) -> None:
    cpu = signatures.build(data([crash_row(0, core_folder(tmp_path, "a", FULL))]))[0]
    h200 = signatures.build(data([crash_row(0, core_folder(tmp_path, "b", BARE))]))[0]
    f = tmp_path / "known.toml"
    f.write_text(f'[[known]]\nkey = "{cpu.key.detailed()}"\nnote = "teardown join segfault"\n')
    assert known.load(f).lookup_signature(h200) is None
    assert h200.known_how.startswith("not the known key at line 1: frame 1 is unsymbolized "
                                     "outside every known module")


def test_a_known_key_from_a_poor_unwind_never_claims_a_richer_new_crash(tmp_path: Path) -> None:
    h200 = signatures.build(data([crash_row(0, core_folder(tmp_path, "b", NO_LIBC[:2]))]))[0]
    fresh = signatures.build(data([crash_row(0, core_folder(tmp_path, "n", SYM))]))[0]
    assert sigkeys.compatible(fresh.key, h200.key)  # one mode, as far as frames can tell
    f = tmp_path / "known.toml"
    f.write_text(f'[[known]]\nkey = "{h200.key.detailed()}"\nnote = "seen on the H200"\n')
    assert known.load(f).lookup_signature(fresh) is None  # but a poorer entry claims nothing


@pytest.mark.parametrize(("a", "b", "why"), [
    ("crash|SIGSEGV|teardown||f < g < h|", "crash|SIGSEGV|teardown||f < g|",
     "unwind stopped early"),
    ("crash|SIGSEGV|teardown||f < ?? [x.so] < h|", "crash|SIGSEGV|teardown||f < g [x.so] < h|",
     "1 frame(s) unsymbolized"),
    ("crash|SIGSEGV|teardown||f < ?? [x.so] < h|", "crash|SIGSEGV|teardown||f < g < h|", None),
    ("crash|SIGSEGV|teardown||?? [x.so] < ?? [y.so] < h|",
     "crash|SIGSEGV|teardown||f [x.so] < g [y.so] < h|", None),
    ("crash|SIGSEGV|teardown||f < g < h|", "crash|SIGABRT|teardown||f < g|", None),
    ("crash|SIGSEGV|teardown||?? < ?? < ??|", "crash|SIGSEGV|teardown||f < g < h|", None),
    ("crash|SIGSEGV|teardown||f < g < h|", "crash|SIGSEGV|teardown||f < g < k|", None),
    ("crash|SIGSEGV|teardown||f < g < h|", "crash|SIGSEGV|teardown||f < g < h|", None),
])
def test_compatibility_is_position_by_position_with_one_named_frame_in_common(
        a: str, b: str, why: str | None) -> None:
    assert sigkeys.compatible(SignatureKey.parse(a), SignatureKey.parse(b)) == why
    assert sigkeys.compatible(SignatureKey.parse(b), SignatureKey.parse(a)) == why


def test_an_unsymbolized_frame_of_another_module_is_not_compatible() -> None:
    a = SignatureKey.parse("crash|SIGSEGV|teardown||f < ?? [libcuda.so] < h|")
    b = SignatureKey("crash", "SIGSEGV", "teardown", "", ("f", "g", "h"), "",
                     ("libc.so", "_runtime.so", "python"))
    assert sigkeys.compatible(a, b) is None


def test_a_known_key_that_is_not_a_key_is_refused_in_one_line(tmp_path: Path) -> None:
    from stress.errors import UsageError

    f = tmp_path / "known.toml"
    f.write_text('[[known]]\nkey = "crash SIGSEGV teardown"\nnote = "typo"\n')
    with pytest.raises(UsageError, match=r"known.toml:1: `key` must be a signature key"):
        known.load(f)


def budget_row(tmp_path: Path, i: int, frames: list[str] | None, key: str, full: bool,
               top: list[str] | None = None) -> dict[str, Any]:
    """A crash row whose stacks were read (`frames`) or only counted by the evidence budget;
    `top`: the top of its faulthandler dump, as the engine records it for every crash."""
    r = crash_row(i, core_folder(tmp_path, f"r{i}", frames) if frames else "")
    r["artifacts"] = r["artifacts"] or None
    r["evidence"] = {"evidence_budget": {"key": key, "full": full, "cores": full},
                     **({"fault_top": top} if top else {})}
    return r


def test_counted_crashes_join_the_mode_read_of_their_class_signal_and_step(
        tmp_path: Path) -> None:
    """Issue 36 item 1: a crash past the evidence budget has no stacks; it joins the mode read
    of its class, signal and step, never a mode of its own because it was not sampled; with
    two modes read there, the one whose dump top it shares, else the one read most (said)."""
    one = "crash|SIGSEGV|device-release|per-call"
    rows = [budget_row(tmp_path, 0, FULL, one, True), budget_row(tmp_path, 1, FULL, one, True),
            budget_row(tmp_path, 2, None, one, False)]
    sigs = signatures.build(data(rows))
    assert len(sigs) == 1 and (sigs[0].evidence_full, sigs[0].evidence_counted) == (2, 1)
    two = "crash|SIGSEGV|worker-exit|exit-clean"
    rows = [budget_row(tmp_path, 10, FULL, two, True, ["Fatal Python error", "a [x.py]"]),
            budget_row(tmp_path, 11, OTHER, two, True, ["Fatal Python error", "b [x.py]"]),
            budget_row(tmp_path, 13, OTHER, two, True, ["Fatal Python error", "b [x.py]"]),
            budget_row(tmp_path, 12, None, two, False, ["Fatal Python error", "a [x.py]"])]
    sigs = signatures.build(data(rows))
    assert len(sigs) == 2 and sum(s.evidence_counted for s in sigs) == 1
    joined = next(s for s in sigs if s.evidence_counted)
    assert joined.frames[0] == "pthread_join" and joined.count == 2  # its dump top's mode
    assert "the top of its Python dump" in next(iter(joined.merged))
    rows[-1]["evidence"].pop("fault_top")  # no top: the mode read most (OTHER, 2 of 3)
    sigs = signatures.build(data(rows))
    joined = next(s for s in sigs if s.evidence_counted)
    assert len(sigs) == 2 and joined.count == 3 and joined.frames[0] != "pthread_join"
    assert "the most read of 2 modes" in next(iter(joined.merged))


def test_a_counted_crash_of_a_step_never_cored_joins_the_one_signature_of_its_group(
        tmp_path: Path) -> None:
    def row(i: int, frames: list[str] | None, key: str, full: bool) -> dict[str, Any]:
        r = crash_row(i, core_folder(tmp_path, f"g{i}", frames) if frames else "")
        r["artifacts"] = r["artifacts"] or None
        r["evidence"] = {"evidence_budget": {"key": key, "full": full, "cores": full}}
        return r

    cored = "crash|SIGSEGV|device-release|per-call"
    never = "crash|SIGSEGV|driver-release|churn"  # seen only in processes without cores
    rows = [row(0, FULL, cored, True), row(1, None, never, False)]
    sigs = signatures.build(data(rows))
    assert len(sigs) == 1 and sigs[0].count == 2
    assert sigs[0].merged == {"no frames (counted without stacks (evidence budget): joined "
                              "by class, signal and step)": 1}
    rows.append(row(2, OTHER, "crash|SIGSEGV|gc|per-thread", True))  # a second mode there
    sigs = signatures.build(data(rows))  # it joins one of them (issue 36), and says so
    assert len(sigs) == 2 and sum(s.count for s in sigs) == 3
    assert "the most read of 2 modes" in str(next(s for s in sigs if s.merged).merged)


def test_counted_crashes_join_the_mode_read_where_they_faulted_whatever_is_read_most(
        tmp_path: Path) -> None:
    """Two modes at one step, no Python dump: a counted crash's fault site (its notes-only
    core) picks the mode whose read crashes faulted there, not the one read most; a site none
    of them had joins the most read, and says its site matched none."""
    def site(fn: str) -> dict[str, Any]:
        return {"module": "/x/libx.so", "offset": 16, "function": fn, "key": f"{fn} [libx.so]",
                "text": f"{fn} (libx.so+0x10)"}

    key = "crash|SIGSEGV|device-release|per-call"
    rows = [budget_row(tmp_path, 0, FULL, key, True), budget_row(tmp_path, 1, OTHER, key, True),
            budget_row(tmp_path, 2, OTHER, key, True)]
    for r, fn in zip(rows, ["pthread_join", "iree_task_worker_main", "iree_task_worker_main"],
                     strict=True):
        r["evidence"]["fault_site"] = site(fn)
    rows += [budget_row(tmp_path, i, None, key, False) for i in (3, 4, 5)]
    for r in rows[3:]:
        r["evidence"]["fault_site"] = site("pthread_join")
    sigs = signatures.build(data(rows))
    join = next(s for s in sigs if s.frames[0] == "pthread_join")
    assert (join.count, join.evidence_counted) == (4, 3), [(s.key.text(), s.count) for s in sigs]
    assert next(iter(join.merged)).endswith("joined by class, signal and step and its fault "
                                            "site, pthread_join [libx.so])")
    rows[5]["evidence"]["fault_site"] = site("memcpy")  # faulted where no read crash did
    sigs = signatures.build(data(rows))
    most = next(s for s in sigs if s.frames[0] != "pthread_join")
    assert most.count == 3 and "its fault site, memcpy [libx.so], is none of theirs" in \
        next(iter(most.merged))
    rows[5]["evidence"]["fault_site"] = site("pthread_join")
    del rows[1]["evidence"]["fault_site"], rows[2]["evidence"]["fault_site"]  # a mode read
    sigs = signatures.build(data(rows))  # without sites may fault there too: not by site
    assert not any("its fault site" in why for s in sigs for why in s.merged), \
        [s.merged for s in sigs]
    alone = [budget_row(tmp_path, 6, None, "crash|SIGSEGV|worker-exit|exit-clean", False)]
    alone[0]["last_step"] = "worker-exit"
    alone[0]["evidence"]["fault_site"] = site("memcpy")
    sigs = signatures.build(data(alone))  # nothing read at all: its site is its evidence
    lines = dict(report.Finding(sigs[0], None).rows())
    assert lines["fault site"] == "1 in memcpy (libx.so+0x10) (from the cores' notes; stacks " \
        "not read)"


def test_a_counted_crash_with_nothing_of_its_step_read_names_the_modes_read_at_other_steps(
        tmp_path: Path) -> None:
    """A crash at the interpreter's exit, only counted, in a suite whose crashes were read
    while its tests ran (CI: a device collected after the summary line, 1 of 34 jobs): the
    step is part of the mode, so it keeps a key of its own, and the answer names the modes
    read of its class and signal at other steps instead of leaving it unexplained."""
    def row(i: int, step: str, frames: list[str] | None, signal: str = "SIGSEGV"
            ) -> dict[str, Any]:
        r = budget_row(tmp_path, i, frames, f"crash|{signal}|{step}|exec", bool(frames))
        r["last_step"], r["signal"] = step, signal
        return r

    rows = [row(0, "run", FULL), row(1, "run", FULL), row(2, "worker-exit", None)]
    sigs = signatures.build(data(rows))
    assert len(sigs) == 2
    read = next(s for s in sigs if s.evidence_full)
    alone = next(s for s in sigs if s.evidence_counted)
    assert (read.count, alone.count, read.unjoined) == (2, 1, {})
    assert alone.unjoined == {"counted without stacks (evidence budget); nothing of its step "
                              f"read to join; read at another step: {read.id} (run)": 1}
    lines = dict(report.Finding(alone, None).rows())
    assert lines["not joined"].startswith("1 counted without stacks") and read.id in \
        lines["not joined"]
    assert alone.as_dict()["unjoined"] == alone.unjoined
    rows[1] = row(3, "worker-exit", FULL)  # its step read once: it joins that mode
    sigs = signatures.build(data(rows))
    assert len(sigs) == 2 and all(not s.unjoined for s in sigs)
    assert next(s for s in sigs if s.evidence_counted).evidence_full == 1
    rows[1:] = [row(4, "worker-exit", None, "SIGABRT")]  # another signal: nothing to name
    sigs = signatures.build(data(rows))
    assert len(sigs) == 2 and all(not s.unjoined for s in sigs)


def fh_folder(tmp: Path, name: str) -> str:
    """A failure folder whose only stack is faulthandler's (gdb ran out of time on the core)."""
    d = tmp / name
    d.mkdir()
    (d / "stacks.txt").write_text("# faulthandler\n# note: gdb gave no threads\n")
    (d / "stderr.tail").write_text(
        "Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f01 (most recent "
        "call first):\n  File \"/u/case.py\", line 579 in _callTestMethod\n  File \"/u/case.py"
        "\", line 623 in run\n  File \"/u/case.py\", line 678 in __call__\n")
    (d / "failure.json").write_text(json.dumps({}))
    return str(d)


def test_without_any_native_stack_counted_crashes_join_the_python_stacks_of_their_dump_top(
        tmp_path: Path) -> None:
    """Issue 36, the IREE runtime's own suite: every core read timed out, so the crashes read
    had faulthandler's frames only; those only counted, with the same dump top, were a second
    mode of the same frames (10 of 15)."""
    top = ["Fatal Python error: Segmentation fault", "_callTestMethod [case.py]", "run [case.py]"]
    key = "crash|SIGSEGV|run|exec"
    rows = []
    for i in range(2):
        r = crash_row(i, fh_folder(tmp_path, f"f{i}"))
        r["evidence"] = {"evidence_budget": {"key": key, "full": True}, "fault_top": top}
        rows.append(r)
    for i in range(2, 5):
        r = crash_row(i, "")
        r["artifacts"] = None
        r["evidence"] = {"evidence_budget": {"key": key, "full": False}, "fault_top": top,
                         "output_key": top}
        rows.append(r)
    sigs = signatures.build(data(rows))
    assert len(sigs) == 1 and sigs[0].count == 5, [(s.key.text(), s.count) for s in sigs]
    assert sigs[0].frames[0] == "_callTestMethod [case.py]"
    assert "no native stacks were read in its mode" in next(iter(sigs[0].merged))


def test_a_mode_shows_the_stack_of_a_crash_read_even_when_a_joined_one_came_first(
        tmp_path: Path) -> None:
    """The first crash of a run lost its core (another copy's overwrote it) and joined the
    mode read by its dump top: the mode still shows the native stack read, not that crash's
    Python frames (a slow test saw `test_x (test_suite.py) < pytest_pyfunc_call ...`)."""
    top = ["Fatal Python error: Segmentation fault", "_callTestMethod [case.py]", "run [case.py]"]
    key = "crash|SIGSEGV|device-release|per-call"
    lost = crash_row(0, fh_folder(tmp_path, "lost"))
    lost["evidence"] = {"evidence_budget": {"key": key, "full": True}, "fault_top": top,
                        "note": "core overwritten by another process"}
    rows = [lost, budget_row(tmp_path, 1, FULL, key, True, top),
            budget_row(tmp_path, 2, None, key, False, top)]
    sigs = signatures.build(data(rows))
    assert len(sigs) == 1 and sigs[0].count == 3
    assert sigs[0].display[0].startswith("pthread_join"), sigs[0].display
