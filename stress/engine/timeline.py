"""The GPU telemetry time line: every GPU a run uses, sampled on a period for the whole run.

The incident's clearest symptom was a clock that stayed at ~2100 MHz after the work was done;
snapshots around a kill cannot show that, a time line can. One long-lived child process
(`python -m stress.engine.timeline BACKEND PERIOD [READER...]`) reads the GPUs every period and
prints one JSON line per sample; the parent reads what is there without ever blocking, so a
wedged driver stalls the child (the parent sees the samples stop: `stalled()`), never the soak.
The child lives in its own process group, leaves when its stdin closes (the parent died or is
done) and is killed with its group at `close()`. Nothing runs for backends without telemetry
(cpu, vulkan): no process, no cost.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from stress.engine import telemetry
from stress.engine.phases import Phases

DEFAULT_PERIOD_S: float = 1.0  # clocks move within ~1 s of load changes; 1 Hz keeps a 10-hour
#   soak's time line at ~36k rows per GPU and the child's cost at one NVML read (~1 ms) a second
_STALL_PERIODS: float = 5.0  # no sample for this many periods (and > the snapshot bound): the
#   driver is wedged in a read, which is a finding in itself
_CLOSE_GRACE_S: float = 1.0  # the child leaves within a period of its stdin closing
_READ_CHUNK: int = 1 << 16
COOLDOWN_S: float = 8.0  # GPU runs keep sampling this long after the last worker exited: a
#   clock that never comes down after a clean teardown shows there (the "busy while idle"
#   detector needs more than its 5 s threshold of it)
_COOLDOWN_POLL_S: float = 0.2  # samples stored this often while cooling down


@runtime_checkable
class TimelineRecords(Protocol):
    """Where the time line goes (store.db.RunStore has these; a store without them gets no
    time line)."""

    def add_telemetry(self, run_id: str, rows: Iterable[dict[str, Any]]) -> None: ...

    def add_mark(self, run_id: str, t: float, kind: str, label: str) -> None: ...

    def set_worker_device(self, row: int, device: str) -> None: ...


def backend_of(driver: str) -> str:
    """The telemetry backend of a HAL driver: cuda -> cuda, hip -> rocm, others -> ""."""
    return {"cuda": "cuda", "hip": "rocm"}.get(driver, "")


class Sampler:
    """Parent side of the sampler child. `poll()` returns the samples printed since the last
    call (each {"t": wall clock, "source": reader, "gpus": [...]} or {"t", "error"}); `close()`
    ends the child and returns what it printed last. Never blocks longer than _CLOSE_GRACE_S."""

    def __init__(self, backend: str, period_s: float = DEFAULT_PERIOD_S,
                 only: Sequence[str] | None = None, env: dict[str, str] | None = None):
        self.backend, self.period_s = backend, period_s
        env = dict(os.environ if env is None else env)
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                    else "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "stress.engine.timeline", backend, f"{period_s:g}",
             *(only or [])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        assert self.proc.stdout is not None
        self._fd = self.proc.stdout.fileno()
        fl = fcntl.fcntl(self._fd, fcntl.F_GETFL)
        fcntl.fcntl(self._fd, fcntl.F_SETFL, fl | os.O_NONBLOCK)
        self._buf = b""
        self.started = time.monotonic()
        self.last_sample = self.started
        self.samples = 0

    def poll(self) -> list[dict[str, Any]]:
        while True:
            try:
                chunk = os.read(self._fd, _READ_CHUNK)
            except BlockingIOError:
                break
            except OSError:
                break
            if not chunk:
                break
            self._buf += chunk
        *lines, self._buf = self._buf.split(b"\n")
        out = []
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and "t" in msg:
                out.append(msg)
        if out:
            self.last_sample = time.monotonic()
            self.samples += len(out)
        return out

    def stalled(self, now: float | None = None) -> float:
        """Seconds since the last sample when that is past the stall bound, else 0."""
        now = time.monotonic() if now is None else now
        quiet = now - self.last_sample
        bound = max(_STALL_PERIODS * self.period_s, telemetry.SNAPSHOT_TIMEOUT_S)
        return quiet if quiet > bound else 0.0

    def close(self) -> list[dict[str, Any]]:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(_CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        last = self.poll()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its tools too (nvidia-smi in an ioctl)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(_CLOSE_GRACE_S)
        except subprocess.TimeoutExpired:
            pass  # stuck in the kernel (D state): left to init, the run goes on
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return last


def start(driver: str, period_s: float = DEFAULT_PERIOD_S,
          only: Sequence[str] | None = None) -> Sampler | None:
    """A sampler for `driver`'s GPUs, or None where there is no GPU telemetry (cpu) or the
    period is 0 (off)."""
    backend = backend_of(driver)
    if not backend or period_s <= 0 or not telemetry.readers_for(backend, only):
        return None
    return Sampler(backend, period_s, only)


def rows(sample: dict[str, Any], ordinals: list[int] | None) -> list[dict[str, Any]]:
    """A sample as store rows, one per GPU in use: {"t", "gpu", "logical", "source", METRICS...,
    "error"}; a sample that failed is one row with gpu None and the error."""
    t = float(sample.get("t", 0.0))
    if "gpus" not in sample:
        return [{"t": t, "gpu": None, "logical": None, "source": sample.get("source"),
                 "error": str(sample.get("error") or sample.get("note") or "no reading")[:300]}]
    return [{"t": t, "gpu": g.get("index"), "logical": g.get("logical"),
             "source": sample.get("source"), "error": None,
             **{k: telemetry.number(g.get(k)) for k in telemetry.METRICS}}
            for g in telemetry.in_use(list(sample["gpus"]), ordinals)]


class RunTimeline:
    """One run's time line: its sampler child (none on cpu), the samples stored as they come,
    phase marks, and the cool-down after the last worker exited. A store without the
    time line's part (a test's fake) gets none."""

    def __init__(self, store: object, run_id: str, driver: str, devices: Sequence[str],
                 period_s: float = DEFAULT_PERIOD_S):
        self.store = store if isinstance(store, TimelineRecords) else None
        self.run_id, self.driver, self.period_s = run_id, driver, period_s
        self.gpu_ordinals = telemetry.device_ordinals(devices)
        self.sampler: Sampler | None = None
        self.note = ""  # for the manifest: what samples it, or why nothing does

    def start(self) -> bool:
        """Starts the sampler child; True when one runs (the manifest then says so)."""
        if self.store is None:
            return False
        missing = telemetry.none_usable(backend_of(self.driver))
        if missing:  # said once, in the manifest and the header: not a row of errors a second
            self.note = missing
            return False
        try:
            self.sampler = start(self.driver, self.period_s)
        except OSError as exc:
            self.note = f"no time line: {exc}"
            return False
        if self.sampler is None:
            return False
        self.note = f"{self.sampler.backend} every {self.period_s:g} s"
        return True

    def record(self, final: bool = False) -> None:
        """Stores the samples the sampler printed since the last call (never blocks)."""
        if self.sampler is None or self.store is None:
            return
        samples = self.sampler.close() if final else self.sampler.poll()
        out = [r for sample in samples for r in rows(sample, self.gpu_ordinals)]
        if out:
            self.store.add_telemetry(self.run_id, out)
        if final:
            self.sampler = None

    def mark(self, kind: str, label: str) -> None:
        if self.sampler is not None and self.store is not None:
            self.store.add_mark(self.run_id, time.time(), kind, label)

    def worker_device(self, row: int, device: str) -> None:
        """Which device a worker's row used (runs over several devices)."""
        if self.store is not None:
            self.store.set_worker_device(row, device)

    @contextmanager
    def phase(self, phases: Phases, name: str) -> Iterator[None]:
        """A phase of the run (timed in `phases`), also marked on the time line."""
        self.mark("phase-start", name)
        try:
            with phases.phase(name):
                yield
        finally:
            self.mark("phase-end", name)

    def cooldown(self, phases: Phases, interrupted: Callable[[], bool],
                 tick: Callable[[], None]) -> None:
        """After the last worker exited: the time line goes on for COOLDOWN_S, so a GPU that
        stays busy with nothing running is seen (stopped early by an interrupt)."""
        if self.sampler is None:
            return
        end = time.monotonic() + COOLDOWN_S
        with self.phase(phases, "cooldown"):
            while time.monotonic() < end and not interrupted():
                time.sleep(min(_COOLDOWN_POLL_S, max(0.0, end - time.monotonic())))
                self.record()
                tick()


def _child_main(argv: list[str]) -> int:
    """Samples until stdin closes: the first reader that reads is kept; when it fails, the
    readers are tried again in order on the next sample."""
    backend = argv[0] if argv else ""
    period = float(argv[1]) if len(argv) > 1 else DEFAULT_PERIOD_S
    only = argv[2:] or None
    reader: telemetry.TelemetryReader | None = None
    while True:
        t0 = time.time()
        msg: dict[str, Any] = {"t": t0}
        try:
            if reader is None:
                reader = next((r for r in telemetry.readers_for(backend, only)
                               if r.available()), None)
            if reader is None:
                msg["error"] = f"no telemetry reader for {backend} usable"
            else:
                data = reader.read()
                if isinstance(data.get("gpus"), list):
                    msg.update(source=reader.name,
                               gpus=telemetry.visible(backend, data["gpus"]))
                else:
                    msg.update(source=reader.name, error="reader returned no GPU list")
        except Exception as exc:  # a driver library raises its own error types
            msg.update(source=reader.name if reader else None,
                       error=f"{type(exc).__name__}: {exc}"[:300])
            fallback = telemetry.read_first(backend, only=only)
            reader = next((r for r in telemetry.readers_for(backend, only)
                           if r.name == fallback.get("source")), None)
        msg["seconds"] = round(time.time() - t0, 4)
        try:
            print(json.dumps(msg, default=str), flush=True)
        except BrokenPipeError:
            return 0
        wait = max(0.0, period - (time.time() - t0))
        ready, _, _ = select.select([sys.stdin], [], [], wait)
        if ready and not os.read(sys.stdin.fileno(), _READ_CHUNK):  # EOF: the parent is gone
            return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
