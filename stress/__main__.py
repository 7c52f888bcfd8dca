from __future__ import annotations

from stress.cli import main

main()
