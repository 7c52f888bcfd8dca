"""Which HAL drivers are usable, asked of the worker interpreter in throwaway processes (a
broken GPU stack may crash or hang the asker).

The probe says, line by line and flushed, how far it got: imported, creating driver X, X's
verdict, releasing X, released, exiting. So a probe that dies or stalls *after* a driver loaded
(in its release, or in the process's exit handlers: the fusilli incident's failure) is told
apart from a driver that cannot load. The first is a failure of the stack under test, recorded
like any other while the soak goes on; only the second refuses the run (exit 2, with the
loader's own words).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.engine import corekill, evidence, postmortem
from stress.vocab import signal_name

_PROBE_TIMEOUT_S: float = 60.0  # import + driver create + release + exit on a loaded box
_STDERR_TAIL: int = 16_384
_PROBE = r"""
import json, sys
def say(**kw):
    print(json.dumps(kw), flush=True)
from iree.runtime import _binding as b
say(stage="imported", compiled_in=sorted(b.HalDriver.query()))
for name in sys.argv[1:]:
    say(stage="create", driver=name)
    try:
        d = b.create_hal_driver(name)
        devs = d.query_available_devices()
        say(stage="verdict", driver=name, ok=bool(devs), error="" if devs else "no devices found",
            names=[str(x.get("name", "")) for x in devs])
    except Exception as exc:
        d = None
        say(stage="verdict", driver=name, ok=False, error=str(exc))
    say(stage="release", driver=name)
    del d
    say(stage="released", driver=name)
say(stage="exit")
"""

LIBRARY_HINT = {
    "hip": "libamdhip64.so (point at one with IREE_HIP_DYLIB_PATH=/path/to/libamdhip64.so or "
           "LD_LIBRARY_PATH, e.g. --env IREE_HIP_DYLIB_PATH=...)",
    "cuda": "libcuda.so from the NVIDIA driver (LD_LIBRARY_PATH)",
    "vulkan": "libvulkan.so.1 and an ICD (VK_ICD_FILENAMES)",
}


@dataclass
class ProbeResult:
    """Per driver: {"ok": bool, "error": str}; `failures`: the stack failed after loading
    (class, step, signal, message, files for the evidence folder)."""

    drivers: dict[str, dict[str, Any]] = field(default_factory=dict)
    compiled_in: list[str] = field(default_factory=list)
    failures: list[dict[str, Any]] = field(default_factory=list)


_REAP_TIMEOUT_S: float = 5.0  # after SIGKILL: a probe still not reaped is left behind (it is
#   in the kernel; its process group was killed and it is reported as stalled)


@dataclass
class _Stall:
    """What a stalled probe left: the deadline it went past, and the evidence taken before its
    kill, as for a stuck worker (every thread sampled busy or blocked, then every stack), so
    a stall in the driver's exit gets the signature a worker's would."""

    deadline_s: float
    files: dict[str, str]  # stacks.txt, threads.json
    facts: dict[str, Any]  # evidence.ProcessEvidence.summary of the main thread


def _one(python: str, driver: str, env: dict[str, str], teardown_timeout_s: float) -> tuple[
        str, list[dict[str, Any]], int | None, str, str, int, _Stall | None]:
    """Runs the probe for one driver: (driver, stage lines, returncode or None when it stalled,
    stderr, cwd, pid, the stall's evidence). Once the driver's verdict is in, its release and
    the process's exit get only `teardown_timeout_s` (a teardown stall must not cost the
    whole probe deadline). The cwd is a fresh folder, where a core of a crashing probe would
    land."""
    cwd = tempfile.mkdtemp(prefix="iree-stress-probe-")
    err_file = Path(cwd) / "stderr"
    with open(err_file, "wb") as err_out:
        proc = subprocess.Popen([python, "-c", _PROBE, driver], stdout=subprocess.PIPE,
                                stderr=err_out, env=env, cwd=cwd, start_new_session=True,
                                preexec_fn=postmortem.prepare_child)
    assert proc.stdout is not None
    os.set_blocking(proc.stdout.fileno(), False)
    lines: list[dict[str, Any]] = []
    buf = b""
    start = time.monotonic()
    deadline = start + _PROBE_TIMEOUT_S
    rc: int | None = None
    stall: _Stall | None = None
    limit_s = _PROBE_TIMEOUT_S
    while True:
        ready, _, _ = select.select([proc.stdout], [], [], 0.05)
        chunk = proc.stdout.read() if ready else None
        if chunk:
            buf += chunk
            *done, buf = buf.split(b"\n")
            for line in done:
                try:
                    lines.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
                if lines[-1].get("stage") == "verdict" and \
                        time.monotonic() + teardown_timeout_s < deadline:
                    deadline = time.monotonic() + teardown_timeout_s
                    limit_s = teardown_timeout_s
        rc = proc.poll()
        if rc is not None and not chunk:
            break
        if time.monotonic() > deadline:
            # evidence before the kill, as for any stuck worker; the main thread (tid = pid)
            #   is the one that releases the driver and exits
            since = time.time() - (time.monotonic() - start)
            ev = evidence.collect_many([proc.pid], since_wall=since).processes[proc.pid]
            # the stall is decided: a core (dumped by the kill, or by a death during the
            #   evidence) stands in for native frames no live reader gave
            how = ""
            by_itself = proc.poll() is not None or bool(ev.stacks.died)  # before our kill
            if proc.poll() is None and corekill.wanted(ev.stacks, own_cwd=True) and \
                    not ev.in_d_state():
                k = corekill.dump(proc.pid, proc.poll)
                how = f"core dumped by our {k.signal} after the verdict" if k.signal else ""
            if not how and (proc.poll() is not None or
                            ev.stacks.died and corekill.settle(proc.poll) is not None):
                how = f"core of its death by {signal_name(proc.returncode)} during the evidence"
            if how and proc.returncode is not None and proc.returncode < 0:
                ev.stacks = corekill.merge(ev.stacks, corekill.read(proc.pid, python,
                                                                    Path(cwd), since_wall=since),
                                           how)
            facts = ev.summary(proc.pid)
            if by_itself and proc.returncode is not None:  # died while its evidence was taken
                facts["after_verdict"] = corekill.after_verdict(proc.returncode, ev.stacks)
                facts["exit_code"] = proc.returncode
            stall = _Stall(limit_s, ev.files(), facts)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:  # a process stuck in the kernel (a GPU driver's D state) may never go
                proc.wait(timeout=_REAP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pass
            rc = None
            break
    proc.stdout.close()
    err = err_file.read_bytes()[-_STDERR_TAIL:].decode(errors="replace")
    err_file.unlink()
    return driver, lines, rc, err, cwd, proc.pid, stall


def probe(python: str, drivers: Iterable[str], env: dict[str, str],
          teardown_timeout_s: float = _PROBE_TIMEOUT_S) -> ProbeResult:
    """Probes each driver in its own process, all at once."""
    names = list(drivers)
    result = ProbeResult()
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        runs = list(pool.map(lambda d: _one(python, d, env, teardown_timeout_s), names))
    for driver, lines, rc, err, cwd, pid, stall in runs:
        _judge(result, python, driver, lines, rc, err, cwd, pid, stall)
    return result


def _judge(result: ProbeResult, python: str, driver: str, lines: list[dict[str, Any]],
           rc: int | None, stderr: str, cwd: str, pid: int, stall: _Stall | None = None) -> None:
    stages = [x.get("stage") for x in lines]
    for x in lines:
        if x.get("stage") == "imported":
            result.compiled_in = list(x.get("compiled_in", []))
        if x.get("stage") == "verdict":
            result.drivers[driver] = {"ok": bool(x["ok"]), "error": str(x.get("error", "")),
                                      "names": [str(n) for n in x.get("names") or []]}
    clean = rc == 0 and stages and stages[-1] == "exit"
    if clean:
        _cleanup(cwd)
        return
    last = stages[-1] if stages else None
    what = f"was killed by {signal_name(rc)}" if rc is not None and rc < 0 else \
        f"exited with status {rc}" if rc is not None else \
        f"stalled for more than {stall.deadline_s if stall else _PROBE_TIMEOUT_S:g} s"
    if last in (None, "imported") and driver not in result.drivers:
        # died before any driver verdict: import or library load itself failed
        result.drivers[driver] = {"ok": False, "error": _reason(stderr) or f"probe {what}"}
        _cleanup(cwd)
        return
    step = {"create": "driver-create", "verdict": "driver-release", "release": "driver-release",
            "released": "worker-exit", "exit": "worker-exit"}.get(str(last), "worker-exit")
    if driver not in result.drivers:  # it died while loading: the workers will say more
        result.drivers[driver] = {"ok": True, "error": f"probe {what} in {step}"}
    hang = rc is None
    cls = ("teardown_hang" if step != "driver-create" else "hang") if hang else \
        ("crash" if rc is not None and rc < 0 else "error")
    facts: dict[str, Any] = {"stack_source": "none"}
    files = {"stderr.tail": stderr, "probe.jsonl": "\n".join(json.dumps(x) for x in lines)}
    native_tid = None
    if hang and stall is not None:  # taken before the kill
        files.update(stall.files)
        facts = stall.facts
        native_tid = pid  # the main thread: the probe's driver release and exit run there
    if rc is not None and rc < 0:  # its core, read like a worker's
        crash = evidence.collect_crash(pid, python, Path(cwd), stderr)
        facts = crash.summary()
        files.update(crash.files())
    result.failures.append({
        "class": cls, "step": step, "signal": signal_name(rc), "driver": driver,
        "evidence": facts, "native_tid": native_tid,
        "message": f"driver probe of {driver!r} {what} in {step}, after the driver loaded: "
                   "a failure of the stack under test",
        "files": {**files, "failure.json": json.dumps({
            "class": cls, "last_step": step, "signal": signal_name(rc), "exit_code": rc,
            "attribution": "probe", "native_tid": native_tid, **facts}, indent=1)}})
    _cleanup(cwd)


_REASON = re.compile(r"^(Fatal Python error: .*|[A-Za-z_][\w.]*(Error|Exception)\b.*)$")


def _reason(stderr: str) -> str:
    """The interpreter's or loader's own words: the last exception line or fatal error of the
    output (not faulthandler's trailing '<no Python frame>'), else its last line."""
    lines = [line.strip() for line in stderr.strip().splitlines() if line.strip()]
    hits = [line for line in lines if _REASON.match(line)]
    return hits[-1] if hits else (lines[-1] if lines else "")


def _cleanup(cwd: str) -> None:
    shutil.rmtree(cwd, ignore_errors=True)
