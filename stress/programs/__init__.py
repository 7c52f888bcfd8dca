"""Stage 1 (docs/architecture.md): programs (corpus + user files), targets, compiler argv,
artifact cache."""
