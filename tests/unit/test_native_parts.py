"""The native engine's pure parts (issue 12): tool command lines, where the tools are, which
programs they can run, output checks, status lines, and the replay keeper's disk bound."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from stress.engine import replay
from stress.engine.native import (
    _LOG_KEEP_BYTES,
    NativeRunner,
    ProgramData,
    check,
    prepare,
    status_message,
    unsupported,
)
from stress.engine.nativetools import (
    NativeTools,
    ToolsMissing,
    bench_argv,
    find_tools,
    replay_argv,
    run_argv,
)
from stress.engine.workermanage import State, WorkerHandle
from stress.programs import corpus

TOOLS = NativeTools(Path("/stack/iree/_runtime_libs"))


def test_a_run_job_is_one_iree_run_module_with_inputs_from_files_and_its_output_to_a_file(
        ) -> None:
    argv = run_argv(TOOLS, Path("/c/p.vmfb"), "local-task", "main",
                    [Path("/i/in0.npy"), Path("/i/in1.npy")], Path("/w/out.npy"))
    assert argv == ["/stack/iree/_runtime_libs/iree-run-module", "--module=/c/p.vmfb",
                    "--device=local-task", "--function=main", "--input=@/i/in0.npy",
                    "--input=@/i/in1.npy", "--output=@/w/out.npy"]
    recorded = run_argv(TOOLS, Path("/c/p.vmfb"), "hip", "main", [], Path("/w/o.npy"),
                        Path("/r/j.ireereplay"))
    assert recorded[-1] == "--device_replay_output=/r/j.ireereplay"


def test_a_bench_job_runs_exactly_its_invocations_and_a_replay_names_its_device() -> None:
    argv = bench_argv(TOOLS, Path("/c/p.vmfb"), "cuda", "main", [Path("/i/a.npy")], 100)
    assert argv[0].endswith("iree-benchmark-module") and "--benchmark_min_time=100x" in argv
    assert replay_argv(TOOLS, Path("/r/x.ireereplay"), "local-sync") == [
        "/stack/iree/_runtime_libs/iree-run-replay", "--device=local-sync", "/r/x.ireereplay"]


def _fake_tool(path: Path, elf: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x7fELF..." if elf else b"#!/usr/bin/python\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_tools_are_the_binaries_in_runtime_libs_not_the_venv_script_wrappers(
        tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _fake_tool(venv / "bin" / "iree-run-module", elf=False)  # pip's entry-point script
    (venv / "bin" / "python").write_text("")
    libs = venv / "lib" / "python3.12" / "site-packages" / "iree" / "_runtime_libs"
    _fake_tool(libs / "iree-run-module", elf=True)
    assert find_tools(str(venv / "bin" / "python")).folder == libs


def test_missing_tools_say_where_they_were_looked_for(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    py = tmp_path / "bin" / "python"
    py.parent.mkdir()
    py.symlink_to("/bin/false")  # "cannot import iree"
    with pytest.raises(ToolsMissing, match="iree-run-module"):
        find_tools(str(py))


def test_programs_the_tools_cannot_check_are_named_with_the_reason() -> None:
    progs = corpus.select([])
    reasons = {p.name: unsupported(p) for p in progs}
    assert any(r is None for r in reasons.values())
    assert all(r == "bf16 (no .npy dtype)" for n, r in reasons.items() if ".bf16." in n)


def test_inputs_are_written_once_and_outputs_are_checked_against_the_reference(
        tmp_path: Path) -> None:
    prog = next(p for p in corpus.select(["unary.exp.f32*"]))
    data = prepare(prog, tmp_path / "in")
    assert [p.name for p in data.inputs] == ["in0.npy"]
    x = np.load(data.inputs[0])
    good = np.exp(x).astype(np.float32)
    assert check(data, good) is None
    bad = good.copy()
    bad.reshape(-1)[-1] += 100
    assert "differs from the numpy reference" in (check(data, bad) or "")


def test_without_a_reference_the_first_output_is_the_golden_one() -> None:
    data = ProgramData([], None, "f32")
    a = np.ones(4, np.float32)
    assert check(data, a) is None and check(data, a.copy()) is None
    assert "first result" in (check(data, a + 1) or "")


def test_a_failed_tool_is_summed_up_by_its_iree_status_line() -> None:
    err = ("EXEC @main\n"
           "iree/runtime/src/iree/vm/invocation.c:123: INVALID_ARGUMENT; input 0 shape "
           "mismatch; expected tensor<64x64xf32>\n"
           "    at iree/tooling/run_module.c:77\n")
    assert status_message(err).startswith("iree/runtime/src/iree/vm/invocation.c:123: "
                                          "INVALID_ARGUMENT;")
    assert status_message("segfault somewhere\n\n") == "segfault somewhere"


def _replay(folder: Path, name: str, size: int) -> Path:
    p = folder / f"{name}.ireereplay"
    folder.mkdir(parents=True, exist_ok=True)
    p.write_bytes(os.urandom(size))
    return p


def test_failed_replays_are_kept_healthy_ones_sampled_and_the_total_stays_under_the_cap(
        tmp_path: Path) -> None:
    keeper = replay.ReplayKeeper(tmp_path / "r", cap_bytes=10_000)
    assert keeper.settle(_replay(keeper.folder, "f0", 1000), "p", failed=True)
    assert keeper.settle(_replay(keeper.folder, "h0", 1000), "p", failed=False)  # first of p
    kept_healthy = sum(keeper.settle(_replay(keeper.folder, f"h{i}", 1000), "p", failed=False)
                       for i in range(1, 2 * replay.HEALTHY_SAMPLE_EVERY))
    assert kept_healthy == 2  # one in HEALTHY_SAMPLE_EVERY
    while keeper.settle(_replay(keeper.folder, f"f{keeper.kept}", 1000), "p", failed=True):
        pass
    assert replay.size_of(keeper.folder) <= 10_000 == keeper.cap_bytes
    assert keeper.kept_bytes == replay.size_of(keeper.folder)


def _op(seq: int, op: str, **payload: object) -> dict[str, object]:
    return {"kind": "operation", "sequence_ordinal": seq, "operation": op,
            "object_id": 1, "payload": payload}


def test_submissions_no_later_call_waited_on_are_pending_and_the_tail_ends_at_the_last_call(
        ) -> None:
    records = [{"kind": "file"},
               _op(1, "device.queue_alloca", signal_semaphores=[{"semaphore_id": 7,
                                                                  "value": 1}]),
               _op(2, "device.queue_execute",
                   wait_semaphores=[{"semaphore_id": 7, "value": 1}],
                   signal_semaphores=[{"semaphore_id": 9, "value": 1}]),
               _op(3, "buffer.map_range")]
    assert [r["sequence_ordinal"] for r in replay.pending(records)] == [2]
    assert [r["sequence_ordinal"] for r in replay.tail(records, 2)] == [2, 3]
    assert replay.last_operation(records) == "buffer.map_range"


@pytest.mark.parametrize(("rc", "reused"), [(-11, False), (0, True), (3, True)])
def test_a_slot_is_not_reused_while_a_crashed_process_core_waits_in_it(
        tmp_path: Path, rc: int, reused: bool) -> None:
    """A core is read in the background and the kernel would replace a `core` of the same
    name: the slot of a process killed by a signal waits while its folder holds one. A
    process that exited (0, or an IREE status) leaves no core: its slot is free at once,
    even with a file named like a core there (its folder is not looked at)."""
    runner = NativeRunner(TOOLS, {}, {}, "local-task", tmp_path)
    assert runner.slots.take() == 0
    cwd, _, _, _ = runner.slot_files(0)
    (cwd / "core.4242").write_bytes(b"\0")
    runner.slots.hold(0, SimpleNamespace(state=State.EXITED,  # type: ignore[arg-type]
                                         proc=SimpleNamespace(returncode=rc)))
    assert runner.slots.take() == (0 if reused else 1)
    if not reused:
        (cwd / "core.4242").unlink()  # its reader finished
        assert runner.slots.take() == 0
    runner.close()


def test_a_process_reads_only_its_own_part_of_its_slots_log(tmp_path: Path) -> None:
    """A slot's two logs are emptied only past a size, not per job: a process's output is
    read from where it started, so an earlier job's error status is never taken as its own."""
    runner = NativeRunner(TOOLS, {}, {}, "local-task", tmp_path)
    _, path, fd, start = runner.slot_files(0)
    assert start == 0
    os.write(fd, b"iree/hal/x.c:1: INTERNAL; an earlier job's failure\n")
    runner.slot_files(0)  # the slot's other log
    _, again, fd, start = runner.slot_files(0)
    assert again == path and start > 0
    os.write(fd, b"EXEC @main\n")
    h = WorkerHandle(0, 0, SimpleNamespace(pid=1), -1,  # type: ignore[arg-type]
                     tmp_path / "j", path, path, ephemeral=True, log_from=start)
    assert h.tail(path) == "EXEC @main\n"
    os.write(fd, b"x" * (_LOG_KEEP_BYTES + 1))
    runner.slot_files(0)
    _, _, fd, start = runner.slot_files(0)
    assert start == 0 and os.fstat(fd).st_size == 0
    runner.close()
