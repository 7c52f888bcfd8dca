"""Signatures (issue 9 item 1): one failure mode = one signature, across tools, threads,
workers and library versions; real py-spy / gdb / faulthandler output in tests/data/stacks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from stress import stacktext
from stress.analysis import framerules, sigkeys, signatures, stacks
from stress.analysis.exposure import Exposure
from stress.analysis.rundata import RunData

STACKS = Path(__file__).resolve().parents[1] / "data" / "stacks"


def _folder(tmp: Path, name: str, sample: str, native_tid: int | None = None,
            text: str | None = None, stderr: str | None = None) -> str:
    d = tmp / name
    d.mkdir()
    (d / "stacks.txt").write_text(text if text is not None else (STACKS / sample).read_text())
    (d / "failure.json").write_text(json.dumps({"native_tid": native_tid}))
    if stderr is not None:
        (d / "stderr.tail").write_text(stderr)
    return str(d)


def _row(cls: str, step: str, folder: str | None, *, pid: int = 100, job: int | None = 0,
         worker: int = 0, tid: int | None = None, evidence: dict[str, Any] | None = None,
         signal: str | None = None, pattern: str = "per-call", message: str = "",
         exposure: str | None = None, run: str = "r1") -> dict[str, Any]:
    return {"run_id": run, "class": cls, "signal": signal, "job_index": job,
            "program": "unary.exp.f32.64x64", "pattern": pattern, "seed": 1, "worker": worker,
            "pid": pid, "last_step": step, "in_flight": [f"t0:{step}"], "steps": [],
            "artifacts": folder, "message": message, "attribution": "watchdog",
            "detected_at": 0.0, "elapsed_s": 1.0, "native_tid": tid,
            "evidence": evidence or {}, "exposure": exposure}


def _jobs(n: int, run: str = "r1", per_process: int = 10) -> list[dict[str, Any]]:
    return [{"run_id": run, "job_index": i, "program": "unary.exp.f32.64x64",
             "pattern": "per-call", "worker": i % 3, "pid": 100 + i // per_process,
             "invocations": 10, "errors": 0, "miscompare": 0} for i in range(n)]


def test_a_stalled_join_gets_one_signature_from_py_spy_and_from_gdb(tmp_path: Path) -> None:
    rows = [_row("teardown_hang", "device-release", _folder(tmp_path, "a", "pyspy_spin.txt",
                                                             5009), job=1),
            _row("teardown_hang", "device-release", _folder(tmp_path, "b", "gdb_spin.txt",
                                                             5009), job=2, pid=101)]
    sigs = signatures.build(RunData([], jobs=_jobs(20), failures=rows))
    assert len(sigs) == 1
    assert sigs[0].frames == ("iree_fault_spin", "fire", "pthread_join")
    assert sigs[0].count == 2


def test_the_signature_comes_from_the_failing_thread_not_the_first_one(tmp_path: Path) -> None:
    failing = stacks.failing_stack(_row("hang", "invoke",
                                            _folder(tmp_path, "a", "pyspy_spin.txt", 5009)))
    helper = stacks.failing_stack(_row("hang", "invoke",
                                           _folder(tmp_path, "b", "pyspy_spin.txt", 5005)))
    assert failing.frames[0] == "iree_fault_spin"
    assert helper.frames == ("busy [victim.py]",)


def test_a_library_version_suffix_does_not_change_the_id(tmp_path: Path) -> None:
    text = (STACKS / "pyspy_spin_stripped.txt").read_text()
    assert "libfault.so.2" in text
    other = text.replace("libfault.so.2", "libfault.so.1").replace("0x7f07", "0x7f55")
    a = _row("teardown_hang", "device-release",
             _folder(tmp_path, "a", "", 5501, text=text))
    b = _row("teardown_hang", "device-release",
             _folder(tmp_path, "b", "", 5501, text=other), pid=200, job=3)
    sigs = signatures.build(RunData([], jobs=_jobs(10), failures=[a, b]))
    assert len(sigs) == 1
    assert sigs[0].frames == ("iree_fault_spin", "?? [libfault.so]", "pthread_join")


@pytest.mark.parametrize(("path", "name"), [
    ("/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04", "libcuda.so"),
    ("/tmp/x/libfault.so.1", "libfault.so"), ("libfault.so.2", "libfault.so"),
    ("_runtime_libs/_runtime.cpython-311-x86_64-linux-gnu.so", "_runtime.so"),
    ("libamdhip64.so.7", "libamdhip64.so"), ("libfoo-1.2.3.so", "libfoo.so"),
    ("/lib/libc.so.6+0x9a3f", "libc.so"),
])
def test_module_names_lose_versions_tags_and_addresses(path: str, name: str) -> None:
    assert stacktext.normalize_module(path) == name


def test_busy_and_blocked_hangs_at_the_same_step_are_different_modes(tmp_path: Path) -> None:
    spin = _row("teardown_hang", "worker-exit", _folder(tmp_path, "a", "pyspy_spin.txt"),
                tid=5009, evidence={"threads": {"5009": {"state": "busy"}}}, job=None)
    block = _row("teardown_hang", "worker-exit", _folder(tmp_path, "b", "pyspy_block.txt"),
                 tid=5197, evidence={"blocked_tids": [5197]}, job=None, pid=101)
    keys = {signatures.key_of(r) for r in (spin, block)}
    assert {k.state for k in keys} == {"busy", "blocked"}
    assert {k.frames[0] for k in keys} == {"iree_fault_spin", "iree_fault_block"}


def test_a_core_dump_names_the_crashing_thread_below_its_signal_handler(tmp_path: Path) -> None:
    # the journal's tid (5359, the main thread) is overridden by the core's current thread
    row = _row("crash", "device-release", _folder(tmp_path, "a", "gdb_core_segv.txt", 5359),
               signal="SIGSEGV")
    ev = stacks.failing_stack(row)
    assert ev.frames == ("iree_fault_segv", "fire", "pthread_join")
    assert ev.source == stacktext.StackTool.GDB_CORE.describe()
    dump = stacktext.parse((STACKS / "gdb_core_segv.txt").read_text())
    assert dump.signal == "SIGSEGV" and dump.crashed is not None and dump.crashed.tid == 5365


def test_a_crash_with_only_faulthandler_output_uses_the_current_thread(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "a", "", None,
                     text="# faulthandler\nprocess was already dead; see stderr.tail\n",
                     stderr=(STACKS / "faulthandler_segv.txt").read_text())
    ev = stacks.failing_stack(_row("crash", "device-release", folder, signal="SIGSEGV"))
    assert ev.frames == ("release_device [victim.py]",)
    assert "faulthandler" in ev.source


def test_harness_and_threading_frames_never_enter_a_signature() -> None:
    text = ('Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent '
            'call first):\n  File "/x/stress/engine/patterns.py", line 3 in release\n'
            '  File "/usr/lib/python3.11/threading.py", line 982 in run\n')
    dump = stacktext.parse_faulthandler(text)
    assert dump.signal == "SIGSEGV"
    assert framerules.meaningful(dump.threads[0].frames) == []


def test_the_engine_header_names_the_crashed_thread() -> None:
    body = (STACKS / "gdb_spin.txt").read_text().split("\n", 1)[1]
    dump = stacktext.parse("# core+gdb\n# thread 5009 took SIGSEGV; crashing frames: x\n" + body)
    assert dump.tool is stacktext.StackTool.GDB_CORE
    assert dump.failing(native_tid=5003) is dump.thread(5009)


@pytest.mark.parametrize("sample", sorted(p.name for p in STACKS.glob("*.txt")
                                          if not p.name.startswith("victim")))
def test_every_sample_parses_into_threads_with_frames(sample: str) -> None:
    dump = stacktext.parse((STACKS / sample).read_text())
    assert dump.tool is not stacktext.StackTool.UNKNOWN
    assert len(dump.threads) >= 3 and all(t.frames for t in dump.threads)


def test_rules_are_read_from_files_a_user_can_extend(tmp_path: Path) -> None:
    for name in ("irrelevant.txt", "prefix.txt", "signal_handler.txt"):
        (tmp_path / name).write_text((framerules.SIGLISTS / name).read_text())
    with (tmp_path / "irrelevant.txt").open("a") as f:
        f.write("fire\n")
    r = framerules.Rules.load(tmp_path)
    dump = stacktext.parse((STACKS / "pyspy_spin.txt").read_text())
    frames = framerules.meaningful(dump.thread(5009).frames, r)  # type: ignore[union-attr]
    assert framerules.key_frames(frames, r)[:2] == ("iree_fault_spin", "pthread_join")
    (tmp_path / "prefix.txt").write_text("# broken\n(unclosed\n")
    with pytest.raises(ValueError, match=r"prefix.txt:2"):
        framerules.Rules.load(tmp_path)


def test_errors_group_by_message_shape_and_count_exactly() -> None:
    data = RunData([], jobs=_jobs(30))
    data.failures = [_row("error", "module-load", None, job=j, message=f"INVALID_CONTEXT at {j}")
                     for j in (1, 2)]
    data.counts = [{"run_id": "r1", "job_index": j, "program": "p", "pattern": "cross-thread",
                    "key": "error|module-load|INVALID_CONTEXT at #", "count": 7}
                   for j in (1, 2, 3)]
    sigs = signatures.build(data)
    assert len(sigs) == 1
    s = sigs[0]
    assert s.count == 21 and len(s.jobs) == 3 and len(s.rows) == 2
    assert s.rate is not None and s.rate.failures == 3 and s.rate.units == 30
    assert s.key.message == "INVALID_CONTEXT at #"


def test_a_failure_at_process_exit_is_rated_per_exit() -> None:
    data = RunData([], jobs=_jobs(40))
    data.workers = [{"run_id": "r1", "pid": 100 + i, "ended_at": 1.0} for i in range(10)]
    data.failures = [_row("teardown_hang", "worker-exit", None, job=None, pid=100 + i,
                          exposure="process_exit") for i in (1, 4)]
    s = signatures.build(data)[0]
    assert s.exposure is Exposure.PROCESS_EXIT
    assert s.rate is not None and (s.rate.failures, s.rate.units) == (2, 10)
    assert s.as_dict()["rate_per_exposure"] == pytest.approx(0.2)


def test_ids_are_a_hash_of_the_normalised_key_and_stable() -> None:
    k = sigkeys.SignatureKey("crash", "SIGSEGV", "device-release", "",
                                ("iree_fault_segv", "fire"), "")
    assert k.text() == "crash|SIGSEGV|device-release||iree_fault_segv < fire|"
    assert k.id == sigkeys.SignatureKey(*[getattr(k, f) for f in (
        "cls", "signal", "step", "state", "frames", "message")]).id
    assert k.id.startswith("S") and len(k.id) == 9


def test_cpu_specific_libc_variants_keep_one_id_across_machines() -> None:
    def key(variant: str) -> tuple[str, ...]:
        text = ("Program terminated with signal SIGSEGV, Segmentation fault.\n"
                "[Current thread is 1 (Thread 0x7f (LWP 42))]\n\n"
                "Thread 1 (Thread 0x7f (LWP 42)):\n"
                f"#0  {variant} () at ../sysdeps/x86_64/multiarch/memset.S:178\n"
                "#1  0x00007f in ?? () from /lib/x86_64-linux-gnu/libffi.so.8\n"
                "#2  0x00007f in iree_hal_buffer_map_zero () from /x/libiree_runtime.so.3\n"
                "#3  0x00007f in _PyEval_EvalFrameDefault () at Python/ceval.c:3113\n")
        thread = stacktext.parse_gdb(text).crashed
        assert thread is not None
        return framerules.key_frames(framerules.meaningful(thread.frames, crashed=True))

    assert key("__memset_avx512_unaligned_erms") == key("__memset_avx2_unaligned") == \
        ("memset", "iree_hal_buffer_map_zero")


def test_the_crashing_threads_own_step_corrects_a_misattributed_one(tmp_path: Path) -> None:
    """The journal blamed the thread in readback; the core says thread 5365 crashed, and the
    row's raw entries show 5365 was releasing a device (a cross-thread job)."""
    row = _row("crash", "readback", _folder(tmp_path, "a", "gdb_core_segv.txt"), tid=77,
               signal="SIGSEGV")
    row["steps"] = [{"t": 1, "tid": 77, "step": "readback", "phase": "begin", "failing": True},
                    {"t": 2, "tid": 5365, "step": "job", "phase": "begin", "failing": False},
                    {"t": 3, "tid": 5365, "step": "device-release", "phase": "begin",
                     "failing": False}]
    stack = stacks.failing_stack(row)
    assert stack.tid == 5365
    assert signatures.failing_step(row, stack) == "device-release"
    key = signatures.key_of(row, stack)
    assert key.step == "teardown" and key.frames[0] == "iree_fault_segv"


def test_the_same_frames_at_device_and_driver_release_are_one_teardown_mode(
        tmp_path: Path) -> None:
    rows = [_row("crash", step, _folder(tmp_path, step, "gdb_core_segv.txt"), job=i,
                 signal="SIGSEGV") for i, step in enumerate(("device-release", "driver-release"))]
    rows.append(_row("crash", "invoke", None, job=5, signal="SIGSEGV"))  # no frames: own step
    sigs = signatures.build(RunData([], jobs=_jobs(10), failures=rows))
    assert sorted(s.key.step or "" for s in sigs) == ["invoke", "teardown"]
    teardown = next(s for s in sigs if s.key.step == "teardown")
    assert teardown.where_step() == "teardown (device-release 1, driver-release 1)"


def test_a_hangs_faulthandler_dump_does_not_blame_the_thread_that_handled_the_signal(
        tmp_path: Path) -> None:
    """A hang's faulthandler dump (SIGUSR1) calls the signal-handling thread "current": it is
    not the stuck one, and has no native tid to match: no frames rather than wrong ones."""
    folder = _folder(tmp_path, "a", "", 4242, text="# faulthandler\n",
                     stderr=(STACKS / "faulthandler_segv.txt").read_text())
    hang = stacks.failing_stack(_row("hang", "invoke", folder, tid=4242))
    assert hang.frames == ()
    crash = stacks.failing_stack(_row("crash", "invoke", folder, signal="SIGSEGV"))
    assert crash.frames == ("release_device [victim.py]",)
