"""iree-stress: find, reproduce and pin down flakes in the IREE runtime."""

from __future__ import annotations

__version__ = "0.1.0"
