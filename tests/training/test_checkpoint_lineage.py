"""Lineage records what drew the images a checkpoint was trained on."""

from __future__ import annotations

from agent.render import RENDERER_NAME, RENDERER_VERSION
from agent.tool import IMAGE_SIZE
from training.checkpoint import Lineage, new_lineage


def test_it_records_the_renderer_in_a_new_lineage(tmp_path):
    lineage = new_lineage(
        stage="sft", base_model=tmp_path, dataset_version="v1", dataset={}, config={}
    )
    assert lineage.renderer == {
        "name": RENDERER_NAME,
        "version": RENDERER_VERSION,
        "image_size": list(IMAGE_SIZE),
    }
    assert Lineage.from_dict(lineage.to_dict()) == lineage


def test_it_still_reads_a_lineage_written_before_renderers_were_recorded(tmp_path):
    data = new_lineage(
        stage="sft", base_model=tmp_path, dataset_version="v1", dataset={}, config={}
    ).to_dict()
    del data["renderer"]
    assert Lineage.from_dict(data).renderer == {}
