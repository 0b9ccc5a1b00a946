"""Key-value cache reuse across the turns of an episode for a Qwen2.5-VL ``generate``.

Turn k+1's prompt is turn k's prompt, turn k's answer and a tool response: its first tokens are
already in the cache turn k left. Two things stop ``generate`` from simply continuing from it:
with a non-empty cache Qwen2.5-VL's ``prepare_inputs_for_generation`` drops ``pixel_values`` (the
new plot would never be seen), and its positions become ``text position + rope_deltas`` (wrong for
the new image's 3-D mrope positions). So the uncached part of the prompt, but its last token, is
prefilled here with the positions ``get_rope_index`` gives the whole prompt and with the pixels of
the images that start in it; ``generate`` then continues from the last prompt token with the whole
prompt's ``rope_deltas``, where positions are plain text positions again.

Reuse covers the longest common prefix of the cached and new token ids that ends before the
first image that differs (image pads are one id whatever the picture, so each picture is compared
by a digest of its pixels) and never splits an image.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any


@dataclass
class ImageSpan:
    start: int  # index of the image's first pad token
    length: int  # its pad tokens
    digest: str  # of its pixel values


@dataclass
class CachedPrefix:
    cache: Any  # transformers Cache holding the keys and values of ``ids``
    ids: list[int]
    images: list[ImageSpan]


def image_spans(inputs: Any, image_token_id: int, merge: int = 4) -> list[ImageSpan]:
    """Where each image's pad tokens are in ``inputs`` and a digest of its pixels."""
    ids = inputs["input_ids"][0].tolist()
    grids = inputs.get("image_grid_thw")
    if grids is None:
        return []
    patches = [int(n) for n in grids.prod(-1).tolist()]
    pixels = inputs["pixel_values"]
    spans, offset, search = [], 0, 0
    for count in patches:
        start = ids.index(image_token_id, search)
        length = count // merge
        block = pixels[offset : offset + count].float().contiguous().cpu().numpy().tobytes()
        spans.append(ImageSpan(start, length, hashlib.sha256(block).hexdigest()))
        offset += count
        search = start + length
    return spans


def reusable_length(cached: CachedPrefix, ids: list[int], images: list[ImageSpan]) -> int:
    """How many leading tokens of ``ids`` the cache holds already (at most ``len(ids) - 1``)."""
    limit = min(len(cached.ids), len(ids) - 1)
    length = 0
    while length < limit and cached.ids[length] == ids[length]:
        length += 1
    cached_digests = {(span.start, span.length): span.digest for span in cached.images}
    for span in images:
        if span.start >= length:
            break
        same = cached_digests.get((span.start, span.length)) == span.digest
        if not same or span.start + span.length > length:
            return span.start
    return length


def prefill_suffix(model: Any, inputs: Any, cached: CachedPrefix, reuse: int) -> Any:
    """Crop the cache to ``reuse`` tokens and prefill the prompt from there to its last token but
    one with the whole prompt's mrope positions and the pixels of the images starting there."""
    ids = inputs["input_ids"]
    end = ids.shape[1] - 1
    cache = cached.cache
    surplus = cache.get_seq_length() - reuse
    if surplus > 0:
        cache.crop(-surplus)  # a negative count drops that many trailing tokens
    positions, deltas = model.model.get_rope_index(
        ids,
        mm_token_type_ids=inputs["mm_token_type_ids"],
        image_grid_thw=inputs.get("image_grid_thw"),
        attention_mask=inputs["attention_mask"],
    )
    spans = image_spans(inputs, model.config.image_token_id)
    new = [index for index, span in enumerate(spans) if span.start >= reuse]
    extra: dict[str, Any] = {}
    if new:
        grids = inputs["image_grid_thw"]
        patches = [int(n) for n in grids.prod(-1).tolist()]
        offsets = [sum(patches[:index]) for index in range(len(patches) + 1)]
        extra["pixel_values"] = inputs["pixel_values"][offsets[new[0]] : offsets[-1]]
        extra["image_grid_thw"] = grids[new[0] :]
    if end > reuse:
        model(
            input_ids=ids[:, reuse:end],
            attention_mask=inputs["attention_mask"][:, :end],
            position_ids=positions[:, :, reuse:end],
            past_key_values=cache,
            mm_token_type_ids=inputs["mm_token_type_ids"][:, reuse:end],
            use_cache=True,
            **extra,
        )
    model.model.rope_deltas = deltas
    return cache
