"""stress/keys.py: the one message_key (issue 25: it existed three times). Errors that differ
only in values group together; a key is idempotent, so keys in old stores still join."""

from __future__ import annotations

from stress.engine.execrunner import normalize_line
from stress.engine.invocation import FailureNote
from stress.keys import MESSAGE_KEY_CHARS, message_key


def test_errors_that_differ_only_in_numbers_and_addresses_get_one_key() -> None:
    a = message_key("RESOURCE_EXHAUSTED; allocation of 4096 bytes at 0x7f00dead failed (t=1.5e-3)")
    b = message_key("RESOURCE_EXHAUSTED; allocation of 65536 bytes at 0xABC failed (t=20.25)")
    assert a == b == "RESOURCE_EXHAUSTED; allocation of # bytes at # failed (t=#)"
    assert message_key("INVALID_ARGUMENT; 3 args") != a


def test_a_key_is_the_first_line_cut_to_its_length_and_is_idempotent() -> None:
    long = "x" * (MESSAGE_KEY_CHARS + 50)
    assert message_key("  first 12\nsecond 34\n") == "first #"
    assert len(message_key(long)) == MESSAGE_KEY_CHARS
    assert message_key("") == message_key("   \n") == ""
    key = message_key("device 3 lost after 0x1f frees")
    assert message_key(key) == key


def test_the_engines_failure_keys_and_exec_output_lines_blank_numbers_the_same_way() -> None:
    failure = FailureNote("error", "invoke", "code 13 at 0x10\nmore", 0, 0)
    assert failure.key() == f"error|invoke|{message_key('code 13 at 0x10')}"
    assert normalize_line("pid 4242 at /tmp/x/y: 0.5") == "pid # at <path>: #"
