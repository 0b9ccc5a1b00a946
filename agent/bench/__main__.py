"""``python -m agent.bench``: see agent.bench.cli."""

from __future__ import annotations

from agent.bench.cli import main

raise SystemExit(main())
