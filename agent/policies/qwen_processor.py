"""Loading a Qwen2.5-VL processor on machines without torchvision (CPU hosts, CI).

transformers 5 builds the Qwen2.5-VL video processor from torchvision; without it
``AutoProcessor.from_pretrained`` fails ("Can't load video processor") although the tokenizer and
the PIL image processor load fine. :class:`ImageOnlyQwen2_5_VLProcessor` is the stock processor
with the video slot removed (``ProcessorMixin`` reads its sub-processors from the ``__init__``
signature), so images and text behave exactly as in the stock processor. ml_path.md section 4.

Import transformers lazily: this module is imported by training code and by the transformers
policy, never at ``agent`` import time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.chat_template import load_chat_template

STOCK_PROCESSOR_CLASS = "Qwen2_5_VLProcessor"


def _define_image_only_processor_class() -> type:
    from transformers import Qwen2_5_VLProcessor
    from transformers.processing_utils import ProcessorMixin

    class ImageOnlyQwen2_5_VLProcessor(Qwen2_5_VLProcessor):
        """Qwen2.5-VL processor for text and images only: no video processor, no torchvision."""

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            self.image_token = getattr(tokenizer, "image_token", None) or "<|image_pad|>"
            self.video_token = getattr(tokenizer, "video_token", None) or "<|video_pad|>"
            self.image_token_id = tokenizer.convert_tokens_to_ids(self.image_token)
            self.video_token_id = tokenizer.convert_tokens_to_ids(self.video_token)
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

    # A module-level name lets pickle (datasets fingerprinting, multiprocessing) find the class.
    ImageOnlyQwen2_5_VLProcessor.__module__ = __name__
    ImageOnlyQwen2_5_VLProcessor.__qualname__ = "ImageOnlyQwen2_5_VLProcessor"
    return ImageOnlyQwen2_5_VLProcessor


def image_only_processor_class() -> type[Any]:
    """The no-video Qwen2.5-VL processor class, defined on first use to keep imports lazy."""
    cls = globals().get("ImageOnlyQwen2_5_VLProcessor")
    if cls is None:
        cls = _define_image_only_processor_class()
        globals()["ImageOnlyQwen2_5_VLProcessor"] = cls
    return cls


def __getattr__(name: str) -> type:
    if name == "ImageOnlyQwen2_5_VLProcessor":
        return image_only_processor_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def build_image_only_processor(
    image_processor: Any, tokenizer: Any, chat_template: str | None
) -> Any:
    """An image-only processor from already built parts (used to write tiny test checkpoints)."""
    return image_only_processor_class()(image_processor, tokenizer, chat_template=chat_template)


def _is_missing_video_processor(error: Exception) -> bool:
    text = f"{type(error).__name__}: {error}".lower()
    return "video" in text or "torchvision" in text


def load_processor(model_path: str | Path, *, max_pixels: int | None = None) -> Any:
    """The processor of a local Qwen2.5-VL checkpoint, carrying the project chat template.

    Tries the stock ``AutoProcessor`` first; when it fails for lack of a video processor
    (no torchvision), falls back to :class:`ImageOnlyQwen2_5_VLProcessor`. ``max_pixels``
    overrides the checkpoint's image budget (it changes the image token count, so keep it equal
    between training and serving). The chat template is always the project's one.
    """
    from transformers import AutoProcessor

    path = Path(model_path)
    if not path.is_dir():
        raise FileNotFoundError(
            f"model path {str(path)!r} is not a directory of a local checkpoint"
        )
    try:
        processor = AutoProcessor.from_pretrained(str(path))
    except (OSError, ValueError, ImportError, TypeError) as error:
        if not _is_missing_video_processor(error):
            raise
        processor = image_only_processor_class().from_pretrained(str(path))
    if max_pixels is not None:
        set_max_pixels(processor.image_processor, max_pixels)
    processor.chat_template = load_chat_template()
    return processor


def set_max_pixels(image_processor: Any, max_pixels: int) -> None:
    """Cap the pixels per image after resizing (Qwen2-VL ``smart_resize``'s ``max_pixels``)."""
    from transformers.image_utils import SizeDict

    min_pixels = _size_entry(image_processor.size, "shortest_edge")
    if max_pixels < min_pixels:
        raise ValueError(
            f"max_pixels={max_pixels} is below the processor's min_pixels={min_pixels}"
        )
    image_processor.size = SizeDict(shortest_edge=min_pixels, longest_edge=max_pixels)


def _size_entry(size: Any, key: str) -> int:
    value = size.get(key) if isinstance(size, dict) else getattr(size, key, None)
    if value is None:
        raise ValueError(f"image processor size {size!r} has no {key!r} entry")
    return int(value)
