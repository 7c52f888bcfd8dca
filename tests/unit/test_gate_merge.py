"""`iree-stress merge` (issue 10 item 4) and what CI reads from a gate (item 2): shards of one
plan merge into one store that `gate --from` and `report` read; runs of different plans are
refused with one line; a missing shard makes the gate INCONCLUSIVE; the step summary is valid
markdown and the JUnit file validates against the vendored schema."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from stress.errors import UsageError
from stress.store import summary
from stress.store.db import DB_NAME
from stress.store.merge import merge
from stress.verdicts import gate_outputs
from stress.verdicts.gate import GateSpec, Verdict, evaluate
from tests.conftest import REPO, run_cli
from tests.helpers.gate_stores import make_store, plan_config

JUNIT_XSD = REPO / "tests" / "data" / "junit-10.xsd"
SHARDS = 4
RATE = 0.05


def _shards(tmp_path: Path, crash_in: int | None = None, skip: int | None = None,
            run_id: str | None = None) -> list[Path]:
    """The 4 shards of one plan: job i belongs to shard i % 4; same run id when given (every
    pod writing `--results run`)."""
    dirs = []
    for k in range(SHARDS):
        if k == skip:
            continue
        jobs = [i for i in range(1200) if i % SHARDS == k]
        crash = [jobs[7]] if k == crash_in else []
        dirs.append(make_store(tmp_path / f"shard{k + 1}", run_id or f"run-{k + 1}", jobs,
                               crash_jobs=crash, config=plan_config(shard=(k, SHARDS)),
                               folders=True))
    return dirs


def test_four_merged_shards_give_the_verdict_of_the_unsharded_plan(tmp_path: Path) -> None:
    whole = make_store(tmp_path / "whole", "whole", range(1200))
    merged = tmp_path / "merged"
    m = merge(_shards(tmp_path), merged)
    assert len(m.runs) == SHARDS and m.shards == {0, 1, 2, 3}
    g, w = evaluate([merged], GateSpec(RATE)), evaluate([whole], GateSpec(RATE))
    assert g.verdict is w.verdict is Verdict.PASS
    assert g.rate.units == w.rate.units == 1200
    assert g.as_dict()["shards"] == {"seen": 4, "expected": 4, "indices": [1, 2, 3, 4]}


def test_three_of_four_shards_are_inconclusive_with_exit_3(tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    merge(_shards(tmp_path, skip=2), merged)
    g = evaluate([merged], GateSpec(RATE))
    assert g.verdict is Verdict.INCONCLUSIVE and g.verdict.exit_code == 3
    assert "1 of 4 shards missing (3)" in g.reason
    res = run_cli("gate", "--from", str(merged), "--max-rate", str(RATE))
    assert res.rc == 3 and "INCONCLUSIVE" in res.stdout


def test_a_crash_in_one_shard_fails_the_merged_gate_and_its_evidence_is_copied(
        tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    merge(_shards(tmp_path, crash_in=1), merged)
    g = evaluate([merged], GateSpec(RATE))
    assert g.verdict is Verdict.FAIL
    evidence = Path(g.new[0].example or "")
    assert evidence.is_dir() and merged in evidence.parents  # the copy, not the shard's folder
    assert (evidence / "failure.json").exists()


def test_the_same_run_id_on_every_shard_is_kept_apart(tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    m = merge(_shards(tmp_path, run_id="run"), merged)
    assert sorted(m.runs) == ["run", "run~2", "run~3", "run~4"]
    db = sqlite3.connect(merged / DB_NAME)
    per_run = dict(db.execute("SELECT run_id, COUNT(*) FROM jobs GROUP BY run_id").fetchall())
    db.close()
    assert sorted(per_run.values()) == [300] * 4


def test_a_merged_folder_summarises_every_run_with_every_key_of_one_run(tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    dirs = _shards(tmp_path)
    merge(dirs, merged)
    one, both = summary.build(dirs[0]), summary.build(merged)
    assert set(one) <= set(both)
    assert both["jobs"] == sum(summary.build(d)["jobs"] for d in dirs)
    assert [r["shard"] for r in both["runs"]] == [[k, SHARDS] for k in range(SHARDS)]


def test_report_reads_a_merged_folder(tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    merge(_shards(tmp_path, crash_in=0), merged)
    res = run_cli("report", str(merged), "--format", "json")
    assert res.rc == 1, res.stderr[-2000:]
    assert res.json()["jobs"] == 1200


@pytest.mark.parametrize("change", [{"seed": 8}, {"patterns": ["shared"]}, {"target": "cuda"}])
def test_runs_of_another_plan_are_refused_with_one_line(tmp_path: Path,
                                                        change: dict[str, object]) -> None:
    a = make_store(tmp_path / "a", "a", range(0, 100, 2), config=plan_config(shard=(0, 2)))
    b = make_store(tmp_path / "b", "b", range(1, 100, 2),
                   config=plan_config(shard=(1, 2)) | change)
    with pytest.raises(UsageError, match="another plan") as exc:
        merge([a, b], tmp_path / "m")
    assert "\n" not in str(exc.value)
    res = run_cli("merge", str(a), str(b), "-o", str(tmp_path / "m2"))
    assert res.rc == 2 and res.stderr.count("\n") == 1


def test_runs_of_another_runtime_stack_are_refused(tmp_path: Path) -> None:
    a = make_store(tmp_path / "a", "a", range(10), config=plan_config(shard=(0, 2)))
    b = make_store(tmp_path / "b", "b", range(10), config=plan_config(shard=(1, 2)),
                   runtime="3.14.0")
    with pytest.raises(UsageError, match="another stack"):
        merge([a, b], tmp_path / "m")


def test_the_same_shard_twice_is_refused(tmp_path: Path) -> None:
    a = make_store(tmp_path / "a", "a", range(10), config=plan_config(shard=(1, 2)))
    b = make_store(tmp_path / "b", "b", range(10), config=plan_config(shard=(1, 2)))
    with pytest.raises(UsageError, match="appears twice"):
        merge([a, b], tmp_path / "m")


def test_merge_never_writes_into_an_existing_store(tmp_path: Path) -> None:
    a = make_store(tmp_path / "a", "a", range(10))
    with pytest.raises(UsageError, match="already holds"):
        merge([a], a)


def test_the_step_summary_is_valid_markdown_with_verdict_rate_and_signatures(
        tmp_path: Path) -> None:
    markdown_it = pytest.importorskip("markdown_it")
    merged = tmp_path / "merged"
    merge(_shards(tmp_path, crash_in=3), merged)
    path = tmp_path / "step-summary.md"
    path.write_text("## an earlier step\n\n")
    res = run_cli("gate", "--from", str(merged), "--max-rate", str(RATE),
                  env={"GITHUB_STEP_SUMMARY": str(path)})
    assert res.rc == 1
    text = path.read_text()
    assert text.startswith("## an earlier step")  # appended, not replaced
    tokens = markdown_it.MarkdownIt("commonmark").enable("table").parse(text)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert any("iree-stress gate" in h and "FAIL" in h for h in headings)
    tables = [t for t in tokens if t.type == "table_open"]
    assert len(tables) == 2  # the numbers, the signatures
    cells = [t.content for t in tokens if t.type == "inline"]
    assert any("failing jobs" in c for c in cells) and any("crash" in c for c in cells)
    assert any(str(merged) in c for c in cells)  # where the evidence is


def test_the_junit_file_validates_and_has_a_testcase_per_signature_and_pattern(
        tmp_path: Path) -> None:
    xmlschema = pytest.importorskip("xmlschema")
    merged = tmp_path / "merged"
    merge(_shards(tmp_path, crash_in=3), merged)
    g = evaluate([merged], GateSpec(RATE))
    out = tmp_path / "junit.xml"
    out.write_text(gate_outputs.render_junit(g))
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(out))
    import xml.etree.ElementTree as ET

    cases = ET.parse(out).getroot().findall(".//testcase")
    classes = sorted(c.get("classname") or "" for c in cases)
    assert classes == ["gate", "gate.pattern", "gate.pattern", "gate.signature.crash"]
    failing = {c.get("name") for c in cases if c.find("failure") is not None
               or c.find("error") is not None}
    assert "verdict (max rate 0.05)" in failing and any(n and n.startswith("S") for n in failing)


def test_json_of_a_merged_gate_names_the_runs(tmp_path: Path) -> None:
    merged = tmp_path / "merged"
    merge(_shards(tmp_path), merged)
    d = evaluate([merged], GateSpec(RATE)).as_dict()
    assert len(d["runs"]) == SHARDS and d["verdict"] == "PASS"
    json.dumps(d)


def test_unsharded_repeats_of_one_plan_merge_as_replicates(tmp_path: Path) -> None:
    a = make_store(tmp_path / "a", "a", range(200))
    b = make_store(tmp_path / "b", "b", range(200))
    merged = tmp_path / "m"
    merge([a, b], merged)
    g = evaluate([merged], GateSpec(RATE))
    assert g.verdict is Verdict.PASS and g.rate.units == 400
