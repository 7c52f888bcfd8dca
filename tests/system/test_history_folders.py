"""`iree-stress history` over real gate run folders (issue 38): what `gate` writes is read back
as one trial of the nightly in its folder's path, failed or not as the gate saw it, with the
sha256 of the IREE runtime library its workers loaded in the manifest."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GATE = ["gate", "-t", "cpu", "-w", "1", "--threads", "1", "-n", "4", "-p", "unary.exp.f32*",
        "-P", "shared", "--max-rate", "0.5", "-q"]


def iree_stress(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "stress", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=600)


@pytest.mark.slow  # two gates of ~12 s each on 2 cores
def test_history_reads_real_nightly_gate_runs_as_trials_of_their_nightlies(
        tmp_path: Path) -> None:
    good, bad = "7.11.0a20251124", "7.11.0a20251125"
    for version, extra in ((good, []), (bad, ["--inject", "raise@invoke:1.0"])):
        gate = iree_stress(*GATE, *extra, "--results", str(tmp_path / version / "run-0"))
        assert gate.returncode in (0, 1, 3), gate.stderr
    out = iree_stress("history", str(tmp_path), "--json")
    assert out.returncode == 3, out.stderr  # two runs cannot be sure
    h = json.loads(out.stdout)
    assert [(r["stack"], r["failed"]) for r in h["runs"]] == [(good, False), (bad, True)]
    assert h["ran"] == 0 and h["trials"] == 2 and h["next_stack"]
    summary = json.loads((tmp_path / good / "run-0" / "summary.json").read_text())
    assert any("/iree/_runtime_libs/" in p for p in summary["manifest"]["library_hashes"])
