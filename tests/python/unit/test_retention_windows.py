"""The retention windows a worker or `durajobs jobs purge` sweeps with by default (R92): a
published outbox row goes before the job it made, so no outbox row outlives its job, and a
re-publish always meets the job and dedupes onto it instead of running it again."""

from __future__ import annotations

from durajobs.services import retention


def test_the_default_outbox_window_is_shorter_than_the_done_window():
    assert retention.PUBLISHED_AFTER < retention.DONE_AFTER
    assert retention.Retention().published_after < retention.Retention().done_after
