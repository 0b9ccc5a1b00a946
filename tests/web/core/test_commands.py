from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from annotation.spectra.models import Spectrum

pytestmark = pytest.mark.django_db


def test_it_loads_the_real_lamost_files(shared_lamost_dir):
    paths = sorted(str(p) for p in shared_lamost_dir.glob("*.fits.gz"))
    call_command("load_spectra", *paths, "--dataset", "lamost")
    rows = Spectrum.objects.filter(dataset="lamost")
    assert rows.count() == 2
    assert set(rows.values_list("survey", flat=True)) == {"LAMOST"}


def test_it_fails_the_command_for_an_unreadable_file(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("this is not a table\n")
    with pytest.raises(CommandError, match="1 of 1"):
        call_command("load_spectra", str(bad))


def test_it_makes_and_loads_a_small_benchmark(tmp_path):
    call_command(
        "make_benchmark", "--out", str(tmp_path), "--scale", "0.2", "--tasks", "CV", "--load"
    )
    rows = Spectrum.objects.filter(dataset="specvi-mini")
    assert rows.exists()
    assert all(rows.values_list("synthetic", flat=True))
    assert set(rows.values_list("label", flat=True)) == {"YES", "NO"}
    assert set(rows.values_list("task__code", flat=True)) == {"CV"}


def _fake_real_samples(split: str, tasks):
    from agent.evaluation import EvalSample
    from tests.factories import make_spectrum_value

    label = "YES" if split == "validation" else "NO"
    return [EvalSample(f"{split}-{task}", task, label, make_spectrum_value()) for task in tasks]


def test_it_prints_real_data_figures_beside_the_synthetic_ones(tmp_path, monkeypatch):
    import io

    from agent import real_evaluation as real_bench

    monkeypatch.setattr(real_bench, "real_eval_samples", _fake_real_samples)
    out = io.StringIO()
    report = tmp_path / "run.json"
    call_command("evaluate", "--tasks", "MG", "--scale", "0.05", "--out", str(report), stdout=out)
    text = out.getvalue()
    assert "specvi-mini (SYNTHETIC) / test" in text
    rows = [line.split()[:3] for line in text.splitlines() if line.startswith("MG ")]
    assert rows[-3:] == [
        ["MG", "synthetic", "3"],
        ["MG", "development", "1"],
        ["MG", "validation", "1"],
    ]
    assert (tmp_path / "run-real-development.json").is_file()
    assert (tmp_path / "run-real-validation.json").is_file()


def test_it_says_why_real_data_figures_are_missing(tmp_path, monkeypatch):
    import io

    from agent import real_evaluation as real_bench
    from agent.real_corpus import CorpusUnavailable

    def unavailable(split: str, tasks):
        raise CorpusUnavailable("exosims==3.6.6 is not in the cache; run `make real-data`")

    monkeypatch.setattr(real_bench, "real_eval_samples", unavailable)
    out = io.StringIO()
    call_command(
        "evaluate",
        "--tasks",
        "MG",
        "--scale",
        "0.05",
        "--out",
        str(tmp_path / "r.json"),
        stdout=out,
    )
    assert "Real data: not evaluated (exosims==3.6.6 is not in the cache" in out.getvalue()


def test_it_skips_real_data_figures_on_request(tmp_path, monkeypatch):
    import io

    from agent import real_evaluation as real_bench

    def refuse(split: str, tasks):
        raise AssertionError("the real corpus must not be read with --no-real")

    monkeypatch.setattr(real_bench, "real_eval_samples", refuse)
    out = io.StringIO()
    call_command(
        "evaluate",
        "--tasks",
        "MG",
        "--scale",
        "0.05",
        "--no-real",
        "--out",
        str(tmp_path / "r.json"),
        stdout=out,
    )
    assert "real spectra" not in out.getvalue()


def test_it_pairs_only_different_trajectories_of_the_same_spectrum_in_the_demo():
    from types import SimpleNamespace

    from annotation.management.commands.demo_setup import comparable_pairs

    def rollout(spectrum_id: int, *texts: str):
        steps = [{"assistant_text": text, "think": text} for text in texts]
        return SimpleNamespace(
            candidate=SimpleNamespace(spectrum_id=spectrum_id),
            data={"steps": steps, "answer": {"prediction": "YES"}},
        )

    long_1, short_1 = rollout(1, "a", "b", "c"), rollout(1, "a", "b")
    long_2, short_2 = rollout(2, "a", "b"), rollout(2, "a", "b")  # the same two calls
    pairs = comparable_pairs([long_1, long_2], [short_1, short_2])
    assert pairs == [(long_1, short_1)]


@pytest.mark.parametrize(("flags", "source"), [([], "dataset"), (["--rerender"], "specvet")])
def test_it_evaluates_specvi_bench_rows_on_their_own_prompt_unless_rerendering(
    tmp_path, flags, source
):
    import io
    import json

    from tests.agent.test_evaluation_openings import write_bench

    (tmp_path / "bench").mkdir()
    bench = write_bench(tmp_path / "bench")
    report = tmp_path / "run.json"
    out = io.StringIO()
    call_command(
        "evaluate",
        "--benchmark",
        "specvi-bench",
        "--data-dir",
        str(bench),
        "--tasks",
        "CV",
        "--no-real",
        "--out",
        str(report),
        *flags,
        stdout=out,
    )
    inputs = json.loads(report.read_text())["inputs"]
    assert inputs["prompt_source"] == {source: 1}
    assert inputs["initial_image_source"] == {source: 1}
    assert f"prompt: {source} 1 · I0: {source} 1" in out.getvalue()
