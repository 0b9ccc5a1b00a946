"""A draft job stores for each spectrum the trajectory its own spectrum gives (issue 28): the
rule-based teacher's drafts, in any order of spectra, equal the in-process inspection of each."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from agent.policies.rule_based import RuleBasedInspector
from agent.rollout import inspect
from annotation.core import jobs as core_jobs
from annotation.core import services as core_services
from annotation.core.models import Job
from annotation.curation.models import Curation
from annotation.spectra.selectors import spectrum_value, task_value
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db

AMPLITUDES = [3.0, 0.0, 0.7, 1.5, 0.2, 2.2]


def signature(data: dict) -> dict:
    """What a stored or fresh trajectory says, without its id and timings."""
    return {
        "spectrum": data["spectrum"]["object_id"],
        "turns": [step["assistant_text"] for step in data["steps"]],
        "images": [
            None
            if not step["tool_result"] or not step["tool_result"]["image"]
            else step["tool_result"]["image"].get("png_sha256")
            or step["tool_result"]["image"].get("sha256")
            for step in data["steps"]
        ],
        "answer": data["answer"],
        "decision": data["meta"].get("decision"),
    }


@hypothesis_settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(order=st.permutations(range(len(AMPLITUDES))))
def test_it_drafts_each_spectrum_from_its_own_arrays(cv, owner, order) -> None:
    from annotation.curation.services import PngsByHash

    rows = [
        make_spectrum(
            object_id=f"DRAFT-{i}",
            task=cv,
            label="YES" if a > 1 else "NO",
            seed=i,
            line_amplitude=a,
        )
        for i, a in enumerate(AMPLITUDES)
    ]
    ids = [rows[i].pk for i in order]
    job = core_services.job_create(
        kind="draft",
        params={"spectrum_ids": ids, "task": "CV", "teacher": {"kind": "rule-based"}},
        created_by=owner,
    )
    Job.objects.filter(pk=job.pk).update(state="running")
    core_jobs.run(job.pk)
    for row in rows:
        curation = Curation.objects.get(draft_job=job, spectrum=row)
        stored = curation.versions.order_by("number").first().data
        fresh = inspect(spectrum_value(row), task_value(cv), RuleBasedInspector())
        assert signature(stored) == signature(fresh.to_dict(png=PngsByHash()))
