"""bench/bisect_peer.py (issue 40): our bisect and git-bayesect's Bisector must read the same
pre-drawn trial outcomes, or the side-by-side table compares luck, not methods."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from bisect_peer import SETTINGS, draw_table, one_run, run_bayesect, run_ours, same_outcomes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_the_bench_at_a_small_size_says_both_methods_read_the_same_outcomes() -> None:
    out = subprocess.run([sys.executable, "bench/bisect_peer.py", "--runs", "3", "--candidates",
                          "6", "--settings", "1,7", "--jobs", "1"], capture_output=True,
                         text=True, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "same outcomes (6 stacks): 6 of 6 runs" in out.stdout
    assert "did not read the same outcomes" not in out.stdout


def test_each_method_reads_a_stacks_outcomes_in_order_from_the_one_table() -> None:
    for run in range(4):
        change, outcomes, same = one_run((1, 8, 3, run, 0.975, 300))
        assert same, f"run {run}"
        assert 1 <= change < 8
        assert all(o.trials == sum(m for _, m in o.counts) > 0 for o in outcomes)


def test_a_method_given_other_outcomes_is_caught() -> None:
    rng = random.Random(7)
    rates, _ = SETTINGS[1].truth(8, rng)
    table = draw_table(rates, rng)
    other = draw_table(rates, random.Random(8))
    ours, peer = run_ours(table, 0.975, 300), run_bayesect(other, 0.975, 300)
    assert same_outcomes(table, [ours])
    assert same_outcomes(other, [peer])
    assert not same_outcomes(table, [ours, peer])
