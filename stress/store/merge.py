"""`iree-stress merge`: the run folders of many machines (the shards of one plan) into one run
folder. One store holds every run; rows keep their run_id (a run id seen twice, e.g. every pod
using `--results run`, gets a `~K` suffix); failure folders are copied under
DIR/failures/RUN_ID/ and the rows point there. Runs of different plans, seeds, targets or
runtime stacks are refused with one line: merging them would mix two experiments.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stress.errors import UsageError
from stress.store.db import DB_NAME, connect
from stress.store.rundir import RESUME_PREFIX

# config keys that define the plan: runs that differ in any of them are not shards of one plan
PLAN_KEYS: tuple[str, ...] = ("seed", "target", "programs", "patterns", "invocations",
                              "job_seed", "job_scale", "inject")
# manifest keys that define the runtime stack
STACK_KEYS: tuple[str, ...] = ("iree_runtime", "iree_compiler", "tool_version")
_TABLES: tuple[str, ...] = ("jobs", "failures", "failure_counts", "windows", "workers",
                            "phases")
_FRESH_ID: frozenset[str] = frozenset({"jobs", "failures", "windows", "workers"})  # own ids


@dataclass
class Merged:
    output: Path
    runs: list[str] = field(default_factory=list)
    renamed: dict[str, str] = field(default_factory=dict)
    folders: int = 0
    shards: set[int] = field(default_factory=set)
    shard_count: int = 1

    def describe(self) -> str:
        shards = "" if self.shard_count == 1 else \
            f", shards {len(self.shards)}/{self.shard_count}"
        ren = f" (renamed: {', '.join(f'{a}->{b}' for a, b in self.renamed.items())})" \
            if self.renamed else ""
        return (f"merged {len(self.runs)} run(s){shards}, {self.folders} failure folder(s) -> "
                f"{self.output}{ren}")


def _runs(src: Path) -> list[dict[str, Any]]:
    path = src / DB_NAME
    if not path.exists():
        raise UsageError(f"{src} is not a run folder (no {DB_NAME})")
    db = connect(path, readonly=True)
    try:
        rows = [dict(r) for r in db.execute("SELECT * FROM runs")]
    finally:
        db.close()
    if not rows:
        raise UsageError(f"{src} holds no run")
    for r in rows:
        r["config_d"] = json.loads(r["config"] or "{}")
        r["manifest_d"] = json.loads(r["manifest"] or "{}")
        r["src"] = src
    return rows


def _plan(r: dict[str, Any]) -> dict[str, Any]:
    c = r["config_d"]
    return {k: c.get(k) for k in PLAN_KEYS} | {"shards": (c.get("shard") or [0, 1])[1]}


def _stack(r: dict[str, Any]) -> dict[str, Any]:
    return {k: r["manifest_d"].get(k) for k in STACK_KEYS}


def check(runs: list[dict[str, Any]]) -> None:
    """Refuses, with one line, runs that are not shards of one plan on one stack."""
    first = runs[0]
    for r in runs[1:]:
        for what, f in (("plan", _plan), ("stack", _stack)):
            a, b = f(first), f(r)
            diff = [k for k in a if a[k] != b[k]]
            if diff:
                k = diff[0]
                raise UsageError(f"cannot merge: {r['src']} ({r['run_id']}) has another {what} "
                                 f"than {first['src']} ({first['run_id']}): {k} {b[k]!r} vs "
                                 f"{a[k]!r}")
    seen: dict[int, dict[str, Any]] = {}
    for r in runs:
        index, count = (r["config_d"].get("shard") or [0, 1])[:2]
        if index in seen and count > 1:
            o = seen[index]
            raise UsageError(f"cannot merge: shard {index + 1}/{count} appears twice ({o['src']}, "
                             f"{r['src']}): its jobs would count twice")
        if index in seen and (o := seen[index])["run_id"] == r["run_id"] and \
                o["started_at"] == r["started_at"]:
            raise UsageError(f"cannot merge: the same run {r['run_id']} twice ({o['src']}, "
                             f"{r['src']})")
        seen[index] = r


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]


def merge(sources: list[Path], output: Path) -> Merged:
    """Merges `sources` into a new store at `output` (module doc)."""
    if (output / DB_NAME).exists():
        raise UsageError(f"{output} already holds a store; merge into a new folder")
    runs = [r for src in sources for r in _runs(src)]
    check(runs)
    output.mkdir(parents=True, exist_ok=True)
    out = Merged(output)
    out.shard_count = int((runs[0]["config_d"].get("shard") or [0, 1])[1])
    dst = connect(output / DB_NAME)
    try:
        taken: set[str] = set()
        for src in sources:
            _copy(src, dst, output, taken, out)
        dst.commit()
    finally:
        dst.close()
    return out


def _copy(src: Path, dst: sqlite3.Connection, output: Path, taken: set[str], out: Merged) -> None:
    db = connect(src / DB_NAME, readonly=True)
    try:
        rename: dict[str, str] = {}
        for r in db.execute("SELECT * FROM runs"):
            run = dict(r)
            rid = run["run_id"]
            new = rid
            k = 2
            while new in taken:
                new = f"{rid}~{k}"
                k += 1
            taken.add(new)
            rename[rid] = new
            if new != rid:
                out.renamed[rid] = new
            out.runs.append(new)
            out.shards.add(int((json.loads(run["config"] or "{}").get("shard") or [0, 1])[0]))
            cols = [c for c in _columns(db, "runs") if c in _columns(dst, "runs")]
            dst.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES "
                        f"({', '.join('?' * len(cols))})",
                        [new if c == "run_id" else run[c] for c in cols])
        for table in _TABLES:
            have = _columns(db, table)
            if not have:
                continue  # a store from before this table
            cols = [c for c in have if c in _columns(dst, table)
                    and not (c == "id" and table in _FRESH_ID)]
            for row in db.execute(f"SELECT {', '.join(cols)} FROM {table}"):
                values = dict(zip(cols, row, strict=True))
                values["run_id"] = rename.get(values["run_id"], values["run_id"])
                if table == "failures":
                    _move_evidence(src, output, values, out)
                dst.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
                            f"({', '.join('?' * len(cols))})", [values[c] for c in cols])
    finally:
        db.close()


def _move_evidence(src: Path, output: Path, row: dict[str, Any], out: Merged) -> None:
    """Copies a failure's folder (recorded on another machine: found by its name under
    SRC/failures/) to DIR/failures/RUN_ID/ and points the row there."""
    old = row.get("artifacts")
    if not old:
        return
    name = Path(old).name
    here = src / "failures" / name
    if Path(old).parent.parent.name.startswith(RESUME_PREFIX):  # a resumed run's own files
        here = src / Path(old).parent.parent.name / "failures" / name
    target = output / "failures" / str(row["run_id"]) / name
    if here.is_dir() and not target.exists():
        shutil.copytree(here, target, symlinks=True)
        out.folders += 1
    if here.is_dir() or target.exists():
        row["artifacts"] = str(target)
        if row.get("evidence"):
            row["evidence"] = str(row["evidence"]).replace(old, str(target))
