"""Training the inspection agent: cold-start SFT and agentic GRPO with TRL (ml_path.md 1-2).

Modules import torch, transformers and TRL lazily where they can, so ``import training`` stays
cheap for the web app; the trainers themselves obviously need them.
"""

from __future__ import annotations
