"""A crash's fault site from its core's notes alone (`corenotes.FaultSite`): real processes,
real cores written by this kernel, cut at the evidence budget's size limit as its processes'
are; the function named from the program's own symbol table, never from a stripped one."""

from __future__ import annotations

import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stress.engine import elfsyms, postmortem
from stress.engine.callstacks import StackSource

pytestmark = pytest.mark.skipif(
    postmortem.read_core_pattern()[0].startswith("|") or
    resource.getrlimit(resource.RLIMIT_CORE)[1] not in (resource.RLIM_INFINITY,) and
    resource.getrlimit(resource.RLIMIT_CORE)[1] < 64 << 10,
    reason="cores go to a pipe handler here, or the hard core limit is too small")


def crash(argv: list[str], cwd: Path, limit: int) -> Path:
    """Runs `argv` in `cwd` with RLIMIT_CORE `limit`; the core it left (it must die by
    SIGSEGV)."""
    def pre() -> None:
        resource.setrlimit(resource.RLIMIT_CORE, (limit, resource.RLIM_INFINITY))

    for old in cwd.glob("core*"):
        old.unlink()
    res = subprocess.run(argv, cwd=cwd, preexec_fn=pre, capture_output=True, timeout=60)
    assert res.returncode == -11, res
    cores = [p for p in cwd.glob("core*") if postmortem.read_core_notes(p) is not None]
    assert len(cores) == 1, list(cwd.iterdir())
    return cores[0]


def test_a_core_cut_after_its_notes_names_the_function_that_faulted(
        tmp_path: Path, two_faults: Path) -> None:
    """64 KiB of a core: no memory, yet the notes give the faulting instruction's module,
    offset and (from the program's symbols) function, one per mode, the same run to run."""
    sites = []
    for arg in ("0", "1", "2"):
        core = crash([str(two_faults), arg], tmp_path, 64 << 10)
        notes = postmortem.read_core_notes(core)
        assert notes is not None and notes.whole and not notes.memory
        assert core.stat().st_blocks * 512 <= 64 << 10  # (sparse past the notes)
        site = postmortem.fault_site(notes)
        assert site is not None and site["module"] == str(two_faults)
        sites.append(site)
    assert [s["function"] for s in sites] == ["fault_reading", "fault_writing",
                                              "fault_reading"]
    assert sites[0]["key"] == sites[2]["key"] == "fault_reading [twofaults]"
    assert sites[0]["text"] == f"fault_reading (twofaults+{sites[0]['offset']:#x})"
    assert sites[0]["addr"] == 0  # the null read
    # the whole core says the same
    full = postmortem.fault_site(postmortem.read_core_notes(
        crash([str(two_faults), "1"], tmp_path, 64 << 20)))
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
    core = crash([str(two_faults), "1"], tmp_path, postmortem.NOTES_CORE_BYTES)
    notes = postmortem.read_core_notes(core)
    assert notes is not None
    if notes.memory:  # (this small program's whole core fits under the limit: cut it)
        core = crash([str(two_faults), "1"], tmp_path, 64 << 10)
        notes = postmortem.read_core_notes(core)
        assert notes is not None and not notes.memory
    stacks = postmortem.native_stacks(notes.pid, str(two_faults), tmp_path, "")
    assert stacks.tool is not StackSource.CORE_GDB and stacks.threads == []
    assert "notes only" in stacks.note
    assert stacks.fault_site is not None and stacks.fault_site["function"] == "fault_writing"
    assert stacks.summary()["fault_site"]["key"] == "fault_writing [twofaults]"
    assert not core.exists()  # read, then deleted like any core
