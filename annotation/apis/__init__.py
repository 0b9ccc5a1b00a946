"""DRF endpoints, one module per area: one APIView per operation."""

from __future__ import annotations
