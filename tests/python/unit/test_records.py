"""Answer rows: column lists from fields, and the fence a claim builds for its writes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import ClassVar
from uuid import UUID, uuid4

import pytest

from durajobs import ClaimedJob, Fence, StepStatus
from durajobs._db import calls
from durajobs._values.records import Answer


def _claimed_row(id: UUID, claim: int) -> tuple[object, ...]:
    now = datetime.now(UTC)
    return (
        id, uuid4(), "n", "default", "{}", None, "running", 1, 3, claim, None, None, None, False,
        0, now, now, now,
    )  # fmt: skip


def test_the_claimant_is_not_a_column():
    assert "worker_id" not in ClaimedJob.COLUMNS.split(", ")
    assert ClaimedJob.COLUMNS.endswith("has_steps, priority, run_at, created_at, lease_expires_at")


def test_a_worker_s_claim_leaves_out_the_display_columns_and_keeps_its_fence():
    claim = calls.WorkerClaim(
        ["default"], "w-7", visibility=timedelta(seconds=30), drop_exhausted=[]
    )
    call = claim(500, recover_lapsed=False)
    assert call.params == {"batch_size": 500, "recover_lapsed": False}
    selected = call.sql.split(" from ")[0]
    assert "has_steps" in selected
    assert not [column for column in ClaimedJob.DISPLAY if column in selected]
    first = uuid4()
    (row,) = call.decode([_claimed_row(first, 3)[:14]])
    assert row.fence == Fence(first, "w-7", 3)
    assert (row.run_at, row.priority, row.input) == (None, None, {})


def test_a_worker_s_claim_reads_a_run_id_only_where_it_is_not_the_job_s_own_id():
    """The run's first job is the run: the claim sends its run_id as NULL, read as the id."""
    claim = calls.WorkerClaim(["default"], "w", visibility=timedelta(seconds=30), drop_exhausted=[])
    call = claim(10, recover_lapsed=False)
    assert "nullif(run_id, id)" in call.sql.split(" from ")[0]
    own, requeued, run = uuid4(), uuid4(), uuid4()
    first = (own, None, *_claimed_row(own, 1)[2:14])
    later = (requeued, run, *_claimed_row(requeued, 2)[2:14])
    decoded = call.decode([first, later])
    assert [(row.id, row.run_id) for row in decoded] == [(own, own), (requeued, run)]


def test_a_worker_s_claim_is_built_once_for_each_size_and_scan():
    claim = calls.WorkerClaim(["default"], "w", visibility=timedelta(seconds=30), drop_exhausted=[])
    pickup = claim(500, recover_lapsed=False)
    assert claim(500, recover_lapsed=False) is pickup
    others = [claim(500, recover_lapsed=True), claim(7, recover_lapsed=False)]
    assert [call.params for call in others] == [
        {"batch_size": 500, "recover_lapsed": True},
        {"batch_size": 7, "recover_lapsed": False},
    ]
    assert pickup.params == {"batch_size": 500, "recover_lapsed": False}


def test_a_claim_builds_each_row_s_fence_from_its_own_worker_id():
    first, second = uuid4(), uuid4()
    decoded = calls.claim(["default"], "w-42").decode(
        [_claimed_row(first, 7), _claimed_row(second, 8)]
    )
    assert [row.fence for row in decoded] == [Fence(first, "w-42", 7), Fence(second, "w-42", 8)]


def test_every_fenced_builder_sends_the_three_arguments():
    fence = Fence(uuid4(), "w", 3)
    expected = {"id": fence.id, "worker_id": "w", "claim": 3}
    for call in (
        calls.ack(fence),
        calls.nack(fence),
        calls.heartbeat(fence),
        calls.record_step(fence, "s", StepStatus.COMPLETED),
        calls.progress(fence, 1, 2),
    ):
        assert {key: call.params[key] for key in expected} == expected, call.function


def test_local_fields_must_come_last():
    with pytest.raises(TypeError, match="LOCAL"):

        @dataclass(frozen=True, slots=True)
        class Misplaced(Answer):
            local: str
            column: int

            LOCAL: ClassVar[tuple[str, ...]] = ("local",)


def test_an_array_argument_is_one_literal_of_every_kind_it_may_hold():
    first, second = uuid4(), uuid4()
    ids = calls._array([first, second])
    assert ids == "{" + f"{first.hex},{second.hex}" + "}"
    assert calls._array(iter([first])) == "{" + first.hex + "}"
    # a None is NULL (the function refuses it with its own error), wherever it stands
    assert calls._array([first, None]) == "{" + first.hex + ",NULL}"
    assert calls._array([None, first]) == "{NULL," + first.hex + "}"
    assert calls._array([7, None, 9]) == "{7,NULL,9}"
    assert calls._array([7, 8]) == "{7,8}"
    assert calls._array([]) == "{}"


def test_a_batch_renewal_answers_each_attempt_of_one_row_apart():
    """Two attempts of one row in one renewal (the first cancelled, the row claimed again):
    keyed by id alone, the later answer stood for both, and the stale body ran on."""
    import uuid

    from durajobs._db import calls
    from durajobs._values.records import Fence
    from durajobs._values.states import HeartbeatAnswer

    row = uuid.uuid4()
    call = calls.heartbeat_many("w", [Fence(row, "w", 1), Fence(row, "w", 2)])
    answers = call.decode([(row, "lost"), (row, "ok")])
    assert answers == {(row, 1): HeartbeatAnswer.LOST, (row, 2): HeartbeatAnswer.OK}
