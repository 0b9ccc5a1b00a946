from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent import bounded_json
from agent.bounded_json import JsonTooDeepError, nesting_depth
from agent.reading import SpectrumFormatError
from agent.spectra.npz import spectrum_from_npz_bytes


def reference_depth(value: object) -> int:
    if isinstance(value, list):
        return 1 + max((reference_depth(item) for item in value), default=0)
    if isinstance(value, dict):
        return 1 + max((reference_depth(item) for item in value.values()), default=0)
    return 0


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab\u2028'),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(alphabet='[]{}"\\k'), children, max_size=4)
    ),
    max_leaves=30,
)


@given(json_values)
def test_it_measures_the_same_depth_as_walking_the_parsed_value(value):
    text = json.dumps(value, ensure_ascii=False)
    assert nesting_depth(text) == reference_depth(value)
    assert nesting_depth(text.encode()) == reference_depth(value)


def test_it_ignores_brackets_and_escaped_quotes_inside_strings():
    assert nesting_depth(r'["a\"[[[", {"k]": "{{"}]') == 2
    assert nesting_depth('"[[[["') == 0


def test_it_refuses_text_past_the_limit_naming_depth_and_limit():
    bomb = "[" * 100_000 + "]" * 100_000
    with pytest.raises(
        JsonTooDeepError, match="body nests arrays and objects 100000 levels deep; the limit is 64"
    ):
        bounded_json.loads(bomb, what="body")


def test_it_parses_text_at_the_limit():
    text = "[" * 64 + "]" * 64
    assert reference_depth(bounded_json.loads(text)) == 64
    with pytest.raises(JsonTooDeepError):
        bounded_json.loads("[" + text + "]")


def test_it_keeps_json_errors_as_value_errors():
    with pytest.raises(json.JSONDecodeError):
        bounded_json.loads("{not json")


def test_it_refuses_an_npz_whose_meta_nests_too_deep():
    buffer = io.BytesIO()
    np.savez(
        buffer,
        wavelength=np.linspace(4000, 5000, 10),
        flux=np.ones(10),
        mask=np.zeros(10, dtype=bool),
        meta=np.array('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}"),
    )
    with pytest.raises(SpectrumFormatError, match="'meta' is not valid JSON.*levels deep"):
        spectrum_from_npz_bytes(buffer.getvalue())
