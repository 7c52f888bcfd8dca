"""Stage 3 (docs/architecture.md): the results store (SQLite with numbered migrations),
summary.json, merging."""
