"""The report's first screen (issue 9 item 5): what fails, how often, where, what other threads
did, known or new; the same content in text, markdown, HTML and JSON. Built on a synthetic run
folder (a real SQLite store, written with the store's own migrations)."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from stress.analysis import html, junit, report
from stress.store.db import DB_NAME, MIGRATIONS, connect
from tests.conftest import run_cli

STACKS = Path(__file__).resolve().parents[1] / "data" / "stacks"
RUN = "r-test"


def _store(run_dir: Path, latest: bool = True) -> sqlite3.Connection:
    run_dir.mkdir(parents=True)
    if latest:
        return connect(run_dir / DB_NAME)
    db = sqlite3.connect(run_dir / DB_NAME)  # a store from before m004
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
               " applied_at REAL NOT NULL)")
    for version, name, fn in MIGRATIONS[:3]:
        fn(db)
        db.execute("INSERT INTO schema_migrations VALUES (?,?,?)", (version, name, time.time()))
    db.commit()
    return db


def make_run(run_dir: Path, latest: bool = True) -> Path:
    """60 jobs in 6 worker processes; 3 jobs crash with the same stalled-join SIGSEGV (a core
    file's stack each), 2 jobs get an error 4 times each; healthy windows at device-release."""
    db = _store(run_dir, latest)
    now = time.time()
    db.execute("INSERT INTO runs (run_id, started_at, ended_at, status, seed, command, manifest,"
               " config) VALUES (?,?,?,?,?,?,?,?)", (RUN, now - 30, now, "completed", 7, "soak",
                                                    "{}", json.dumps({"workers": 3,
                                                                      "threads": 2})))
    pid_col = ", pid" if latest else ""
    for i in range(60):
        pattern = "per-call" if i % 2 else "shared"
        db.execute(f"INSERT INTO jobs (run_id, job_index, program, pattern, seed, worker, "
                   f"planned, invocations, ok, miscompare, errors, nondeterministic, "
                   f"devices_created, started_at, ended_at, latency_sum_us, latency_max_us, "
                   f"latency_hist, outcome{pid_col}) VALUES "
                   f"(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?{',?' if latest else ''})",
                   (RUN, i, "unary.exp.f32.64x64", pattern, i, i % 3, 10, 10, 10, 0,
                    4 if i in (10, 11) else 0, 0, 1, now - 20, now - 19, 100.0, 20.0,
                    json.dumps([0] * 22), "ok", *([1000 + i // 10] if latest else [])))
    for n, job in enumerate((3, 25, 47)):
        folder = run_dir / "failures" / f"crash-{n}"
        folder.mkdir(parents=True)
        (folder / "stacks.txt").write_text((STACKS / "gdb_core_segv.txt").read_text())
        (folder / "failure.json").write_text(json.dumps({"native_tid": 5365}))
        steps = [{"t": 1, "slot": 0, "step": "invoke", "phase": "begin", "failing": True},
                 {"t": 2, "slot": 0, "step": "invoke", "phase": "end", "failing": True},
                 {"t": 3, "slot": 0, "step": "device-release", "phase": "begin",
                  "failing": True},
                 {"t": 0.5, "slot": 1, "step": "device-create", "phase": "begin",
                  "failing": False}]
        db.execute("INSERT INTO failures (run_id, class, signal, job_index, program, pattern, "
                   "seed, worker, pid, last_step, in_flight, steps, artifacts, message, "
                   "attribution, detected_at, elapsed_s) VALUES "
                   "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   (RUN, "crash", "SIGSEGV", job, "unary.exp.f32.64x64", "per-call", job,
                    job % 3, 1000 + job // 10, "device-release",
                    json.dumps(["t0:device-release", "t1:device-create"]), json.dumps(steps),
                    str(folder), "worker crashed", "watchdog", now, 5.0 + n))
    for job in (10, 11):
        db.execute("INSERT INTO failures (run_id, class, job_index, program, pattern, worker, "
                   "pid, last_step, in_flight, steps, message, attribution, detected_at, "
                   "elapsed_s) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                   (RUN, "error", job, "unary.exp.f32.64x64", "shared", job % 3, 1001,
                    "module-load", "[]", "[]", f"CUDA_ERROR_INVALID_CONTEXT ({job})", "worker",
                    now, 2.0))
        db.execute("INSERT INTO failure_counts VALUES (?,?,?,?,?,?)",
                   (RUN, job, "unary.exp.f32.64x64", "shared",
                    "error|module-load|CUDA_ERROR_INVALID_CONTEXT (#)", 4))
    for slot in range(40):
        db.execute("INSERT INTO windows (id, run_id, kind, t, pattern, tokens, in_flight) "
                   "VALUES (?,?,?,?,?,?,?)",
                   (slot, RUN, "healthy", now, "per-call" if slot % 2 else "shared",
                    json.dumps(["begin:invoke", "end:invoke", "begin:device-release"]),
                    json.dumps(["t0:device-release", "t1:invoke"])))
    for p in range(6):
        db.execute("INSERT INTO workers (run_id, worker, generation, pid, started_at, ended_at,"
                   " exit_code, end_reason) VALUES (?,?,?,?,?,?,?,?)",
                   (RUN, p % 3, p // 3, 1000 + p, now - 30, now, 0, "exit"))
    db.commit()
    db.close()
    return run_dir


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("rep") / "run")


@pytest.fixture(scope="module")
def known_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    f = tmp_path_factory.mktemp("known") / "known.toml"
    f.write_text('[[known]]\nmatch = "error|*CUDA_ERROR_INVALID_CONTEXT*"\n'
                 'note = "fresh-thread cuda context"\nlink = "repro/cuda_fresh_thread_context.py"'
                 '\n')
    return f


def test_the_first_screen_answers_what_how_often_where_and_whether_known(
        run_dir: Path, known_file: Path) -> None:
    r = report.build([run_dir], [known_file])
    text = report.render_text(r)
    screen = text.split("run r-test")[0]
    assert "2 failure mode(s): 1 new, 1 known, in 60 jobs" in screen
    crash = next(s for s in r.signatures if s.cls == "crash")
    assert crash.frames == ("iree_fault_segv", "fire", "pthread_join")
    assert f"NEW    {crash.id}  crash SIGSEGV at teardown (device-release 3)" in screen
    assert "iree_fault_segv" in screen and "3/60 jobs = 5%" in screen
    assert "per-call 100%; workers x threads 3x2" in screen
    err = next(s for s in r.signatures if s.cls == "error")
    assert f"KNOWN  {err.id}  error at module-load" in screen
    assert "known as      fresh-thread cuda context (repro/cuda_fresh_thread_context.py)" \
        in screen
    assert screen.index("NEW") < screen.index("KNOWN")  # new ones first
    assert err.count == 8 and err.rate is not None and err.rate.failures == 2


RENDERERS: dict[str, Callable[[report.Report], str]] = {
    "text": report.render_text, "markdown": report.render_markdown, "html": html.render,
    "json": lambda r: json.dumps(r.as_dict())}


@pytest.mark.parametrize("fmt", sorted(RENDERERS))
def test_every_format_carries_the_same_first_screen(run_dir: Path, known_file: Path,
                                                    fmt: str) -> None:
    r = report.build([run_dir], [known_file])
    out = RENDERERS[fmt](r)
    head = out[:out.find("Failure signatures") if fmt != "json" else len(out)]
    for f in r.findings:
        assert f.signature.id in head
        assert f.what() in head
        if f.others_tested:
            assert f.others().split(" (")[0] in head
        else:  # said once for every such signature, not in a row of each
            assert "Other threads: cannot tell for" in head
            assert fmt == "json" or "0 failure and 0" not in head
    assert "fresh-thread cuda context" in head
    if fmt == "json":
        d = json.loads(out)
        assert [x["status"] for x in d["first_screen"]] == ["new", "known"]
        assert d["new_signatures"] == [r.signatures[0].id]
        assert d["failing_jobs"]["unit"] == "job" and d["failing_jobs"]["clusters"] == 6


def test_correlation_in_the_report_is_aligned_and_says_when_nothing_stands_out(
        run_dir: Path) -> None:
    r = report.build([run_dir])
    c = next(c for c in r.correlations if c.signature == r.signatures[0].id)
    assert c.step == "device-release" and c.failure_windows == 3
    assert "anecdotal" in c.note
    assert c.verdict().startswith(("nothing stands out", "stands out"))


def test_a_store_from_before_m004_still_gives_a_report(tmp_path: Path) -> None:
    r = report.build([make_run(tmp_path / "old", latest=False)])
    assert {s.cls for s in r.signatures} == {"crash", "error"}
    crash = next(s for s in r.signatures if s.cls == "crash")
    assert crash.rate is not None and crash.rate.units == 60
    assert "first failures" not in report.render_markdown(r)  # renders without error
    assert "<testsuites" in junit.render(r)


def test_summary_signatures_keep_their_documented_keys(run_dir: Path) -> None:
    got = report.signature_summaries(run_dir)
    assert {"id", "key", "class", "signal", "last_step", "thread_state", "frames", "count",
            "exposure", "rate_per_exposure", "ci_low", "ci_high", "patterns", "example",
            "description"} == set(got[0])
    json.dumps(got)


def test_report_exits_0_when_every_failure_is_known_and_1_when_one_is_new(
        run_dir: Path, known_file: Path, tmp_path: Path) -> None:
    assert run_cli("report", str(run_dir), "--known", str(known_file), "-o",
                   str(tmp_path / "r.txt")).rc == 1
    every = tmp_path / "all.toml"
    every.write_text('[[known]]\nmatch = "*"\nnote = "all of them"\n')
    res = run_cli("report", str(run_dir), "--known", str(every), "--format", "json")
    assert res.rc == 0 and res.json()["new_signatures"] == []
    bad = tmp_path / "bad.toml"
    bad.write_text('[[known]]\nsignature = "S1"\n')
    res = run_cli("report", str(run_dir), "--known", str(bad))
    assert res.rc == 2 and "needs a `note`" in res.stderr and "Traceback" not in res.stderr


def test_the_headline_of_a_merged_folder_counts_every_run_it_holds(tmp_path: Path) -> None:
    from stress.store import merge

    shards = [make_run(tmp_path / f"shard{i}") for i in range(3)]
    merged = tmp_path / "merged"
    merge.merge(shards, merged)
    r = report.build([merged])
    assert "in 180 jobs" in r.headline() and "3 run(s))" in r.headline()
    # the same runs given as separate folders read the same
    assert "3 run(s))" in report.build(shards).headline()
