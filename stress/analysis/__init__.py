"""Stage 4 (docs/architecture.md): analysis of a run's records (summaries, signatures,
correlation, reports)."""
