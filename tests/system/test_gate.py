"""Real cpu gates (issue 10, done-when): an injected crash FAILs at once, a clean stack PASSes,
a known-failures file turns the crash into PASS/INCONCLUSIVE with the signature listed as
known; 4 real shards merged give the verdict of the unsharded plan, 3 of 4 INCONCLUSIVE.

How long a clean gate takes to PASS: with no failure the test needs design effect x
log(1/beta') / -log((1 - R) / (1 - R/4)) clean jobs: 1,191 at --max-rate 0.01 with the default
design effect 3 (233 at 0.05). This machine (2 cores shared with other work) finished 10-13
jobs a second with every in-process pattern, so 0.01 needs 90-120 s of soak: the 90 s budget
of the issue is met only on a quiet machine. The default-suite test gates at 0.05 within 90 s;
the slow one gates at 0.01 with a 240 s budget (docs/ci.md, "How long a PASS takes").
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.system

# in-process patterns: process-per-job starts an interpreter per job, ~4x fewer jobs a second
# on 2 cores, and the PASS needs a count of jobs
_FAST_PATTERNS = "shared,per-thread,per-call,churn,instance-churn,cross-thread"
_PROGRAMS = "unary.*.f32.*,binary.add.f32.*"
_SEED = "11"


def _gate(tmp: Path, name: str, *args: str, env: dict[str, str] | None = None,
          timeout: float = 600) -> tuple[int, dict[str, object]]:
    res = run_cli("gate", "--target", "cpu", "--seed", _SEED, "-q", "--json", "--programs",
                  _PROGRAMS, "--workers", "2", "--results", str(tmp / name), *args, env=env,
                  timeout=timeout)
    assert res.stdout.strip(), res.stderr[-3000:]
    return res.rc, json.loads(res.stdout)


def _soak_shard(tmp: Path, name: str, *args: str, env: dict[str, str] | None = None) -> Path:
    res = run_cli("soak", "--target", "cpu", "--seed", _SEED, "-q", "--programs", _PROGRAMS,
                  "--patterns", _FAST_PATTERNS, "--workers", "1", "--duration", "20s",
                  "--results", str(tmp / name), *args, env=env)
    # exit 1 is a shard that found a failure: the runtime's own flakes (churn has shown
    # `binding table slot requires a buffer but none was provided` at invoke while another
    # thread ran gc) are data for the merged verdict, which these tests compare
    assert res.rc in (0, 1), res.stderr[-3000:]
    return tmp / name


@pytest.fixture(scope="module")
def crash_gate(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, object]]:
    """A crash injected at 2% of invocations, gated at 1%."""
    tmp = tmp_path_factory.mktemp("crash")
    return _gate(tmp, "run", "--max-rate", "0.01", "--budget", "90s",
                 "--inject", "segv@invoke:0.02")


def test_an_injected_crash_at_2_percent_of_invocations_fails_the_gate(
        crash_gate: tuple[int, dict[str, object]]) -> None:
    rc, d = crash_gate
    assert rc == 1 and d["verdict"] == "FAIL"
    new = d["new_signatures"]
    assert isinstance(new, list) and new and all(s["class"] == "crash" for s in new)
    runs = d["runs"]
    assert isinstance(runs, list) and "gate decided: FAIL" in runs[0]["stop_reason"]


def test_a_known_signature_file_turns_the_crash_into_pass_or_inconclusive(
        crash_gate: tuple[int, dict[str, object]], tmp_path: Path) -> None:
    _, first = crash_gate
    ids = [s["id"] for s in first["new_signatures"]]  # type: ignore[attr-defined]
    known = tmp_path / "known.toml"
    known.write_text("".join(f'[[known]]\nsignature = "{i}"\nnote = "injected segv"\n'
                             for i in ids))
    rc, d = _gate(tmp_path, "run", "--max-rate", "0.01", "--budget", "20s",
                  "--inject", "segv@invoke:0.02", "--known", str(known))
    assert rc in (0, 3) and d["verdict"] in ("PASS", "INCONCLUSIVE"), d["reason"]
    assert not d["new_signatures"]
    assert {s["id"] for s in d["known_signatures"]} <= set(ids)  # type: ignore[attr-defined]
    assert d["known_signatures"]


def test_a_clean_stack_passes_within_90_seconds_at_5_percent(tmp_path: Path) -> None:
    rc, d = _gate(tmp_path, "run", "--max-rate", "0.05", "--budget", "90s",
                  "--patterns", _FAST_PATTERNS)
    assert rc == 0 and d["verdict"] == "PASS", d["reason"]
    assert "gate decided: PASS" in d["runs"][0]["stop_reason"]  # type: ignore[index]
    # the gate's pool workers retire after 100 jobs (many bounded clusters: docs/ci.md)
    store, = tmp_path.rglob("stress.db")
    db = sqlite3.connect(store)
    config = json.loads(db.execute("SELECT manifest FROM runs").fetchone()[0])["config"]
    assert config["max_jobs_per_worker"] == 100
    assert max(n for (n,) in db.execute(
        "SELECT COUNT(*) FROM jobs WHERE pattern != 'process-per-job' GROUP BY pid")) <= 100


@pytest.mark.slow
def test_a_clean_stack_passes_at_1_percent(tmp_path: Path) -> None:
    rc, d = _gate(tmp_path, "run", "--max-rate", "0.01", "--budget", "240s",
                  "--patterns", _FAST_PATTERNS)
    assert rc == 0 and d["verdict"] == "PASS", d["reason"]
    assert d["jobs"] >= 1191  # type: ignore[operator]


def _merge_and_gate(tmp: Path, dirs: list[Path], name: str) -> tuple[int, dict[str, object]]:
    res = run_cli("merge", *map(str, dirs), "-o", str(tmp / name))
    assert res.rc == 0, res.stderr
    g = run_cli("gate", "--from", str(tmp / name), "--max-rate", "0.05", "--json")
    return g.rc, g.json()


@pytest.fixture(scope="module")
def unsharded(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, object]]:
    tmp = tmp_path_factory.mktemp("whole")
    return _gate(tmp, "run", "--max-rate", "0.05", "--budget", "90s", "--patterns",
                 _FAST_PATTERNS)


@pytest.mark.slow  # ~2 min: four 20 s soaks (the merged PASS needs 233 clean jobs) and one gate
def test_four_shards_merged_give_the_unsharded_verdict_and_three_are_inconclusive(
        tmp_path: Path, unsharded: tuple[int, dict[str, object]]) -> None:
    dirs = [_soak_shard(tmp_path, f"shard{k}", "--shard", f"{k}/4") for k in range(1, 5)]
    rc, d = _merge_and_gate(tmp_path, dirs, "merged")
    assert (rc, d["verdict"]) == (unsharded[0], unsharded[1]["verdict"]) == (0, "PASS")
    assert d["shards"] == {"seen": 4, "expected": 4, "indices": [1, 2, 3, 4]}
    rc3, d3 = _merge_and_gate(tmp_path, dirs[:2] + dirs[3:], "three")
    assert rc3 == 3 and d3["verdict"] == "INCONCLUSIVE"
    assert "1 of 4 shards missing (3)" in str(d3["reason"])


@pytest.mark.slow
def test_a_kubernetes_indexed_job_numbering_gives_the_same_merged_verdict(
        tmp_path: Path, unsharded: tuple[int, dict[str, object]]) -> None:
    dirs = [_soak_shard(tmp_path, f"pod{i}", env={"JOB_COMPLETION_INDEX": str(i),
                                                  "IREE_STRESS_SHARDS": "4"})
            for i in range(4)]
    rc, d = _merge_and_gate(tmp_path, dirs, "merged")
    assert (rc, d["verdict"]) == (unsharded[0], unsharded[1]["verdict"])
    assert d["shards"] == {"seen": 4, "expected": 4, "indices": [1, 2, 3, 4]}
