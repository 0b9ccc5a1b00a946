"""An SFT run on the data as shipped records how its ShareGPT cold-start rows differ from what
specvet uses."""

from __future__ import annotations

from pathlib import Path

from agent.formats import write_sharegpt_file
from tests.agent.test_trajectory import make_trajectory
from training.config import DataArguments
from training.sft import collect_trajectories


def test_it_records_cold_start_differences_in_the_run_sources(tmp_path: Path) -> None:
    path = tmp_path / "train_sharegpt.json"
    write_sharegpt_file([make_trajectory()], path)
    trajectories, sources = collect_trajectories(
        DataArguments(sharegpt=[str(path)], input_distribution="dataset")
    )
    assert len(trajectories) == 1
    warnings = sources["cold_start_warnings"]
    assert [warning.split(" rows ")[0] for warning in warnings] == ["1 of 1", "1 of 1"]
    assert "system prompt that differs" in warnings[0]
    assert "show I0 at 8x6 pixels" in warnings[1]
