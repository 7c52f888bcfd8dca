"""Every corpus program, compiled for cpu, matches its numpy reference (issue #2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.engine.invocation import Device, Expectation, JobResult, timed_call
from stress.engine.journal import JournalWriter
from stress.programs import corpus
from stress.programs.program import make_inputs

pytestmark = pytest.mark.system


def test_every_corpus_program_matches_its_numpy_reference_on_cpu(
        cpu_artifacts: dict[str, Path], tmp_path: Path) -> None:
    from iree.runtime import _binding as b

    writer = JournalWriter(tmp_path / "j.bin", slots=1).acquire()
    instance = b.VmInstance()
    driver = b.create_hal_driver("local-sync")
    dev = Device(driver, "local-sync", writer)
    bad = []
    for program in corpus.corpus():
        module = b.VmModule.copy_buffer(instance, cpu_artifacts[program.name].read_bytes())
        lp = dev.load(instance, module, program, writer)
        for seed in (1, 2):
            inputs = make_inputs(program, seed)
            expect = Expectation(program, seed, inputs)
            assert expect.expected is not None
            result = JobResult()
            timed_call(lp, inputs, writer, dev.id, expect, result, 0)
            if result.ok != 1:
                bad.append((program.name, seed, [f.message for f in result.failures]))
        lp.close()
    dev.release(writer)
    assert not bad, bad


def test_a_wrong_result_is_reported_as_a_miscompare(cpu_artifacts: dict[str, Path],
                                                    tmp_path: Path) -> None:
    from iree.runtime import _binding as b

    writer = JournalWriter(tmp_path / "j.bin", slots=1).acquire()
    instance = b.VmInstance()
    dev = Device(b.create_hal_driver("local-sync"), "local-sync", writer)
    program = corpus.by_name()["unary.exp.f32.64x64"]
    wrong = corpus.by_name()["unary.sin.f32.64x64"]  # run sin, expect exp
    module = b.VmModule.copy_buffer(instance, cpu_artifacts[wrong.name].read_bytes())
    lp = dev.load(instance, module, wrong, writer)
    inputs = make_inputs(program, 3)
    result = JobResult()
    timed_call(lp, inputs, writer, dev.id, Expectation(program, 3, inputs), result, 0)
    assert result.miscompare == 1 and "numpy reference" in result.failures[0].message
    lp.close()
    dev.release(writer)


def test_staging_readback_used_for_gpu_device_memory_gives_the_same_results(
        cpu_artifacts: dict[str, Path], tmp_path: Path) -> None:
    """GPU results live in device-local memory that cannot be mapped; the worker copies them
    through a host staging buffer (queue_copy + fence). Forced here on cpu to check it."""
    from iree.runtime import _binding as b

    from stress.engine.invocation import LoadedProgram

    writer = JournalWriter(tmp_path / "j.bin", slots=1).acquire()
    instance = b.VmInstance()
    dev = Device(b.create_hal_driver("local-task"), "local-task", writer)
    for name in ("binary.add.f16.2x16x64x64+1x16x1x1", "unary.exp.bf16.64x64",
                 "binary.add.f32.scalar+scalar"):
        program = corpus.by_name()[name]
        module = b.VmModule.copy_buffer(instance, cpu_artifacts[name].read_bytes())
        for mode in ("map", "copy"):
            lp = LoadedProgram(instance, dev.hal_device, module, program, readback=mode)
            inputs = make_inputs(program, 9)
            result = JobResult()
            timed_call(lp, inputs, writer, dev.id, Expectation(program, 9, inputs), result, 0)
            assert result.ok == 1, (name, mode, [f.message for f in result.failures])
            lp.close()
    dev.release(writer)
