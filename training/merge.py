"""Merge a LoRA adapter into its base model and write a checkpoint vLLM and transformers serve.

The final checkpoint of ``training.sft``/``training.grpo`` is already merged. This is for the
intermediate ``checkpoint-N`` folders a LoRA run saves (adapter only) and for adapters trained
elsewhere:

```bash
python -m training.merge --adapter runs/grpo-7b-lora/checkpoint-200 \\
    --base /models/Qwen2.5-VL-7B-Instruct --output runs/grpo-7b-step200
```

The output holds the merged weights, the processor under the stock ``Qwen2_5_VLProcessor`` class
names, the project chat template (``chat_template.jinja`` and in the processor config) and a
``specvet_lineage.json`` (the adapter folder's own lineage when it has one) and a
``specvet_training_spectra.json``: the spectra the adapter folder records with those of the base
(so an evaluation of the merged model still refuses what it trained on). Serve it with the
project template and no tool parser (the agent parses ``<tool_call>`` itself):

```bash
vllm serve runs/grpo-7b-step200 --chat-template agent/chat_template.jinja \\
    --chat-template-content-format openai --limit-mm-per-prompt '{"image": 9}' \\
    --max-model-len 16384 --served-model-name spec-o3
```
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from agent.splits import (
    SplitMembers,
    load_training_spectra,
    save_training_spectra,
    with_base_spectra,
)
from training.checkpoint import LINEAGE_FILE, load_lineage, new_lineage, save_checkpoint

logger = logging.getLogger(__name__)


def merge_adapter(
    adapter: str | Path,
    output: str | Path,
    *,
    base: str | Path | None = None,
    dtype: str = "auto",
    stage: str = "grpo",
) -> Path:
    """Load ``base`` (default: the adapter config's base path) plus ``adapter``, merge, save."""
    from peft import PeftConfig, PeftModel
    from transformers import Qwen2_5_VLForConditionalGeneration

    from agent.policies.qwen_processor import load_processor

    adapter = Path(adapter)
    if not (adapter / "adapter_config.json").is_file():
        raise ValueError(f"{adapter} holds no adapter_config.json: not a LoRA adapter folder")
    base_path = Path(base or PeftConfig.from_pretrained(str(adapter)).base_model_name_or_path)
    if not base_path.is_dir():
        raise ValueError(f"base model {base_path} is not a local directory (pass --base)")
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(base_path), dtype=dtype)
    model = PeftModel.from_pretrained(model, str(adapter)).merge_and_unload()
    processor_source = adapter if (adapter / "tokenizer_config.json").is_file() else base_path
    processor = load_processor(processor_source)
    if (adapter / LINEAGE_FILE).is_file():
        lineage = load_lineage(adapter)
    else:
        lineage = new_lineage(
            stage=stage,
            base_model=str(base_path),
            dataset_version="unknown",
            dataset={"note": f"merged from adapter {adapter}; its training data is not recorded"},
            config={"adapter": str(adapter)},
        )
    out = save_checkpoint(model, processor, output, lineage)
    spectra = merged_training_spectra(adapter, base_path)
    if spectra is not None:
        save_training_spectra(out, spectra)
    else:
        logger.warning(
            "neither %s nor %s records its training spectra: %s gets none, and evaluations of "
            "it cannot refuse spectra it trained on",
            adapter, base_path, out,
        )  # fmt: skip
    return out


def merged_training_spectra(adapter: Path, base: Path) -> SplitMembers | None:
    """The adapter folder's recorded training spectra with the base checkpoint's, or None when
    neither records any."""
    own = load_training_spectra(adapter)
    if own is None:
        return load_training_spectra(base)
    return with_base_spectra(own, base)


def main(argv: Sequence[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(prog="python -m training.merge", description=__doc__)
    parser.add_argument("--adapter", required=True, type=Path, help="LoRA adapter folder")
    parser.add_argument("--output", required=True, type=Path, help="merged checkpoint folder")
    parser.add_argument("--base", type=Path, help="base model folder (default: adapter config's)")
    parser.add_argument("--dtype", default="auto", help="e.g. bfloat16; auto keeps the base's")
    parser.add_argument(
        "--stage",
        default="grpo",
        choices=["sft", "grpo"],
        help="lineage stage when the adapter folder has no specvet_lineage.json",
    )
    arguments = parser.parse_args(argv)
    path = merge_adapter(
        arguments.adapter,
        arguments.output,
        base=arguments.base,
        dtype=arguments.dtype,
        stage=arguments.stage,
    )
    logger.info("merged checkpoint written to %s", path)
    return path


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    main()
