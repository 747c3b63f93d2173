"""Values refused before any SQL runs: a stored state this release does not know, a progress
report the SQL would refuse, a retention that cannot work."""

from __future__ import annotations

import pytest

from durajobs import errors
from durajobs._values.durations import DeclarationInvalid
from durajobs._values.states import JobState, narrow
from durajobs.errors import ArgumentInvalid, ConfigInvalid
from durajobs.runtime.progress import checked
from durajobs.services.retention import Retention


def test_an_unknown_job_state_is_refused_when_read():
    with pytest.raises(errors.JobRowStatusUnknown):
        narrow(JobState, "archived", table="jobs.jobs", column="state")


def test_a_report_the_sql_would_refuse_is_refused_in_the_body():
    for done, total, note in [(-1, None, None), (1, -2, None), (float("nan"), None, None)]:
        with pytest.raises(ArgumentInvalid) as raised:
            checked(done, total, note)
        assert raised.value.code == "X_ARGUMENT_INVALID"
    with pytest.raises(ArgumentInvalid):
        checked(1, 2, "x" * 1001)
    assert checked(3, 10, "ok").done == 3


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"done_after": "0d"}, DeclarationInvalid),
        ({"ended_after": "-1h"}, DeclarationInvalid),
        ({"published_after": "soon"}, DeclarationInvalid),
        ({"batch_size": 0}, ConfigInvalid),
        ({"batch_size": 10001}, ConfigInvalid),
        ({"batch_size": True}, ConfigInvalid),
        ({"max_batches": 0}, ConfigInvalid),
        ({"every": 0}, DeclarationInvalid),
    ],
)
def test_a_retention_that_cannot_work_is_refused(options, error):
    with pytest.raises(error) as refused:
        Retention.of(**options)
    assert refused.value.code in {"X_JOB_DECLARATION_INVALID", "X_CONFIG_INVALID"}
    assert next(iter(options)) in str(refused.value)
