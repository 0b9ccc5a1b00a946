"""Write the tiny random Qwen2.5-VL checkpoint used by CPU smoke runs and tests.

```bash
python -m training.tiny_model /tmp/specvet-tiny-qwen25vl
```

The builder is ``agent.policies.tiny_qwen`` (ml_path.md section 4), reused here rather than
copied, so the CPU configs, the benchmarks and the tests train the same model. Production code
never imports the test package (tests/architecture/test_layers.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def build_tiny_model(
    path: str | Path,
    *,
    hidden_size: int = 32,
    num_attention_heads: int = 4,
    initializer_range: float | None = None,
) -> Path:
    """The tiny byte-level-tokenizer Qwen2.5-VL (2 layers, hidden 32 unless widened) written
    into ``path``; ``initializer_range`` scales its random weights (None: transformers' 0.02)."""
    from agent.policies.tiny_qwen import build_tiny_qwen25vl

    return build_tiny_qwen25vl(
        path,
        hidden_size=hidden_size,
        num_attention_heads=num_attention_heads,
        initializer_range=initializer_range,
    )


def main(args: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir", type=Path, help="directory to write the checkpoint into")
    path = build_tiny_model(parser.parse_args(args).output_dir)
    print(f"tiny Qwen2.5-VL written to {path}")
    return path


if __name__ == "__main__":
    main()
