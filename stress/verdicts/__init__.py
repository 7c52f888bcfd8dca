"""Verdicts on recorded runs: the CI gate (gate, shards), and comparisons across runtime
stacks (compare, bisect, stacks)."""
