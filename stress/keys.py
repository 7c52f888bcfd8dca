"""How failure text becomes a grouping key: numbers and addresses blanked, so errors that differ
only in a value, a pid or a pointer group together. One home for the engine (failure counts,
exec output lines) and for analysis (signatures, JUnit): keys both sides compute must join, in
old stores too. Low in the tree: it imports nothing of ours."""

from __future__ import annotations

import re

NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+(\.\d+)?(e-?\d+)?")  # hex addresses, ints, floats
MESSAGE_KEY_CHARS: int = 120  # a key's length: failure_counts rows and signatures join on it


def blank_numbers(text: str) -> str:
    """`text` with every number and hex address replaced by `#` (idempotent)."""
    return NUMBERS.sub("#", text)


def message_key(message: str) -> str:
    """A message's first line with numbers and addresses blanked, cut to MESSAGE_KEY_CHARS
    (idempotent: applied to an already blanked key it returns it unchanged, so old and new
    stores join)."""
    head = message.strip().splitlines()[0] if message.strip() else ""
    return blank_numbers(head)[:MESSAGE_KEY_CHARS]
