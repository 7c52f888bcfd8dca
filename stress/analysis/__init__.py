"""Stage 5: analysis of a run's records (summaries, signatures, correlation, reports)."""
