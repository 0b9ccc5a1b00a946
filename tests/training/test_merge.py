"""LoRA merge: the merged tiny checkpoint loads with transformers, computes what base + adapter
computed, and renders the very prompt training rendered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from agent.chat_template import load_chat_template
from agent.policies.qwen_processor import load_processor
from agent.trajectory import to_messages
from tests.training.conftest import ANSWER_YES, scripted_trajectory, tool_call_turn
from training.checkpoint import load_lineage
from training.config import ModelArguments
from training.grpo import tool_calling_processor
from training.merge import main


@pytest.fixture(scope="module")
def adapter(tiny_model_path, tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2_5_VLForConditionalGeneration

    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_model_path))
    config = LoraConfig(
        r=4,
        target_modules=["q_proj", "v_proj"],
        exclude_modules=r".*visual.*",
        init_lora_weights=False,
    )
    peft_model = get_peft_model(model, config)
    path = tmp_path_factory.mktemp("adapter")
    peft_model.save_pretrained(str(path))
    return path, peft_model.eval()


@pytest.fixture(scope="module")
def merged(adapter, tiny_model_path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("merged")
    return main(
        ["--adapter", str(adapter[0]), "--base", str(tiny_model_path), "--output", str(out)]
    )


@pytest.mark.slow
def test_it_computes_what_base_plus_adapter_computed(adapter, merged):
    from transformers import Qwen2_5_VLForConditionalGeneration

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(merged)).eval()
    ids = torch.tensor([[5, 17, 42, 99, 7]])
    with torch.no_grad():
        expected = adapter[1](input_ids=ids).logits
        got = model(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-5)
    assert not any("lora" in name for name, _ in model.named_parameters())


@pytest.mark.slow
def test_it_renders_the_prompt_training_rendered(merged, tiny_model_path, cv_spectrum):
    trajectory = scripted_trajectory(cv_spectrum, [tool_call_turn(), ANSWER_YES])
    messages = [
        {
            "role": message["role"],
            "content": [
                {"type": "image", "image": _pil(part["png"])} if part["type"] == "image" else part
                for part in message["content"]
            ],
        }
        for message in to_messages(trajectory)
    ]
    training = tool_calling_processor(ModelArguments(model_name_or_path=str(tiny_model_path)))
    served = load_processor(merged)

    def render(processor):
        return processor.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=True
        )["input_ids"]

    assert render(served) == render(training)
    assert served.chat_template == load_chat_template()


@pytest.mark.slow
def test_it_writes_the_stock_processor_and_a_lineage(merged, tiny_model_path):
    config = json.loads((merged / "processor_config.json").read_text())
    assert config["processor_class"] == "Qwen2_5_VLProcessor"
    assert (merged / "chat_template.jinja").read_text() == load_chat_template()
    assert load_lineage(merged).base_model == str(tiny_model_path)


def test_it_refuses_a_folder_without_an_adapter(tmp_path):
    with pytest.raises(ValueError, match="adapter_config.json"):
        main(["--adapter", str(tmp_path), "--output", str(tmp_path / "out")])


def _pil(png: bytes):
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as image:
        return image.convert("RGB")


class FakeTrainer:
    """What save_trained needs of a Trainer on rank ``rank`` of ``world_size`` (sharded)."""

    def __init__(self, rank: int, world_size: int, *, fsdp: bool = True) -> None:
        self.args = type("Args", (), {"world_size": world_size, "should_save": rank == 0})()
        self.is_fsdp_enabled = fsdp
        self.is_deepspeed_enabled = False
        self.model = torch.nn.Linear(1, 1)
        self.calls: list[str] = []
        self.accelerator = type(
            "Acc", (), {"wait_for_everyone": lambda _: self.calls.append("wait")}
        )()

    def save_model(self, path: str) -> None:
        self.calls.append("save_model")


@pytest.mark.parametrize(("rank", "writes_files"), [(0, True), (1, False)])
def test_it_gathers_sharded_weights_on_every_rank_and_writes_serving_files_once(
    tmp_path, tiny_model_path, rank, writes_files
):
    from training.checkpoint import new_lineage, save_trained

    trainer = FakeTrainer(rank, world_size=8)
    lineage = new_lineage(
        stage="sft", base_model=str(tiny_model_path), dataset_version="v", dataset={}, config={}
    )
    save_trained(trainer, load_processor(tiny_model_path), tmp_path / "out", lineage)
    assert trainer.calls == ["save_model", "wait"]
    assert (tmp_path / "out" / "specvet_lineage.json").is_file() is writes_files


def test_it_gathers_fsdp_shards_on_a_single_process_too(tmp_path, tiny_model_path):
    """One process under FSDP2 still holds DTensor shards: save_pretrained on them failed with
    "Attempted to access the data pointer on an invalid python storage" on an H200."""
    from training.checkpoint import new_lineage, save_trained

    trainer = FakeTrainer(0, world_size=1)
    lineage = new_lineage(
        stage="sft", base_model=str(tiny_model_path), dataset_version="v", dataset={}, config={}
    )
    save_trained(trainer, load_processor(tiny_model_path), tmp_path / "out", lineage)
    assert trainer.calls == ["save_model", "wait"]
    assert (tmp_path / "out" / "specvet_lineage.json").is_file()


def test_it_writes_an_unsharded_model_itself(tmp_path, tiny_model_path):
    from transformers import Qwen2_5_VLForConditionalGeneration

    from training.checkpoint import new_lineage, save_trained

    trainer = FakeTrainer(0, world_size=2, fsdp=False)
    trainer.model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_model_path))
    lineage = new_lineage(
        stage="sft", base_model=str(tiny_model_path), dataset_version="v", dataset={}, config={}
    )
    save_trained(trainer, load_processor(tiny_model_path), tmp_path / "out", lineage)
    assert trainer.calls == ["wait"]
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_it_carries_the_adapter_and_base_training_spectra_into_the_merged_checkpoint(
    adapter, tiny_model_path, tmp_path
):
    """An evaluation of the merged model must refuse what the adapter and its base trained on;
    without the copy the merged folder records nothing and every overlap passes."""
    import shutil

    from agent.splits import SplitMembers, load_training_spectra, save_training_spectra

    folder, base = tmp_path / "adapter", tmp_path / "base"
    shutil.copytree(adapter[0], folder)
    shutil.copytree(tiny_model_path, base)
    save_training_spectra(folder, SplitMembers("GRPO data", frozenset({"A-1"}), frozenset({"h1"})))
    save_training_spectra(base, SplitMembers("SFT data", frozenset({"B-2"}), frozenset({"h2"})))
    out = main(["--adapter", str(folder), "--base", str(base), "--output", str(tmp_path / "m")])
    trained = load_training_spectra(out)
    assert trained is not None
    assert (trained.object_ids, trained.content_hashes) == ({"A-1", "B-2"}, {"h1", "h2"})


def test_it_records_the_base_training_spectra_when_the_adapter_folder_has_none(
    adapter, tiny_model_path, tmp_path
):
    import shutil

    from agent.splits import SplitMembers, load_training_spectra, save_training_spectra

    base = tmp_path / "base"
    shutil.copytree(tiny_model_path, base)
    save_training_spectra(base, SplitMembers("SFT data", frozenset({"B-2"}), frozenset({"h2"})))
    out = main(["--adapter", str(adapter[0]), "--base", str(base), "--output", str(tmp_path / "m")])
    trained = load_training_spectra(out)
    assert trained is not None and trained.object_ids == {"B-2"}
