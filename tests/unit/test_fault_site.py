"""A crash's fault site from its core's notes alone (`corenotes.FaultSite`): real processes,
real cores written by this kernel, cut at the evidence budget's size limit as its processes'
are; the function named from the program's own symbol table, never from a stripped one."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stress.engine import elfsyms, postmortem
from stress.engine.callstacks import StackSource

pytestmark = pytest.mark.skipif(
    not postmortem.read_core_pattern()[0].startswith("core") or  # (a file in the cwd)
    resource.getrlimit(resource.RLIMIT_CORE)[1] not in (resource.RLIM_INFINITY,) and
    resource.getrlimit(resource.RLIMIT_CORE)[1] < 64 << 10,
    reason="cores do not go to `core*` in the crashing process's folder here, or the hard "
           "core limit is too small")


NOTES = -1  # crash()'s limit for a notes-only core as the budget's processes get one


def crash(argv: list[str], cwd: Path, limit: int) -> Path:
    """Runs `argv` in `cwd` with RLIMIT_CORE `limit` (NOTES: notes only, `postmortem.
    notes_only` on the child once started); the core it left (it must die by SIGSEGV)."""
    def pre() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (max(limit, 0), resource.RLIM_INFINITY))

    for old in cwd.glob("core*"):
        old.unlink()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    if limit == NOTES:  # stopped until it is made notes-only, as a launch does
        wrapped = [sys.executable, "-c", "import os, signal, sys; os.kill(os.getpid(), "
                   "signal.SIGSTOP); os.execv(sys.argv[1], sys.argv[1:])", *argv]
        proc = subprocess.Popen(wrapped, cwd=cwd, preexec_fn=pre, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.waitpid(proc.pid, os.WUNTRACED)
        assert postmortem.notes_only(proc.pid)
        os.kill(proc.pid, signal.SIGCONT)
        proc.communicate(timeout=60)
        res = subprocess.CompletedProcess(wrapped, proc.returncode)
    else:
        res = subprocess.run(argv, cwd=cwd, preexec_fn=pre, capture_output=True, timeout=60,
                             env=env)
    assert res.returncode == -11, res
    cores = [p for p in cwd.glob("core*") if postmortem.read_core_notes(p) is not None]
    assert len(cores) == 1, list(cwd.iterdir())
    return cores[0]


def test_a_notes_only_core_names_the_function_that_faulted(
        tmp_path: Path, two_faults: Path) -> None:
    """A notes-only core (coredump_filter 0, as the budget's processes dump): no memory, a few
    KiB, yet the notes give the faulting instruction's module, offset and (from the program's
    symbols) function, one per mode, the same run to run; a core cut at a small size limit
    says the same."""
    sites = []
    for arg, limit in (("0", NOTES), ("1", NOTES), ("2", 64 << 10)):
        core = crash([str(two_faults), arg], tmp_path, limit)
        notes = postmortem.read_core_notes(core)
        assert notes is not None and notes.whole and not notes.memory, (arg, notes)
        assert core.stat().st_blocks * 512 <= 256 << 10, core.stat()
        site = postmortem.fault_site(notes)
        assert site is not None and site["module"] == str(two_faults)
        sites.append(site)
    assert [s["function"] for s in sites] == ["fault_reading", "fault_writing",
                                              "fault_reading"]
    assert sites[0]["key"] == sites[2]["key"] == "fault_reading [twofaults]"
    assert sites[0]["text"] == f"fault_reading (twofaults+{sites[0]['offset']:#x})"
    assert sites[0]["addr"] == 0  # the null read
    # the whole core says the same, and holds the stack
    whole = postmortem.read_core_notes(crash([str(two_faults), "1"], tmp_path, 64 << 20))
    assert whole is not None and whole.memory
    full = postmortem.fault_site(whole)
    assert full is not None and full["key"] == sites[1]["key"]


def test_a_stripped_program_gives_a_module_and_offset_not_a_neighbour_s_name(
        tmp_path: Path, two_faults: Path) -> None:
    strip = shutil.which("strip")
    if strip is None:
        pytest.skip("no strip here")
    bare = tmp_path / "bare"
    shutil.copy(two_faults, bare)
    subprocess.run([strip, str(bare)], check=True)
    site = postmortem.fault_site(postmortem.read_core_notes(
        crash([str(bare), "0"], tmp_path, 64 << 10)))
    assert site is not None and site["function"] is None
    assert site["key"] == f"bare+{site['offset']:#x}"
    assert elfsyms.function_at(str(two_faults), site["offset"]) == "fault_reading"


def test_a_signal_re_raised_by_a_handler_has_no_fault_site(tmp_path: Path) -> None:
    """Python's faulthandler re-raises the signal from its handler: the registers are then
    libc's raise, which is no fault site; without the handler the fault is libc's own."""
    code = "import ctypes; ctypes.string_at(0)"
    handled = postmortem.read_core_notes(
        crash([sys.executable, "-X", "faulthandler", "-c", code], tmp_path, 64 << 10))
    assert handled is not None and handled.si_code is not None and handled.si_code <= 0
    assert postmortem.fault_site(handled) is None
    plain = postmortem.read_core_notes(
        crash([sys.executable, "-c", code], tmp_path, 64 << 10))
    site = postmortem.fault_site(plain)
    assert site is not None and "libc" in site["module"]


def test_the_post_mortem_of_a_notes_only_core_reads_no_stacks_and_says_why(
        tmp_path: Path, two_faults: Path) -> None:
    """A core cut at the budget's limit has no stack memory: no debugger is run on it (its
    frames would be made up), the note says so, and the fault site stands."""
    core = crash([str(two_faults), "1"], tmp_path, NOTES)
    notes = postmortem.read_core_notes(core)
    assert notes is not None and not notes.memory
    stacks = postmortem.native_stacks(notes.pid, str(two_faults), tmp_path, "")
    assert stacks.tool is not StackSource.CORE_GDB and stacks.threads == []
    assert "no stack memory" in stacks.note
    assert stacks.fault_site is not None and stacks.fault_site["function"] == "fault_writing"
    assert stacks.summary()["fault_site"]["key"] == "fault_writing [twofaults]"
    assert not core.exists()  # read, then deleted like any core
