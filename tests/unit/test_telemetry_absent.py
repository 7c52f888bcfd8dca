"""AMD telemetry where no AMD tool is installed (issue 37): a rocm run (the stand-in HIP lane)
says so in one line, in its manifest and its header, and records no rows of failed reads (no
empty plots, no errors); a hang's snapshot says the same without starting a child."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from stress.analysis import header
from stress.engine import telemetry, timeline

ONE_LINE = ("none: no rocm telemetry tool here (amdsmi, amd-smi, rocm-smi), so no GPU time "
            "line or snapshots")


class _TimelineStore:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.marks: list[tuple[str, str]] = []

    def add_telemetry(self, run_id: str, rows: Any) -> None:
        self.rows += list(rows)

    def add_mark(self, run_id: str, t: float, kind: str, label: str) -> None:
        self.marks.append((kind, label))

    def set_worker_device(self, row: int, device: str) -> None:
        pass


@pytest.fixture
def no_amd_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no amd-smi, no rocm-smi
    monkeypatch.setattr(telemetry, "_importable", lambda module: False)  # no amdsmi module


def test_a_rocm_run_without_amd_tools_says_so_in_one_line_and_starts_no_sampler(
        no_amd_tools: None) -> None:
    store = _TimelineStore()
    line = timeline.RunTimeline(store, "r1", "hip", ["hip://0"], period_s=0.1)
    assert line.start() is False and line.sampler is None
    assert line.note == ONE_LINE
    line.mark("phase-start", "soak")
    line.record(final=True)
    assert store.rows == [] and store.marks == []  # no rows of failed reads to plot
    said = dict(header.rows([{"driver": "hip", "telemetry": line.note,
                              "config": {"engine": "python", "target": "rocm:gfx942"}}]))
    assert said["telemetry"] == ONE_LINE


def test_a_hangs_snapshot_without_amd_tools_is_a_note_not_an_error(no_amd_tools: None) -> None:
    t0 = time.monotonic()
    snap = telemetry.snapshot("rocm")
    assert time.monotonic() - t0 < 1.0  # no child started to find nothing
    assert "error" not in snap and snap["note"] == ONE_LINE and snap["source"] is None


def test_with_one_amd_tool_on_path_the_sampler_starts(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    tool = tmp_path / "rocm-smi"
    tool.write_text("#!/bin/sh\necho '{}'\n")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(telemetry, "_importable", lambda module: False)
    assert telemetry.none_usable("rocm") == ""
    line = timeline.RunTimeline(_TimelineStore(), "r1", "hip", ["hip://0"], period_s=0.1)
    try:
        assert line.start() is True and line.note == "rocm every 0.1 s"
    finally:
        line.record(final=True)


def test_a_cpu_or_vulkan_run_has_no_telemetry_line() -> None:
    assert telemetry.none_usable("") == ""  # timeline.backend_of("vulkan")
    assert "telemetry" not in dict(header.rows([{"driver": "local-task", "config": {}}]))
