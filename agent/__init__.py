"""specvet's inspection agent: plain Python, importable without Django or torch."""

from __future__ import annotations
