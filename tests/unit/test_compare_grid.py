"""compare --grid (issue 11): the IREE side and the ROCm side crossed, the fusilli ablation."""

from __future__ import annotations

import random
from pathlib import Path

from click.testing import CliRunner

from stress.cli import cli
from stress.runtimes.spec import Stack, cross
from stress.verdicts.compare import Verdict
from stress.verdicts.grid import compare_grid, grid_exit_code, render_grid
from stress.verdicts.trials import Cached, Trial, TrialCache


def test_crossing_takes_the_iree_side_of_one_and_the_rocm_side_of_the_other() -> None:
    old = Stack("old", ("iree-base-runtime==3.9.0rc20251112",), compiler="3.9.0rc20251112",
                rocm_requirements=("rocm[libraries]==7.10.0a20251112",),
                rocm_index_url="IDX", env=(("A", "old"), ("HSA_X", "old")))
    new = Stack("new", ("iree-base-runtime==3.10.0rc20251201",), compiler="3.10.0rc20251201",
                rocm="/data/therock-7.11.tar.gz", env=(("HSA_X", "new"),))
    c = cross(old, new)
    assert c.name == "old+rocm-of-new"
    assert c.runtime_version == "3.9.0rc20251112" and c.compiler == "3.9.0rc20251112"
    assert c.rocm == "/data/therock-7.11.tar.gz" and c.rocm_requirements == ()
    assert dict(c.env) == {"A": "old", "HSA_X": "new"}
    assert c.key() != old.key()


class Grid:
    """Stacks whose ROCm side decides: anything holding new's ROCm fails half its trials."""

    def __init__(self) -> None:
        self.rng = random.Random(7)
        self.calls: list[tuple[str, int]] = []

    def run(self, stack: str, index: int, seed: int) -> Trial:
        self.calls.append((stack, index))
        bad = stack == "new" or stack.endswith("rocm-of-new")
        return Trial(stack, index, seed, bad and self.rng.random() < 0.5)


def test_the_grid_says_which_side_carries_the_difference(tmp_path: Path) -> None:
    fake = Grid()
    runner = Cached(fake, TrialCache(tmp_path, "plan"))
    cells = compare_grid(runner, "old", "new", "old+rocm-of-new", "new+rocm-of-old", seed=0)
    assert [c.verdict for c in cells] == [Verdict.B_WORSE, Verdict.B_WORSE,
                                          Verdict.NO_DIFFERENCE]
    a_runs = [i for s, i in fake.calls if s == "old"]
    assert len(a_runs) == len(set(a_runs))  # A's trials run once, reused by every cell
    assert grid_exit_code(cells) == 1
    text = render_grid(cells)
    assert "ROCm side alone" in text and "IREE side alone" in text


def test_grid_without_a_rocm_side_is_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "stacks.toml"
    f.write_text("[stacks.a]\n\n[stacks.b]\n")
    res = CliRunner().invoke(cli, ["compare", "a", "b", "--grid", "--stacks", str(f)],
                             standalone_mode=False)
    assert "neither has one" in str(res.exception)
