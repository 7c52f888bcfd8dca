"""The gate tests' synthetic stores (tests/helpers/gate_stores.py) read back like a soak's."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.gate_stores import make_store


def test_a_synthetic_store_reads_back_like_a_soak_summary(tmp_path: Path) -> None:
    from stress.store import summary

    make_store(tmp_path / "r", "r1", range(40), crash_jobs=[3], error_jobs=[5, 6])
    s = summary.build(tmp_path / "r")
    # the crashed job died with its process (no job row) and still counts (issue 28 item 3)
    assert (s["jobs"], s["jobs_finished"]) == (40, 39)
    assert (s["failures"]["crash"], s["failures"]["error"]) == (1, 2)
    assert s["status"] == "completed" and s["run_id"] == "r1"
