"""The summary printed after a soak (and under the answer of a text report): what was tested,
then one table of the run's counts per pattern with its total, the failures, the verdict.
Every number comes from summary.json, which store/counts.py makes from the store."""

from __future__ import annotations

from typing import Any

from stress.analysis import header
from stress.analysis.stats import fmt_rate
from stress.vocab import ALL_CLASSES, Engine

_EXIT_OUTCOMES: tuple[str, ...] = ("clean", "crash", "hang", "error")


def failure_counts(failures: dict[str, int]) -> str:
    """`crash 3, error 12`, classes that occurred only; `none` for a clean run."""
    return ", ".join(f"{c} {failures[c]:,}" for c in ALL_CLASSES if failures.get(c)) or "none"


def devices_text(s: dict[str, Any]) -> str:
    n = s.get("devices_created")
    return "devices: the command's own" if n is None else f"{n:,} devices created"


def jobs_text(s: dict[str, Any]) -> str:
    jobs, done = s["jobs"], s.get("jobs_finished", s["jobs"])
    died = f" ({done:,} reported, {jobs - done:,} ended with their process)" if jobs > done \
        else ""
    return f"{jobs:,} jobs{died}"


def pattern_rows(s: dict[str, Any]) -> list[tuple[str, ...]]:
    """(pattern, jobs, invocations, process exits, exits by outcome, full teardowns, handle
    releases) per pattern, then the total: the rows add up to it."""
    ex = s.get("exposures") or {}
    known = "process_exits" in ex
    releases = known and all(Engine.of(e).counts_releases
                             for e in (s.get("engine") or "python").split("+"))
    exits = ex.get("process_exits", {}).get("by_pattern", {})
    full = ex.get("full_teardowns", {}).get("by_pattern", {})
    handle = ex.get("handle_releases", {}).get("by_pattern", {})
    jobs = s.get("jobs_by_pattern", {})
    names = sorted(set(s["patterns"]) | set(jobs) | set(exits) | set(full))
    rows: list[tuple[str, ...]] = []

    def outcomes(d: dict[str, Any]) -> str:
        return ", ".join(f"{k} {d[k]:,}" for k in _EXIT_OUTCOMES if d.get(k))

    def num(v: Any, counted: bool = True) -> str:
        return f"{v:,}" if known and counted else "?" if counted else "-"

    for p in names:
        e = exits.get(p, {})
        rows.append((p, f"{jobs.get(p, 0):,}", f"{s['patterns'].get(p, 0):,}",
                     num(e.get("total", 0)), outcomes(e), num(full.get(p, 0), releases),
                     num(handle.get(p, 0), releases)))
    tot = ex.get("process_exits", {})
    rows.append(("total", f"{s['jobs']:,}", f"{s['invocations']:,}", num(tot.get("total", 0)),
                 outcomes(tot), num(ex.get("full_teardowns", {}).get("total", 0), releases),
                 num(ex.get("handle_releases", {}).get("total", 0), releases)))
    return rows


PATTERN_HEAD: tuple[str, ...] = ("pattern", "jobs", "invocations", "process exits",
                                 "exits by outcome", "full teardowns", "handle releases")


def table(head: tuple[str, ...], rows: list[tuple[str, ...]], indent: str = "  ") -> str:
    """Columns as wide as their widest cell; numbers right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(head)]
    numeric = [all(c.replace(",", "").replace("?", "0").isdigit() for c in
                   (r[i] for r in rows) if c) for i in range(len(head))]

    def line(cells: tuple[str, ...]) -> str:
        return indent + "  ".join(c.rjust(w) if n else c.ljust(w)
                                  for c, w, n in zip(cells, widths, numeric, strict=True)
                                  ).rstrip()
    return "\n".join([line(head), *(line(r) for r in rows)])


_TEST_COUNTS: tuple[str, ...] = ("passed", "failed", "errors", "skipped", "xfailed",
                                  "xpassed", "deselected", "collected")  # in this order


def tests_text(s: dict[str, Any]) -> str:
    """An exec run's tests as its runners counted them: `24 run in 8 jobs (3.0 a job): 22
    passed, 2 failed, 1 skipped`, and the jobs that ran none."""
    t = s.get("tests")
    if not t:
        return "not counted (no test runner's summary was seen in the output)"
    jobs = t["jobs_with_counts"]
    parts = ", ".join(f"{t[k]:,} {k}" for k in _TEST_COUNTS if t.get(k))
    none = f"; {t['jobs_without_a_test']:,} job(s) ran no test (flagged, not clean)" \
        if t.get("jobs_without_a_test") else ""
    return (f"{t['ran']:,} run in {jobs:,} job(s) ({t['ran'] / jobs:.1f} a job)"
            f"{': ' + parts if parts else ''}{none}")


def command_processes_text(s: dict[str, Any]) -> str:
    """How an exec run's command processes ended: `12: exited 0 9, killed by a signal 3`."""
    c = dict(s.get("command_processes") or {})
    total = c.pop("total", 0)
    return f"{total:,}" + (": " + ", ".join(f"{k} {v:,}" for k, v in sorted(
        c.items(), key=lambda kv: _ENDINGS.index(kv[0]) if kv[0] in _ENDINGS else 9)) if c
        else "")


_ENDINGS: tuple[str, ...] = ("exited 0", "exited non-zero", "killed by a signal",
                             "killed at a deadline", "stopped with the run", "harness error")


def exec_lines(s: dict[str, Any]) -> list[str]:
    """An exec run's status and counts: jobs, the tests they ran, the command's processes
    (no invocations, patterns or device releases: the command's own business)."""
    reason = (s.get("stop_reason") or "").replace("planned invocations", "planned jobs")
    lines = [f"run {s['run_id']}  {s['status']} ({reason})",
             f"  results   {s['results_dir']}",
             f"  jobs      {s['jobs']:,} in {s['duration_s']:.1f} s (one run of the command "
             "each)",
             f"  tests     {tests_text(s)}",
             f"  command processes  {command_processes_text(s)}"]
    for r in s.get("runs") or []:  # a merged folder: each run's own
        lines.append(f"    {r['run_id']}: {r['status']}, {r['jobs']:,} jobs in "
                     f"{r.get('duration_s', 0):.1f} s")
    if s["failed"]:
        lines += ["", f"  failures  {failure_counts(s['failures'])}"]
    return lines


def run_lines(s: dict[str, Any]) -> list[str]:
    """The run's status and counts (without the header)."""
    engine = Engine.of((s.get("engine") or "python").split("+")[0])
    if engine is Engine.EXEC and s.get("engine") == Engine.EXEC.value:
        return exec_lines(s)
    ex = s.get("exposures") or {}
    pe = ex.get("process_exits")
    lines = [f"run {s['run_id']}  {s['status']} ({s.get('stop_reason') or ''})",
             f"  results   {s['results_dir']}",
             f"  {jobs_text(s)}, {s['invocations']:,} invocations in {s['duration_s']:.1f} s "
             f"({s['invocations_per_s']:,.0f}/s), {s['worker_processes']:,} worker processes,"
             f" {devices_text(s)}"]
    for r in s.get("runs") or []:  # a merged folder: each run's own
        shard = r.get("shard")
        where = f" shard {shard[0] + 1}/{shard[1]}" if shard and shard[1] > 1 else ""
        lines.append(f"    {r['run_id']}{where}: {r['status']}, {r['jobs']:,} jobs, "
                     f"{r['invocations']:,} invocations in {r.get('duration_s', 0):.1f} s")
    lines += ["", table(PATTERN_HEAD, pattern_rows(s))]
    if pe:
        releases = (f"; full teardowns {ex['full_teardowns']['per_s']:g}/s; handle-only "
                    f"releases {ex['handle_releases']['per_s']:g}/s"
                    if engine.counts_releases else
                    "; device releases: not seen (the tool's or command's own)")
        lines.append(f"  {engine.process_exits()}: {pe['total']:,} ({pe['per_s']:g}/s)"
                     f"{releases}")
    dt = ex.get("driver_teardowns") or {}
    if dt.get("total"):
        by = ", ".join(f"{p} {n:,}" for p, n in dt["by_pattern"].items())
        lines.append(f"  driver teardowns (a HAL driver created and destroyed in a job): "
                     f"{dt['total']:,} ({dt['per_s']:g}/s; {by})")
    if s["failed"]:
        lines += ["", f"  failures  {failure_counts(s['failures'])}"]
    return lines


def summary_table(s: dict[str, Any]) -> str:
    """The terminal summary of one run (summary.json): header, counts, failures, verdict."""
    head = header.rows([s.get("manifest") or {}], [s.get("command") or ""])
    lines = [header.text(head), "", *run_lines(s)]
    details = s.get("failures_detail", [])
    if details:
        lines += ["", "  first failures:"]
        for f in details[:8]:
            job = f["job"]
            sig = f" {f['signal']}" if f.get("signal") else ""
            where = f"in {job['program']} [{job['pattern']}]" if job["program"] else \
                "in no job (driver probe, worker start-up or exit)"
            if s.get("engine") == Engine.EXEC.value and job["program"]:
                where = f"in job {job['index']} ({job['program']})"
            lines.append(f"    {f['class']}{sig} at {f['last_step']} {where} -> "
                         f"{f['artifacts'] or '-'}")
    sigs = s.get("signatures", [])
    if sigs:
        lines += ["", "  top signatures:"]
        for g in sigs[:5]:
            rate = "" if g.get("rate_per_exposure") is None else \
                f"{fmt_rate(g['rate_per_exposure'])} per {g['exposure']} " \
                f"[{fmt_rate(g['ci_low'])}, {fmt_rate(g['ci_high'])}]  "
            lines.append(f"    {g['id']}  {g['count']:>5} x  {rate}{g['description']}  "
                         f"({', '.join(g['patterns'])})")
    lines += ["", "  FAILURES FOUND" if s["failed"] else "  no failures"]
    return "\n".join(lines)
