"""Shards (issue 10 item 3): 1-based on the command line, 0-based inside, taken from the CI
engine's own environment when --shard is not given."""

from __future__ import annotations

import pytest

from stress.errors import UsageError
from stress.verdicts.shards import ShardSource, parse_spec, resolve
from tests.conftest import run_cli


def test_the_command_line_form_is_one_based_like_nextest_partition() -> None:
    assert parse_spec("1/4") == (0, 4)
    assert parse_spec("4/4") == (3, 4)
    assert parse_spec(" 2 / 3 ") == (1, 3)


@pytest.mark.parametrize("text", ["0/4", "5/4", "1/0", "x/4", "2", "-1/4", ""])
def test_shard_numbers_outside_one_to_n_are_refused(text: str) -> None:
    with pytest.raises(UsageError):
        parse_spec(text)


def test_the_option_wins_over_every_environment() -> None:
    env = {"IREE_STRESS_SHARD": "3/4", "JOB_COMPLETION_INDEX": "0", "IREE_STRESS_SHARDS": "4"}
    shard = resolve("2/4", env)
    assert (shard.pair, shard.source) == ((1, 4), ShardSource.OPTION)
    assert resolve(None, env).pair == (2, 4)


def test_a_kubernetes_indexed_job_index_is_zero_based_with_the_total_from_our_variable() -> None:
    shard = resolve(None, {"JOB_COMPLETION_INDEX": "3", "IREE_STRESS_SHARDS": "4"})
    assert (shard.pair, shard.source) == ((3, 4), ShardSource.KUBERNETES)
    assert "4/4" in shard.describe()


def test_a_kubernetes_index_without_the_total_is_a_usage_error_not_the_whole_plan() -> None:
    with pytest.raises(UsageError, match="IREE_STRESS_SHARDS"):
        resolve(None, {"JOB_COMPLETION_INDEX": "1"})


def test_a_slurm_array_counts_from_its_first_task_id() -> None:
    env = {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "3"}
    assert resolve(None, env).pair == (2, 4)
    assert resolve(None, {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2"}).pair \
        == (0, 2)


def test_a_slurm_array_with_a_step_is_refused_rather_than_misnumbered() -> None:
    env = {"SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_MIN": "0"}
    with pytest.raises(UsageError, match="outside"):
        resolve(None, env)


def test_googletest_sharding_variables_are_read() -> None:
    shard = resolve(None, {"GTEST_SHARD_INDEX": "1", "GTEST_TOTAL_SHARDS": "3"})
    assert (shard.pair, shard.source) == ((1, 3), ShardSource.GTEST)


def test_no_shard_anywhere_is_the_whole_plan() -> None:
    shard = resolve(None, {"PATH": "/bin"})
    assert shard.pair == (0, 1) and shard.describe() == "whole plan"


def test_soak_refuses_a_zero_based_shard_with_one_line_and_exit_2() -> None:
    res = run_cli("soak", "--shard", "0/4", "-d", "1")
    assert res.rc == 2
    assert res.stderr.strip().count("\n") == 0 and "1-based" in res.stderr


def test_soak_refuses_a_bad_shard_from_the_environment_with_exit_2() -> None:
    res = run_cli("soak", "-d", "1", env={"IREE_STRESS_SHARD": "5/4"})
    assert res.rc == 2 and "IREE_STRESS_SHARD" in res.stderr
