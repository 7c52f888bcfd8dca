"""The ROCm path on the stand-in libamdhip64 (issue 37): IREE's real hip driver, from the
installed iree-base-runtime wheel, loads tests/native/fakehip.c and runs its whole host side;
`soak --target rocm` goes through every lifecycle pattern and exit path on it (in CI)."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli
from tests.helpers import fakehip

# every pattern of the default family and every exit path, one short soak (kept short: CI)
_PATTERNS: str = "all,exit"
_PROGRAMS: str = "unary.abs.f32.64x64,transfer.*"
# the exit paths that crash on every target, cpu included (docs/known/cpu-exit-paths.toml,
#   docs/exit-paths.md): IREE's objects left to the interpreter's teardown, a daemon thread
#   inside a binding call at finalization
_CRASH_EVERYWHERE: frozenset[str] = frozenset({"exit-alive", "exit-thread"})


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        return fakehip.build(tmp_path_factory.mktemp("fakehip"))
    except fakehip.NoCompiler:
        pytest.skip("no C compiler to build the stand-in HIP library")


def _hip_env(lib: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, fakehip.ENV_DYLIB: fakehip.dylib_env(lib), **extra}


def test_stand_in_exports_every_hip_symbol_the_installed_runtime_resolves(
        stand_in: Path) -> None:
    runtime = fakehip.runtime_library()
    assert len(fakehip.required_symbols(runtime)) >= 70  # IREE's table: ~75 entry points
    missing = fakehip.missing_symbols(stand_in, runtime)
    assert not missing, "\n".join(missing)


def test_a_library_without_the_hip_symbols_is_named_symbol_by_symbol(fault_lib: Path) -> None:
    missing = fakehip.missing_symbols(fault_lib, fakehip.runtime_library())
    assert "missing HIP symbol hipInit (resolved by " in "\n".join(missing)
    assert len(missing) == len(fakehip.required_symbols(fakehip.runtime_library()))


def test_the_real_hip_driver_loads_the_stand_in_and_names_what_it_is(stand_in: Path) -> None:
    code = ("import json\nfrom iree.runtime import _binding as b\n"
            "d = b.create_hal_driver('hip')\ndevs = d.query_available_devices()\n"
            "print(json.dumps({'names': [x['name'] for x in devs], "
            "'info': d.dump_device_info(devs[0]['device_id'])}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=_hip_env(stand_in), timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["names"] == [fakehip.DEVICE_NAME]
    assert f"amdhip64_dylib_path: {stand_in}" in got["info"]
    assert "gpu-arch-name: gfx942 (stand-in)" in got["info"]


def test_module_load_takes_only_an_amdgpu_code_object(stand_in: Path, tmp_path: Path) -> None:
    lib = ctypes.CDLL(str(stand_in))
    module = ctypes.c_void_p()
    host_elf = Path(sys.executable).resolve().read_bytes()[:4096]  # x86-64: e_machine 62
    assert lib.hipModuleLoadData(ctypes.byref(module), host_elf) == 200  # hipErrorInvalidImage
    amdgpu = bytearray(host_elf[:64])
    amdgpu[18:20] = (224).to_bytes(2, "little")  # EM_AMDGPU
    amdgpu[40:48] = (0).to_bytes(8, "little")  # no section headers: the header alone
    amdgpu[60:62] = (0).to_bytes(2, "little")
    assert lib.hipModuleLoadData(ctypes.byref(module), bytes(amdgpu)) == 0
    assert lib.hipModuleUnload(module) == 0


def test_function_handles_are_freed_with_their_module(stand_in: Path) -> None:
    """IREE looks its kernels up at every executable load, and a per-call soak loads hundreds
    of modules a second: handles kept until exit grew a worker by their size each time."""
    lib = ctypes.CDLL(str(stand_in))
    image = bytearray(Path(sys.executable).resolve().read_bytes()[:64])
    image[18:20] = (224).to_bytes(2, "little")  # EM_AMDGPU
    image[40:48] = (64).to_bytes(8, "little")  # no section headers: the header alone
    image[58:62] = bytes(4)
    image[9:11] = b"k\0"  # a function name inside the image (e_ident's padding)

    def rss_kib() -> int:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf(
            "SC_PAGE_SIZE") // 1024

    def cycle() -> None:
        module, fn = ctypes.c_void_p(), ctypes.c_void_p()
        assert lib.hipModuleLoadData(ctypes.byref(module), bytes(image)) == 0
        for _ in range(100_000):
            assert lib.hipModuleGetFunction(ctypes.byref(fn), module, b"k") == 0
        assert lib.hipModuleUnload(module) == 0

    cycle()  # the allocator's arenas grow once
    before = rss_kib()
    for _ in range(3):
        cycle()
    assert rss_kib() - before < 20_000  # 3 x 100,000 handles kept: ~80 MB


def _soak(lib: Path, run: Path, launches: Path, patterns: str, programs: str,
          invocations: int) -> dict[str, Any]:
    # a planned number of invocations, not a duration: every pattern gets its jobs however
    #   slow the machine is
    res = run_cli("soak", "--target", "rocm", "--patterns", patterns, "--programs", programs,
                  "--invocations", str(invocations), "--workers", "2", "--results", str(run),
                  "--env", f"{fakehip.ENV_DYLIB}={fakehip.dylib_env(lib)}",
                  "--env", f"FAKEHIP_LAUNCH_FILE={launches}", "--json", "-q", timeout=400)
    assert res.rc in (0, 1), res.stderr[-3000:]
    s: dict[str, Any] = json.loads(res.stdout)
    # clean: no error, hang, teardown hang or miscompare anywhere; the only crashes are the
    #   exit paths that crash on cpu too
    assert {k for k, v in s["failures"].items() if v} <= {"crash"}, s["failures_detail"][:3]
    assert {f["job"]["pattern"] for f in s["failures_detail"]} <= _CRASH_EVERYWHERE, \
        s["failures_detail"][:3]
    return s


def test_rocm_soak_on_the_stand_in_runs_every_pattern_and_exit_path(
        stand_in: Path, tmp_path: Path) -> None:
    """The Done-when line of issue 37: compile for gfx942, IREE's hip driver on the stand-in,
    every lifecycle pattern and exit path with invocations counted, the header naming the
    stand-in device and the library loaded; kernels launched and counted by the stand-in;
    the transfer-only programs checked end to end (the others unchecked: no kernel ran)."""
    launches = tmp_path / "launches"
    core = _soak(stand_in, tmp_path / "core", launches, "all", _PROGRAMS, 600)
    exits = _soak(stand_in, tmp_path / "exits", launches, "exit", "transfer.slice.*", 48)
    ran = {p for s in (core, exits) for p, n in s["patterns"].items() if n > 0}
    want = {"shared", "per-thread", "per-call", "churn", "instance-churn", "cross-thread",
            "process-per-job", "exit-clean", "exit-alive", "exit-inflight", "exit-thread",
            "exit-sigterm", "exit-os-exit"}
    assert want <= ran, (core["patterns"], exits["patterns"])
    by_pattern = {**core["exposures"]["process_exits"]["by_pattern"],
                  **exits["exposures"]["process_exits"]["by_pattern"]}
    for pattern in ("exit-clean", "exit-inflight", "exit-sigterm", "exit-os-exit",
                    "process-per-job"):
        n = by_pattern[pattern]
        assert n["total"] >= 1 and n["clean"] == n["total"], (pattern, n)
    # kernels were launched on the stand-in's streams, and counted there
    assert sum(int(line.split()[1]) for line in launches.read_text().splitlines()) > 0
    # the header says what ran: the stand-in, the library, how results were checked
    rep = run_cli("report", str(tmp_path / "core"))
    header = {k: v for k, _, v in (line.partition(": ") for line in rep.stdout.splitlines())}
    assert header["device"] == f"hip: {fakehip.DEVICE_NAME}", header
    assert header["driver"] == f"hip, library {stand_in}", header
    numerics = next(line for line in rep.stdout.splitlines() if line.startswith("numerics:"))
    assert "results not checked for 1 of 4 (the device runs no kernels (" in numerics, numerics
    assert numerics.endswith("numpy reference for transfer.slice.f32.64x64, "
                             "transfer.concat.f16.64x64+64x64, transfer.pad.f32.64x64"), numerics
    # the manifest proves which library IREE's driver loaded
    m = core["manifest"]
    assert m["hip_library"] == str(stand_in)
    assert m["hip_library_sha256"] == hashlib.sha256(stand_in.read_bytes()).hexdigest()
    assert str(stand_in) in m["hip_library_mapped"]
    # and hashes it among the stack's libraries (what makes two nightlies one stack), though
    #   the driver dlclosed it before the facts were read (before: IREE's runtime alone)
    assert m["library_hashes"].get(str(stand_in)) == m["hip_library_sha256"], \
        m["library_hashes"]


def test_driver_churn_on_the_stand_in_creates_and_destroys_the_hip_driver_per_job(
        stand_in: Path, tmp_path: Path) -> None:
    """Issue 39 on the HIP lane: each driver-churn job creates IREE's hip driver on the
    library named by IREE_HIP_DYLIB_PATH, a device on it, runs, and destroys both; clean on
    the stand-in, every job's driver teardown counted as its own exposure. (Whether the
    library itself is unloaded depends on other drivers alive in the process:
    docs/phases.md.)"""
    s = _soak(stand_in, tmp_path / "dc", tmp_path / "launches", "driver-churn",
              "transfer.slice.*", 24)
    jobs = s["patterns"]["driver-churn"]
    assert jobs >= 1 and not s["failures_detail"], s["failures_detail"][:3]
    assert s["exposures"]["driver_teardowns"]["total"] == s["jobs"] >= 1, s["exposures"]


def test_a_fault_name_the_stand_in_does_not_know_is_one_line_not_a_crash_found(
        stand_in: Path, tmp_path: Path) -> None:
    """A typo in FAKEHIP_FAULT: before, the library aborted in every process that loaded it
    (47 SIGABRT 'failures' in 3 s, FAILURES FOUND, exit 1); now hipInit refuses with the
    reason and the soak stops at its driver check (exit 2)."""
    res = run_cli("soak", "--target", "rocm", "--programs", "transfer.slice.*", "--patterns",
                  "per-call", "--invocations", "4", "--workers", "1", "--results",
                  str(tmp_path / "run"), "--env",
                  f"{fakehip.ENV_DYLIB}={fakehip.dylib_env(stand_in)}", "--env",
                  "FAKEHIP_FAULT=cleanup-segvv", timeout=300)
    assert res.rc == 2, res.stdout[-2000:] + res.stderr[-2000:]
    errors = [line for line in res.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "FAKEHIP_FAULT=cleanup-segvv is not a fault it knows (events-spin, " in errors[0]


def _stacks(tmp_path: Path) -> tuple[Path, Path]:
    """A stacks file: `rocm-clean` (a tarball holding a clean stand-in), `rocm-teardown-fault`
    (one with release-spin compiled in, p = 0.3 per stream release), `rocm-cleanup-segv` (one
    whose own cleanup crashes in every process), `rocm-clean-other-loaded` (the clean
    tarball, with another copy of the library preloaded). Returns (file, clean lib)."""
    try:
        clean = fakehip.build(tmp_path / "clean")
        bad = fakehip.build(tmp_path / "bad", fault="release-spin", prob=0.3)
        other = fakehip.build(tmp_path / "other")
        segv = fakehip.build(tmp_path / "segv", fault="cleanup-segv")
    except fakehip.NoCompiler:
        pytest.skip("no C compiler to build the stand-in HIP library")
    f = tmp_path / "stacks.toml"
    f.write_text(
        f'[stacks.rocm-clean]\nrocm = "{fakehip.rocm_tarball(clean, tmp_path / "c.tar.gz")}"\n'
        f'[stacks.rocm-teardown-fault]\n'
        f'rocm = "{fakehip.rocm_tarball(bad, tmp_path / "b.tar.gz")}"\n'
        f'[stacks.rocm-cleanup-segv]\n'
        f'rocm = "{fakehip.rocm_tarball(segv, tmp_path / "s.tar.gz")}"\n'
        f'[stacks.rocm-clean-other-loaded]\nrocm = "{tmp_path / "c.tar.gz"}"\n'
        f'env = {{ LD_PRELOAD = "{other}" }}\n')
    return f, clean


def _compare(tmp_path: Path, b: str) -> tuple[Any, Path]:
    """compare rocm-clean B, short trials of one transfer program; (result, clean library)."""
    stacks, clean = _stacks(tmp_path)
    res = run_cli("compare", "rocm-clean", b, "--stacks", str(stacks), "--target", "rocm",
                  "--programs", "transfer.slice.*", "--patterns", "per-call,process-per-job",
                  "--workers", "2", "--duration", "5s", "--teardown-timeout", "2s",
                  "--results", str(tmp_path / "cmp"),
                  timeout=1800)
    return res, clean


@pytest.mark.slow
def test_compare_of_two_tarball_stacks_finds_the_one_whose_library_stalls_in_teardown(
        tmp_path: Path) -> None:
    res, clean = _compare(tmp_path, "rocm-teardown-fault")
    assert res.rc == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert "VERDICT  B worse" in res.stdout
    assert "fakehip_release_spin" in res.stdout  # the signature new in B, its frame
    # every trial's stack.json proves which library IREE's driver loaded: path and hash
    digests = {}
    for p in (tmp_path / "cmp").glob("**/stack.json"):
        d = json.loads(p.read_text())
        assert d["hip_library_loaded"] == d["hip_library"], d  # reported by the driver
        assert d["hip_library"].endswith("/lib/libamdhip64.so"), d  # what the stack binds
        assert [os.path.realpath(x) for x in d["hip_library_mapped"]] == \
            [os.path.realpath(d["hip_library"])], d
        digests.setdefault(d["stack"], set()).add(d["hip_library_sha256"])
    assert digests["rocm-clean"] == {hashlib.sha256(clean.read_bytes()).hexdigest()}
    assert len(digests["rocm-teardown-fault"]) == 1
    assert digests["rocm-teardown-fault"] != digests["rocm-clean"]


@pytest.mark.slow
def test_compare_finds_the_stack_whose_library_segfaults_in_its_own_cleanup(
        tmp_path: Path) -> None:
    """The founding user's CI: the library crashes in cleanup, in every worker's first driver
    release (before any worker reports its runtime). Each such trial is a failure of B, never
    'no result' (before: inconclusive, exit 3)."""
    res, _ = _compare(tmp_path, "rocm-cleanup-segv")
    assert res.rc == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert "VERDICT  B worse" in res.stdout
    assert "fakehip_wake_events_thread" in res.stdout  # the signature new in B, its frame


@pytest.mark.slow
def test_a_stack_that_binds_one_hip_library_while_another_is_loaded_is_refused(
        tmp_path: Path) -> None:
    res, _ = _compare(tmp_path, "rocm-clean-other-loaded")
    assert res.rc == 3, res.stdout[-3000:] + res.stderr[-3000:]
    assert "the stack binds" in res.stdout + res.stderr


def test_a_host_to_device_copy_reads_its_source_at_the_call_as_hip_does(
        stand_in: Path) -> None:
    """IREE's command buffers free their host copy of an update once it is enqueued: HIP reads
    pageable host memory before hipMemcpyHtoDAsync returns. The stand-in read it when the
    stream got there: 88 wrong results in 6,200 shared-pattern transfer invocations."""
    import threading

    lib = ctypes.CDLL(str(stand_in))
    stream, dst = ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.hipStreamCreateWithFlags(ctypes.byref(stream), 1) == 0
    assert lib.hipMalloc(ctypes.byref(dst), ctypes.c_size_t(4)) == 0
    gate = threading.Event()
    hold = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _: gate.wait(30))
    assert lib.hipLaunchHostFunc(stream, hold, None) == 0  # the stream waits behind it
    src = ctypes.c_uint32(111)
    assert lib.hipMemcpyHtoDAsync(dst, ctypes.byref(src), ctypes.c_size_t(4), stream) == 0
    src.value = 222  # the caller reuses its memory at once
    gate.set()
    assert lib.hipStreamSynchronize(stream) == 0
    got = ctypes.c_uint32()
    assert lib.hipMemcpy(ctypes.byref(got), dst, ctypes.c_size_t(4), 2) == 0
    assert got.value == 111
    assert lib.hipFree(dst) == 0 and lib.hipStreamDestroy(stream) == 0


def test_dev_py_fakehip_builds_the_stand_in_and_prints_its_path(tmp_path: Path) -> None:
    env = {**os.environ, "IREE_STRESS_FAKEHIP_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, str(fakehip.REPO / "dev.py"), "fakehip"],
                         capture_output=True, text=True, env=env, timeout=300)
    if out.returncode != 0 and "no C compiler" in out.stderr:
        pytest.skip("no C compiler to build the stand-in HIP library")
    assert out.returncode == 0, out.stderr
    lib = Path(out.stdout.strip())
    assert lib.parent.parent == tmp_path and lib.name == "libamdhip64.so" and lib.is_file()
    assert f"--env IREE_HIP_DYLIB_PATH=file:{lib}" in out.stderr
