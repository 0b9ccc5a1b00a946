"""The corpus of malformed input (tests/agent/corpus/): model outputs the parser must name the
problem of, and files load_spectra must refuse with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.parsing import parse_turn
from agent.spectra import SpectrumFormatError, load_spectra
from tests.agent.corpus.spectrum_files import CASES, Builder

MODEL_OUTPUTS = json.loads(
    (Path(__file__).parent / "corpus" / "model_outputs.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize("case", MODEL_OUTPUTS, ids=[case["id"] for case in MODEL_OUTPUTS])
def test_it_names_the_problem_of_each_malformed_model_output(case: dict[str, str]) -> None:
    parsed = parse_turn(case["text"])
    assert parsed.kind == case["kind"]
    assert any(case["error"] in error for error in parsed.errors), parsed.errors


@pytest.mark.parametrize(
    ("name", "build", "message"), [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_it_refuses_each_malformed_file_with_its_reason(
    tmp_path: Path, name: str, build: Builder, message: tuple[str, ...]
) -> None:
    path = tmp_path / name
    path.write_bytes(build(tmp_path))
    with pytest.raises(SpectrumFormatError) as raised:
        load_spectra(path)
    text = str(raised.value)
    assert text.startswith(str(path))  # the message names the file first
    for part in message:
        assert part in text, text
