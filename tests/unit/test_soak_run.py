"""One soak (stress/soak/run.py): each engine is one entry of the runner table, and the plan of
every engine is checked before a folder is made (a refused soak leaves nothing behind)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.errors import UsageError
from stress.soak.options import SoakOptions
from stress.soak.run import ENGINES, run_soak
from stress.vocab import Engine


def options(results: Path, **kw: object) -> SoakOptions:
    base = SoakOptions(target="cpu", device=None, workers=1, threads=1, patterns=[],
                       programs=[], program_files=[], duration_s=1.0, invocations=None,
                       seed=1, env={}, max_failures=None, results=results, timeout_s=30.0,
                       teardown_timeout_s=15.0, max_worker_restarts=50, inject=[],
                       python=None, shard=(0, 1), job_seed=None, cache_dir=results.parent,
                       compile_jobs=1, progress=False)
    for k, v in kw.items():
        setattr(base, k, v)
    return base


def test_every_engine_has_its_entry_in_the_runner_table() -> None:
    assert set(ENGINES) == set(Engine)


@pytest.mark.parametrize(("kw", "said"), [
    ({"engine": "exec", "command": ["true"], "inject": ["raise@invoke"]},
     "an exec command has none"),
    ({"engine": "exec", "command": []}, "needs a command after `--`"),
    ({"engine": "exec", "command": ["./no-such-tool"]}, "is not an executable file"),
    ({"engine": "native", "inject": ["raise@invoke"]}, "use --env LD_PRELOAD"),
    ({"record": True}, "it needs --engine native"),
    ({"patterns": ["no-such-pattern"]}, "unknown pattern(s) no-such-pattern"),
    ({"command": ["true"]}, "runs only with --engine exec"),
])
def test_a_soak_refused_by_its_plan_says_why_in_one_line_and_makes_no_folder(
        tmp_path: Path, kw: dict[str, object], said: str) -> None:
    results = tmp_path / "run"
    with pytest.raises(UsageError) as info:
        run_soak(options(results, **kw))
    assert said in str(info.value) and "\n" not in str(info.value)
    assert not results.exists()
