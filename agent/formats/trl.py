"""TRL conversational examples (ml_path.md section 1): ``{"messages", "images"}``."""

from __future__ import annotations

import io
from typing import Any

from agent.formats.common import DatasetFormatError, _build_trajectory, _png
from agent.trajectory import (
    IMAGE_PLACEHOLDER,
    TOOL_RESPONSE_CLOSE,
    TOOL_RESPONSE_OPEN,
    SpectrumRef,
    Trajectory,
    to_messages,
)

# --- TRL ---------------------------------------------------------------------------------------


def to_trl_example(trajectory: Trajectory, *, images_as: str = "png") -> dict[str, Any]:
    """A TRL conversational VLM example: ``{"messages": [...], "images": [...]}``.

    ``images_as="png"`` gives PNG bytes (lossless); ``"pil"`` gives PIL images for trainers that
    want them decoded.
    """
    if images_as not in ("png", "pil"):
        raise ValueError(f"images_as must be 'png' or 'pil'; got {images_as!r}")
    messages = []
    for message in to_messages(trajectory):
        content = [
            {"type": "image"} if part["type"] == "image" else {"type": "text", "text": part["text"]}
            for part in message["content"]
        ]
        messages.append({"role": message["role"], "content": content})
    images: list[Any] = trajectory.images()
    if images_as == "pil":
        from PIL import Image

        images = [Image.open(io.BytesIO(png)) for png in images]
        for image in images:
            image.load()
    return {"messages": messages, "images": images}


def from_trl_example(
    example: dict[str, Any],
    *,
    task: str,
    spectrum_ref: SpectrumRef,
    meta: dict[str, Any] | None = None,
) -> Trajectory:
    """A trajectory from a TRL example; ``tool`` role messages are read as tool responses."""
    where = "TRL example"
    messages = example.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DatasetFormatError(f"{where}: 'messages' must be a non-empty list")
    pending = list(example.get("images") or [])
    images: list[bytes] = []
    system = ""
    turns: list[tuple[str, str]] = []
    for position, message in enumerate(messages):
        message_where = f"{where} message {position}"
        if not isinstance(message, dict):
            raise DatasetFormatError(f"{message_where} must be a dict")
        role = message.get("role")
        text, has_images = _trl_content_text(
            message.get("content"), pending, images, message_where, role == "assistant"
        )
        if role == "system":
            if position != 0 or has_images:
                raise DatasetFormatError(f"{message_where}: system must come first, text only")
            system = text
        elif role in ("user", "assistant"):
            turns.append((role, text))
        elif role == "tool":
            turns.append(("user", _tool_message_text(text, message_where)))
        else:
            raise DatasetFormatError(f"{message_where}: unknown role {role!r}")
    if pending:
        raise DatasetFormatError(f"{where}: {len(pending)} images left over after the placeholders")
    return _build_trajectory(
        system=system,
        turns=turns,
        images=images,
        task=task,
        spectrum=spectrum_ref,
        meta=dict(meta or {}),
        where=where,
    )


def _tool_message_text(text: str, where: str) -> str:
    """A ``tool`` message as the user-turn text; the wrapper is added when it is missing."""
    if text.lstrip().startswith("<tool_response>"):
        return text
    count = text.count(IMAGE_PLACEHOLDER)
    if count > 1:
        raise DatasetFormatError(f"{where}: a tool message holds {count} images; at most 1")
    image = IMAGE_PLACEHOLDER if count else ""
    body = text.replace(IMAGE_PLACEHOLDER, "")
    return f"{TOOL_RESPONSE_OPEN}{image}{body}{TOOL_RESPONSE_CLOSE}"


def _trl_content_text(
    content: Any, pending: list[Any], images: list[bytes], where: str, model_output: bool
) -> tuple[str, bool]:
    """Message text with ``<image>`` for each image part; images are collected in order.

    Model output is text only, and an ``<image>`` the model wrote stays literal text.
    """
    if isinstance(content, str):
        return content, False
    if not isinstance(content, list):
        raise DatasetFormatError(f"{where}: content must be a string or a list of parts")
    pieces: list[str] = []
    has_images = False
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str) or (IMAGE_PLACEHOLDER in text and not model_output):
                raise DatasetFormatError(
                    f"{where}: a text part must be a str without a literal {IMAGE_PLACEHOLDER}"
                )
            pieces.append(text)
        elif kind == "image" and model_output:
            raise DatasetFormatError(f"{where}: an assistant turn cannot hold an image")
        elif kind == "image":
            inline = part.get("image", part.get("png"))
            if inline is None:
                if not pending:
                    raise DatasetFormatError(f"{where}: more image placeholders than images")
                inline = pending.pop(0)
            images.append(_png(inline, where))
            pieces.append(IMAGE_PLACEHOLDER)
            has_images = True
        else:
            raise DatasetFormatError(f"{where}: part type {kind!r}; expected 'text' or 'image'")
    return "".join(pieces), has_images
