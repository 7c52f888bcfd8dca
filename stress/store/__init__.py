"""Stage 4: the results store (SQLite with numbered migrations), summary.json, merging."""
