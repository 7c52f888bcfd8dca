from __future__ import annotations

import itertools

from stress.engine.jobs import schedule
from stress.engine.patterns import ALL_PATTERNS
from stress.programs import corpus

PROGS = list(corpus.corpus())
PATS = list(ALL_PATTERNS)


def take(seed: int, n: int, **kw: object) -> list[tuple[int, str, str, int, int]]:
    return [(j.index, j.program, j.pattern, j.seed, j.invocations)
            for j in itertools.islice(schedule(seed, PROGS, PATS, **kw), n)]  # type: ignore[arg-type]


def test_same_seed_gives_the_same_job_sequence() -> None:
    assert take(42, 500) == take(42, 500)


def test_different_seeds_give_different_sequences() -> None:
    assert take(42, 50) != take(43, 50)


def test_every_block_of_jobs_uses_every_pattern() -> None:
    jobs = take(5, len(PATS) * 10)
    for block in range(10):
        got = {p for _, _, p, _, _ in jobs[block * len(PATS):(block + 1) * len(PATS)]}
        assert got == set(PATS)


def test_shards_partition_the_plan_without_aliasing_patterns() -> None:
    whole = take(9, 700)
    limit = whole[-1][0]
    shards = [[j for j in take(9, 700, shard=(i, 7)) if j[0] <= limit] for i in range(7)]
    merged = sorted(itertools.chain.from_iterable(shards))
    assert merged == whole
    for shard in shards:  # 7 shards x 7 patterns must not give one pattern per shard
        assert len({p for _, _, p, _, _ in shard}) == len(PATS)


def test_large_programs_get_fewer_invocations_per_job() -> None:
    big = corpus.by_name()["binary.add.f32.2048x4096+2048x4096"]
    small = corpus.by_name()["binary.add.f32.3x5x7+3x5x7"]
    from stress.engine.jobs import invocations_for

    assert invocations_for("shared", big) < invocations_for("shared", small)


def test_job_seed_override_fixes_every_input_seed() -> None:
    assert {j[3] for j in take(1, 30, job_seed=77)} == {77}


def test_a_resumed_plan_is_the_same_stream_from_its_start_index_shards_included() -> None:
    # issue 28 (item 1): `soak --resume` goes on with the jobs the earlier runs never reached
    for start in (0, 1, 6, 7, 8, 300):
        whole = [j for j in take(4, 400) if j[0] >= start][:50]
        assert take(4, 50, start=start) == whole
    sharded = [j for j in take(4, 400, shard=(2, 3)) if j[0] >= 100][:20]
    assert take(4, 20, shard=(2, 3), start=100) == sharded
