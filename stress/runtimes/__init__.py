"""Runtime stacks: named environments (IREE wheels, TheRock wheels or tarball, extra env) that
`compare` and `bisect` run soaks under, each in its own cached venv. `spec` reads a stacks file
into `Stack`s (what the user wrote, checked before anything runs); `provision` builds a stack
into a ready environment (`Built`: venv, HIP library, env) and checks that the workers ran
what the stack names. "Stacks" here are runtimes; call stacks live in `stress.stacktext`.
"""
