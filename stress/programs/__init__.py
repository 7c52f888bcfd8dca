"""Stage 1: programs (corpus + user files), targets, compiler argv, artifact cache."""
