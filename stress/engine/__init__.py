"""Stage 3: the soak engine (parent session, worker processes, patterns, journal, watchdog)."""
