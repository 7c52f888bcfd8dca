"""The final summary table printed after a soak."""

from __future__ import annotations

from typing import Any

from stress.analysis.stats import fmt_rate
from stress.vocab import ALL_CLASSES


def summary_table(s: dict[str, Any]) -> str:
    lines = [f"run {s['run_id']}  seed {s['seed']}  {s['status']} ({s.get('stop_reason') or ''})",
             f"  results   {s['results_dir']}",
             f"  invocations {s['invocations']:,} in {s['duration_s']:.1f} s "
             f"({s['invocations_per_s']:,.0f}/s), {s['jobs']:,} jobs, "
             f"{s['worker_processes']} worker processes, {s['devices_created']:,} devices created",
             "", f"  {'pattern':<16} {'invocations':>12}"]
    for pattern, n in s["patterns"].items():
        lines.append(f"  {pattern:<16} {n:>12,}")
    ex = s.get("exposures") or {}
    if ex.get("process_exits"):
        exits, full, handle = ex["process_exits"], ex["full_teardowns"], ex["handle_releases"]
        outcomes = ", ".join(f"{k} {exits[k]:,}" for k in ("clean", "crash", "hang", "error")
                             if exits.get(k))
        lines += ["", "  exposures (where teardown failures live)",
                  f"  process exits after device use {exits['total']:>8,}  "
                  f"({exits['per_s']:g}/s{'; ' + outcomes if outcomes else ''})",
                  f"  full teardowns                 {full['total']:>8,}  ({full['per_s']:g}/s)",
                  f"  handle-only releases           {handle['total']:>8,}  "
                  f"({handle['per_s']:g}/s)"]
    lines += ["", f"  {'failure class':<16} {'count':>12}"]
    for c in ALL_CLASSES:
        lines.append(f"  {c:<16} {s['failures'].get(c, 0):>12,}")
    details = s.get("failures_detail", [])
    if details:
        lines += ["", "  first failures:"]
        for f in details[:8]:
            job = f["job"]
            sig = f" {f['signal']}" if f.get("signal") else ""
            where = f"in {job['program']} [{job['pattern']}]" if job["program"] else \
                "in no job (driver probe, worker start-up or exit)"
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
    verdict = "FAILURES FOUND" if s["failed"] else "no failures"
    lines += ["", f"  {verdict}"]
    return "\n".join(lines)
