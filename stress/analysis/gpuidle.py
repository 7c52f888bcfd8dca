""""Busy while idle": a GPU whose clock or power stays above the run's own idle baseline while
no job is in flight (between jobs, or after every worker exited) for longer than a threshold.

The fusilli stall looked like this: the tests were done, the SCLK stayed at ~2100 MHz until the
process was killed, then fell to 132 MHz. No stack shows it; the telemetry time line does.
Each episode becomes a failure signature (class `gpu_busy_idle`) carrying its samples, so it is
reported, counted and matched against known-failure files like any other.

The baseline is the run's own: the median of the samples taken before the first job started
(the GPU as this run found it), else a low percentile of every sample. Clocks and power that a
machine keeps high when idle (fixed application clocks, persistence mode) are then the
baseline, and nothing fires.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from stress.analysis.rundata import RunData
from stress.analysis.sigkeys import SignatureKey
from stress.analysis.signatures import Signature

CLASS: str = "gpu_busy_idle"
THRESHOLD_S: float = 5.0  # NVIDIA and AMD GPUs drop their clocks within ~1-3 s of the last
#   kernel; 5 s of high clocks with nothing in flight is not ramp-down (the fusilli stall: 120 s)
_SLACK_S: float = 1.5  # a sample up to this long after a job ended still reflects that job
#   (utilization and power are averaged over the sample period, 1 s by default)
_CLOCK_REL: float = 0.25  # above baseline x 1.25 + 100 MHz: the AMD idle 132 MHz vs 2100
_CLOCK_ABS_MHZ: float = 100.0  # and DVFS jitter at idle stays within ~100 MHz
_POWER_REL: float = 0.25  # above baseline x 1.25 + 20 W: idle power wanders by a few W
_POWER_ABS_W: float = 20.0
_LOW_PERCENTILE: float = 0.1  # baseline without pre-run samples: the 10th percentile
_SAMPLES_KEPT: int = 40  # samples shown per episode (its start, its end)


@dataclass
class Baseline:
    sm_clock_mhz: float | None
    power_w: float | None
    source: str  # "pre-run median" | "low percentile"

    def busy(self, sample: dict[str, Any]) -> list[str]:
        """The metrics of `sample` above this baseline (empty: it looks idle)."""
        out = []
        clk, pw = sample.get("sm_clock_mhz"), sample.get("power_w")
        if clk is not None and self.sm_clock_mhz is not None and \
                clk > self.sm_clock_mhz * (1 + _CLOCK_REL) + _CLOCK_ABS_MHZ:
            out.append("clock")
        if pw is not None and self.power_w is not None and \
                pw > self.power_w * (1 + _POWER_REL) + _POWER_ABS_W:
            out.append("power")
        return out


@dataclass
class BusyIdle:
    """One episode on one GPU: consecutive idle samples above the baseline."""

    run_id: str
    gpu: int | None
    where: str  # "after all workers exited" | "no job in flight"
    start: float
    end: float
    metrics: tuple[str, ...]  # which were high: clock, power
    baseline: Baseline
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.end - self.start

    def peak(self, metric: str) -> float | None:
        vals = [s[metric] for s in self.samples if s.get(metric) is not None]
        return max(vals) if vals else None

    def describe(self) -> str:
        b = self.baseline
        parts = []
        if "clock" in self.metrics:
            parts.append(f"SM/GFX clock up to {self.peak('sm_clock_mhz'):.0f} MHz "
                         f"(idle baseline {b.sm_clock_mhz:.0f})")
        if "power" in self.metrics:
            parts.append(f"power up to {self.peak('power_w'):.0f} W "
                         f"(idle baseline {b.power_w:.0f})")
        return (f"GPU {self.gpu} busy for {self.seconds:.1f} s {self.where}: "
                f"{', '.join(parts)}; baseline: {b.source}")

    def as_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "gpu": self.gpu, "where": self.where,
                "start": self.start, "end": self.end, "seconds": round(self.seconds, 3),
                "metrics": list(self.metrics), "description": self.describe(),
                "baseline": {"sm_clock_mhz": self.baseline.sm_clock_mhz,
                             "power_w": self.baseline.power_w, "source": self.baseline.source},
                "samples": self.samples}


def _percentile(vals: list[float], q: float) -> float:
    s = sorted(vals)
    return s[min(len(s) - 1, int(q * len(s)))]


def baseline(samples: list[dict[str, Any]], first_job: float | None) -> Baseline:
    pre = [s for s in samples if first_job is None or s["t"] < first_job]
    out: dict[str, float | None] = {}
    use_pre = bool(pre) and first_job is not None
    for m in ("sm_clock_mhz", "power_w"):
        vals = [float(s[m]) for s in (pre if use_pre else samples) if s.get(m) is not None]
        out[m] = (statistics.median(vals) if use_pre else _percentile(vals, _LOW_PERCENTILE)) \
            if vals else None
    return Baseline(out["sm_clock_mhz"], out["power_w"],
                    "pre-run median" if use_pre else "low percentile")


def _in_flight(t: float, intervals: list[tuple[float, float]]) -> bool:
    return any(lo <= t and t - _SLACK_S <= hi for lo, hi in intervals)


def detect(samples: list[dict[str, Any]], jobs: list[tuple[float, float]],
           workers_done: float | None, run_id: str = "", gpu: int | None = None,
           threshold_s: float = THRESHOLD_S) -> list[BusyIdle]:
    """Episodes on one GPU's time line. `samples`: {"t", "sm_clock_mhz", "power_w", ...}
    sorted or not; `jobs`: (start, end) wall times of every job; `workers_done`: when the last
    worker exited (None: unknown)."""
    samples = sorted((s for s in samples if s.get("t") is not None), key=lambda s: s["t"])
    if not samples:
        return []
    first_job = min((lo for lo, _ in jobs), default=None)
    base = baseline(samples, first_job)
    out: list[BusyIdle] = []
    run: list[tuple[dict[str, Any], list[str]]] = []

    def close() -> None:
        if run and run[-1][0]["t"] - run[0][0]["t"] >= threshold_s:
            t0 = run[0][0]["t"]
            where = "after all workers exited" if workers_done is not None and \
                t0 >= workers_done else "with no job in flight"
            kept = [s for s, _ in run]
            if len(kept) > _SAMPLES_KEPT:
                kept = kept[:_SAMPLES_KEPT // 2] + kept[-_SAMPLES_KEPT // 2:]
            metrics = tuple(sorted({m for _, ms in run for m in ms}))
            out.append(BusyIdle(run_id, gpu, where, t0, run[-1][0]["t"], metrics, base, kept))
        run.clear()

    for s in samples:
        idle = not _in_flight(s["t"], jobs) and (first_job is None or s["t"] > first_job)
        high = base.busy(s) if idle else []
        if high:
            run.append((s, high))
        else:
            close()
    close()
    return out


def detect_run(data: RunData, threshold_s: float = THRESHOLD_S) -> list[BusyIdle]:
    """Every episode of every run and GPU in `data` (runs without a time line: none)."""
    out: list[BusyIdle] = []
    for run in data.runs:
        rid = run["run_id"]
        jobs = [(float(j["started_at"]), float(j["ended_at"])) for j in data.jobs
                if j.get("run_id") == rid]
        ends = [w.get("ended_at") for w in data.workers if w.get("run_id") == rid]
        done = max((float(e) for e in ends if e is not None), default=None) \
            if ends and all(e is not None for e in ends) else None
        by_gpu: dict[int | None, list[dict[str, Any]]] = defaultdict(list)
        for s in data.telemetry:
            if s.get("run_id") == rid and s.get("error") is None:
                by_gpu[s.get("gpu")].append(s)
        for gpu, rows in sorted(by_gpu.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            out += detect(rows, jobs, done, rid, gpu, threshold_s)
    return out


def signatures(episodes: list[BusyIdle]) -> list[Signature]:
    """One signature per GPU and where (between jobs, after exit), counting its episodes;
    `rows` holds each episode as a dict with its samples."""
    sigs: dict[SignatureKey, Signature] = {}
    for ep in episodes:
        metrics = "+".join(ep.metrics)
        key = SignatureKey(CLASS, None, "after-exit" if ep.where.startswith("after") else
                           "idle", "busy", (), f"gpu {ep.gpu}: {metrics} above idle baseline")
        sig = sigs.setdefault(key, Signature(key))
        sig.count += 1
        sig.rows.append(ep.as_dict())
        sig.steps[key.step or ""] += 1
        sig.patterns.update(Counter({"(no job)": 1}))
        sig.first_seen = min(sig.first_seen or ep.start, ep.start)
        sig.last_seen = max(sig.last_seen or ep.end, ep.end)
        sig.example = ep.describe()
    return sorted(sigs.values(), key=lambda s: -s.count)
