"""Builders for the engine's parts in unit tests: a soak config of the embedded cpu target, and
a failure recorder around a store of the test's choosing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stress.engine.config import SoakConfig
from stress.engine.progress import Progress
from stress.engine.recorder import Recorder
from stress.engine.tally import RunTally
from stress.programs import targets


def soak_config(results: Path, **cfg: Any) -> SoakConfig:
    """A cpu (local-task) soak config with no programs; `cfg` sets any other field."""
    base: dict[str, Any] = {"workers": 1, "threads": 1, "patterns": ["shared"],
                            "progress": False, **cfg}
    return SoakConfig(target=targets.parse("cpu"), driver="local-task",
                      device_uri="local-task", programs=[], artifacts={}, seed=1,
                      results_dir=results, **base)


def recorder(run_dir: Path, store: Any, **cfg: Any) -> Recorder:
    """A Recorder of run "r1" writing into `store` and `run_dir`."""
    config = soak_config(run_dir, **cfg)
    tally = RunTally()
    return Recorder(config, "r1", run_dir, store, tally, Progress(config, tally, {}), "python3")
