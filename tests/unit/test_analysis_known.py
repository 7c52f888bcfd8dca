"""Known-failures files (issue 9 item 2): read, matched by id or key pattern, bad files told
with file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from stress.analysis import known
from stress.errors import UsageError

GOOD = '''# filed upstream
[[known]]
signature = "S1a2b3c4d"
note = "TheRock stall in hipDeviceReset"
link = "https://example.invalid/issue/1"

[[known]]
match = "teardown_hang|*|worker-exit|busy|*"   # any busy stall at exit
note = "spins at exit"
'''


def test_entries_match_by_id_or_by_a_glob_over_the_key(tmp_path: Path) -> None:
    f = tmp_path / "known.toml"
    f.write_text(GOOD)
    k = known.load(f)
    assert len(k.entries) == 2
    hit = k.lookup("S1a2b3c4d", "crash|SIGSEGV|invoke||x|")
    assert hit is not None and hit.link.endswith("/1")
    spin = k.lookup("Sffffffff", "teardown_hang||worker-exit|busy|iree_fault_spin|")
    assert spin is not None and spin.note == "spins at exit"
    assert k.lookup("Sffffffff", "teardown_hang||worker-exit|blocked|x|") is None


def test_the_small_reader_for_python_3_10_reads_the_same_entries(tmp_path: Path) -> None:
    tables, lines = known.tiny_toml(GOOD, tmp_path / "k.toml")
    assert [t.get("note") for t in tables] == ["TheRock stall in hipDeviceReset",
                                               "spins at exit"]
    assert lines == [2, 7]
    with pytest.raises(UsageError, match=r"k.toml:3"):
        known.tiny_toml("[[known]]\nnote = 'x'\nsignature = 12\n", tmp_path / "k.toml")


@pytest.mark.parametrize(("text", "why"), [
    ('[[known]]\nsignature = "S1"\n', "needs a `note`"),
    ('[[known]]\nsignature = "S1"\nmatch = "*"\nnote = "n"\n', "exactly one of"),
    ('[[known]]\nsignature = "S1"\nnote = "n"\nurl = "u"\n', "unknown key"),
    ('[[known]]\nsignature = "S1"\nnote = "n"\n[other]\n', "unknown top-level"),
    ('[[known]\n', "known.toml"),
])
def test_a_bad_file_is_one_clear_usage_error(tmp_path: Path, text: str, why: str) -> None:
    f = tmp_path / "known.toml"
    f.write_text(text)
    with pytest.raises(UsageError, match=why) as err:
        known.load(f)
    assert str(f) in str(err.value)


def test_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        known.load(tmp_path / "nope.toml")


# The H200 soak's two CUDA errors (docs/gpu-runs.md): the error's name comes after the 120
# characters a key keeps, so a pattern on the key alone missed both.
CUDA_MESSAGES = [
    ("module-load", "InvocationError: Error creating vm context with modules: c/runtime/src/iree/"
                    "hal/drivers/cuda/native_executable.c:389: INTERNAL; CUDA error "
                    "'CUDA_ERROR_INVALID_CONTEXT' (201): invalid device context; while invoking"),
    ("upload", "RuntimeError: Failed to allocate buffer copy: c/runtime/src/iree/hal/drivers/"
               "cuda/cuda_allocator.c:421: INTERNAL; CUDA error 'CUDA_ERROR_INVALID_CONTEXT' "
               "(201): invalid device context"),
]


@pytest.mark.parametrize(("step", "message"), CUDA_MESSAGES)
def test_a_pattern_matches_words_past_the_part_of_the_message_a_key_keeps(
        step: str, message: str) -> None:
    from stress.analysis.signatures import Signature, SignatureKey
    from stress.keys import message_key

    key = SignatureKey("error", None, step, "", (), message_key(message))
    assert "CUDA_ERROR_INVALID_CONTEXT" not in key.text()  # what made the known file miss
    sig = Signature(key, rows=[{"message": message + "\nTraceback ..."}])
    entries = (known.KnownFailure("cuda context", match="error|*CUDA_ERROR_INVALID_CONTEXT*"),)
    k = known.KnownFailures(None, entries)
    assert k.lookup_signature(sig) is entries[0]
    assert k.lookup(sig.id, key.text()) is None
    other = Signature(key, rows=[{"message": message.replace("INVALID_CONTEXT", "OUT_OF_MEMORY")}])
    assert k.lookup_signature(other) is None
    # one key, two errors past its 120 characters: naming one must not make the other known
    mixed = Signature(key, rows=[{"message": message}, {"message": message.replace(
        "INVALID_CONTEXT", "ILLEGAL_ADDRESS")}, {"message": message}])
    assert k.lookup_signature(mixed) is None


def test_a_crash_is_not_made_known_by_words_of_the_harness_line_about_it() -> None:
    """A crash's row message is the harness's own line (worker, program, pattern): a pattern
    must match the fault (the key), not that line."""
    from stress.analysis.signatures import Signature, SignatureKey

    key = SignatureKey("crash", "SIGSEGV", "invoke", "", ("memset", "iree_hal_fault"), "")
    sig = Signature(key, rows=[{"message": "worker w3 killed by SIGSEGV while running "
                                           "unary.exp.f32.64x64 [cross-thread] seed=1 n=20"}])
    k = known.KnownFailures(None, (known.KnownFailure("x", match="*cross-thread*"),))
    assert k.lookup_signature(sig) is None
    assert known.KnownFailures(None, (known.KnownFailure("x", match="crash|SIGSEGV|*"),)) \
        .lookup_signature(sig) is not None


def test_the_cuda_known_file_in_docs_names_both_h200_errors() -> None:
    from stress.analysis.signatures import Signature, SignatureKey
    from stress.keys import message_key

    k = known.load(Path(__file__).resolve().parents[2] / "docs" / "findings" / "known-cuda.toml")
    for step, message in CUDA_MESSAGES:
        sig = Signature(SignatureKey("error", None, step, "", (), message_key(message)),
                        rows=[{"message": message}])
        assert k.lookup_signature(sig) is not None, step


def test_the_vulkan_known_file_names_narrow_type_miscompares_and_never_a_32_bit_one() -> None:
    """issue 37: IREE's default Vulkan target miscompiles f16, bf16 and i8 programs; the known
    file says so for signatures of those programs only (by `programs`), so an f32 program's
    wrong answer stays new even in the same signature."""
    from collections import Counter

    from stress.analysis.signatures import Signature, SignatureKey

    k = known.load(Path(__file__).resolve().parents[2] / "docs" / "known" /
                   "vulkan-default-target.toml")
    key = SignatureKey("miscompare", None, "check", "", (),
                       "output # differs from the numpy reference (max abs error #)")
    narrow = Signature(key, programs=Counter({"unary.neg.i8.64x64": 3,
                                              "binary.pow.f16.2x16x64x64+1x16x1x1": 2,
                                              "unary.sin.bf16.64x64": 1}))
    assert k.lookup_signature(narrow) is not None
    with_f32 = Signature(key, programs=Counter({"unary.neg.i8.64x64": 3,
                                                "unary.exp.f32.64x64": 1}))
    assert k.lookup_signature(with_f32) is None
    assert k.lookup_signature(Signature(key)) is None  # no program known: not claimed
    crash = Signature(SignatureKey("crash", "SIGSEGV", "invoke", "", ("f",), ""),
                      programs=Counter({"unary.neg.i8.64x64": 1}))
    assert k.lookup_signature(crash) is None
