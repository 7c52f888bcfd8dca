"""Where the engine puts what it observes: a Protocol, so the engine does not import the store
(stages depend downward only: the soak command hands the session a store.db.RunStore)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class Records(Protocol):
    def start_run(self, run_id: str, seed: int, command: str, manifest: dict[str, Any],
                  config: dict[str, Any]) -> None: ...

    def update_manifest(self, run_id: str, manifest: dict[str, Any]) -> None: ...

    def end_run(self, run_id: str, status: str, stop_reason: str = "") -> None: ...

    def add_job(self, run_id: str, worker: int, payload: dict[str, Any],
                outcome: str) -> None: ...

    def add_failure(self, run_id: str, f: dict[str, Any]) -> int: ...

    def update_failure(self, row: int, evidence: dict[str, Any],
                       native_tid: int | None = None) -> None: ...

    def add_failure_counts(self, run_id: str, job: dict[str, Any],
                           counts: dict[str, int]) -> None: ...

    def add_window(self, run_id: str, kind: str, pattern: str | None, tokens: list[str],
                   in_flight: list[str], slot: int,
                   steps: list[dict[str, Any]] | None = None) -> None: ...

    def add_worker(self, run_id: str, worker: int, gen: int, pid: int) -> int: ...

    def end_worker(self, row: int, exit_code: int | None, signal_name: str | None,
                   reason: str, facts: dict[str, Any] | None = None, *,
                   outcome: str | None = None, device_used: int | None = None,
                   exit_path: str | None = None, job_index: int | None = None,
                   pattern: str | None = None, batch: int | None = None,
                   exit_order: int | None = None, bye_at: float | None = None) -> None: ...

    def set_phases(self, run_id: str, phases: Iterable[tuple[str, float, int]]) -> None: ...

    def tick(self) -> None: ...

    def close(self) -> None: ...
