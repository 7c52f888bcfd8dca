"""Stage 2 (docs/architecture.md): the soak engine (parent session, worker processes, patterns,
journal, watchdog)."""
