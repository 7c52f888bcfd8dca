"""`iree-stress soak`: options (options.py) -> a plan and its config (plan.py) -> one session
with the engine's runner (run.py) -> the store -> summary.json; `soak --resume` (resume.py) and
`iree-stress repro` (repro.py) run soaks of a recorded plan. The orchestrator above the engine:
the verdicts (gate, compare, bisect) run it."""
