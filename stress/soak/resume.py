"""`soak --results DIR --resume`: the plan of the runs in DIR goes on, as a new run of DIR's
store (rundir: its files in DIR/resume-K/, nothing recorded before is rewritten).

A plan is the seeded job stream (seed, programs, patterns, shard, input-seed override, scale)
and what bounds it (--invocations). Continuing it is sound because the stream is a pure
function of those: the resumed run starts at the first job index no earlier run reached, so
the runs of DIR together are one prefix of one plan (less the jobs an interrupt caught in
flight, which are in no count), and a --invocations plan runs only what it has left.

Options left out are the plan's (and the last run's conditions: workers, deadlines, env...);
options given must agree with the plan where they define it, else one line (exit 2): a
different plan is a different experiment, for a new folder."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from stress.engine.config import SoakConfig
from stress.engine.jobs import schedule
from stress.errors import UsageError
from stress.programs.program import Program
from stress.soak.options import SoakOptions
from stress.vocab import Engine

# click parameter -> (SoakOptions field, config key, part of the plan)
_CARRIED: tuple[tuple[str, str, str, bool], ...] = (
    ("seed", "seed", "seed", True),
    ("target", "target", "target", True),
    ("shard", "shard", "shard", True),
    ("job_seed", "job_seed", "job_seed", True),
    ("inject", "inject", "inject", True),
    ("engine", "engine", "engine", True),
    ("invocations", "invocations", "invocations", True),
    ("command", "command", "exec_argv", True),
    ("device", "device", "device_uri", False),
    ("workers", "workers", "workers", False),
    ("threads", "threads", "threads", False),
    ("duration", "duration_s", "duration_s", False),
    ("env_items", "env", "env", False),
    ("max_failures", "max_failures", "max_failures", False),
    ("timeout", "timeout_s", "timeout_s", False),
    ("teardown_timeout", "teardown_timeout_s", "teardown_timeout_s", False),
    ("max_worker_restarts", "max_worker_restarts", "max_worker_restarts", False),
    ("max_jobs_per_worker", "max_jobs_per_worker", "max_jobs_per_worker", False),
    ("python", "python", "python", False),
    ("done_regex", "done_regex", "done_regex", False),
    ("record", "record", "record", False),
)


def _stored(key: str, cfg: dict[str, Any]) -> Any:
    value = cfg.get(key)
    if key == "shard":
        return tuple(value or (0, 1))
    if key in ("inject", "exec_argv"):
        return list(value or [])
    if key == "env":
        return dict(value or {})
    if key == "engine":
        return value or Engine.PYTHON.value
    return value


def _same(key: str, given: Any, stored: Any) -> bool:
    if key == "target" and given is not None and stored is not None:
        from stress.programs import targets

        try:
            return targets.parse(str(given)).name == targets.parse(str(stored)).name
        except UsageError:
            return False
    return bool(given == stored)


def continue_plan(opts: SoakOptions, runs: list[dict[str, Any]]) -> SoakOptions:
    """SoakOptions for the next run of the plan of `runs` (the folder's runs, oldest first)."""
    cfg = runs[-1]["config"]
    if not cfg:
        raise UsageError(f"{opts.results}: its run recorded no plan (an older iree-stress?); "
                         "nothing to resume")
    changes: dict[str, Any] = {}
    for param, attr, key, plan in _CARRIED:
        stored = _stored(key, cfg)
        if param not in opts.given:
            changes[attr] = stored
        elif plan and not _same(key, getattr(opts, attr), stored):
            raise UsageError(f"--resume continues the plan of {opts.results}, whose "
                             f"{key.replace('_', ' ')} is {_show(stored)}, not "
                             f"{_show(getattr(opts, attr))}: a new plan needs a new --results "
                             "folder")
    if Engine.of(changes.get("engine", opts.engine)) is Engine.EXEC:
        if "command" not in opts.given and cfg.get("exec_cwd"):
            changes["cwd"] = Path(cfg["exec_cwd"])
        if "exec_name" not in opts.given and cfg.get("programs"):  # the plan's own name
            changes["name"] = stored_name(cfg)
        return replace(opts, **changes)
    names = list(cfg.get("programs") or [])
    users = [n for n in names if n.startswith("user.")]
    if users and "program_files" not in opts.given:
        raise UsageError(f"{opts.results}: its plan has user programs ({', '.join(users)}); "
                         "give their --mlir files again to resume it")
    if "programs" not in opts.given:
        changes["programs"] = [n for n in names if not n.startswith("user.")]
    if "patterns" not in opts.given:
        changes["patterns"] = list(cfg.get("patterns") or [])
    return replace(opts, **changes)


def stored_name(cfg: dict[str, Any]) -> str | None:
    """The program name an exec run's config recorded (`exec:NAME`'s NAME), so a resume or a
    repro keeps it whatever folder or `--name` it runs with."""
    names = cfg.get("programs") or []
    return str(names[0]).removeprefix("exec:") if names else None


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value) or "none"
    return repr(value) if isinstance(value, str) else str(value)


def check_plan(folder: Path | None, cfg: dict[str, Any], target: str, programs: list[Program],
               patterns: list[str]) -> None:
    """The resolved programs, patterns and target are the plan's (globs and `all` given with
    --resume may name the same ones)."""
    for what, mine, stored in (("target", target, cfg.get("target")),
                               ("programs", [p.name for p in programs], cfg.get("programs")),
                               ("patterns", patterns, cfg.get("patterns"))):
        if stored is not None and mine != stored:
            raise UsageError(f"--resume continues the plan of {folder}, whose {what} are "
                             f"{_show(stored)[:200]}, not {_show(mine)[:200]}: a new plan "
                             "needs a new --results folder")


def planned_before(config: SoakConfig, folder: Path) -> int:
    """Invocations of the plan's jobs before config.first_job: what a --invocations plan has
    used up (0 for a plan bounded by time). Raises UsageError when nothing is left."""
    if config.invocations is None or config.first_job <= 0:
        return 0
    total = 0
    for job in schedule(config.seed, config.programs, config.patterns, config.shard,
                        config.job_scale, config.job_seed):
        if job.index >= config.first_job:
            break
        total += job.invocations
        if total >= config.invocations:
            raise UsageError(f"the plan of {folder} is done (its {config.invocations:,} "
                             "planned invocations were all drawn); nothing to resume")
    return total
