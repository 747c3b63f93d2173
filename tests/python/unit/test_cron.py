"""Cron tasks without a database: what a task declaration refuses, and the occurrences it
computes across daylight-saving switches."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import durajobs
from durajobs._values.durations import DeclarationInvalid

# -- declarations ---------------------------------------------------------------------------------


def test_a_city_alone_is_refused_and_the_zone_suggested():
    """R29: 'Bogota' would have run in UTC, five hours off, forever."""
    registry = durajobs.Registry()
    with pytest.raises(DeclarationInvalid, match="America/Bogota") as refused:
        registry.task(name="t", cron="0 9 * * *", tz="Bogota")
    assert "America/Bogota" in refused.value.detail["suggestions"]
    registry.task(name="t", cron="0 9 * * *", tz="America/Bogota")(lambda occurrence: [])


@pytest.mark.parametrize("bad", [0, -1, 1.5, float("nan"), float("inf"), True])
def test_an_impossible_max_catch_up_is_refused(bad):
    """R28: 0, negative or fractional meant the task never fired, with no error."""
    with pytest.raises(DeclarationInvalid):
        durajobs.Registry().task(
            name="t", cron="* * * * *", tz="UTC", catch_up="run-all", max_catch_up=bad
        )


def test_the_declaration_refuses_what_cannot_work():
    registry = durajobs.Registry()
    with pytest.raises(DeclarationInvalid):
        registry.task(name="t", cron="61 * * * *", tz="UTC")
    with pytest.raises(DeclarationInvalid):
        registry.task(name="t", cron="* * * * *", tz="UTC", catch_up="sometimes")  # type: ignore[arg-type]
    declare = registry.task(name="t", cron="* * * * *", tz="UTC")

    async def does_io(occurrence):
        return []

    with pytest.raises(DeclarationInvalid):
        declare(does_io)
    declare(lambda occurrence: [])
    with pytest.raises(durajobs.errors.JobDuplicate):
        registry.task(name="t", cron="* * * * *", tz="UTC")(lambda occurrence: [])
    assert registry.tasks()[0].max_catch_up == 10


def test_a_zone_abbreviation_is_not_answered_with_a_fixed_offset_zone():
    with pytest.raises(DeclarationInvalid) as refused:
        durajobs.Registry().task(name="t", cron="0 9 * * *", tz="CEST")
    assert all("/" in zone for zone in refused.value.detail["suggestions"])


# -- daylight saving ------------------------------------------------------------------------------


def test_a_local_time_skipped_in_spring_fires_once_after_the_gap():
    registry = durajobs.Registry()
    task = registry.task(name="t", cron="30 2 * * *", tz="America/New_York")(lambda o: [])
    before = datetime(2026, 3, 7, 12, 0, tzinfo=UTC)
    fires = [task.next_run(before)]
    fires.append(task.next_run(fires[0]))
    local = [f.astimezone(task.tz).strftime("%m-%d %H:%M %z") for f in fires]
    assert local == ["03-08 03:00 -0400", "03-09 02:30 -0400"]


def test_a_local_time_repeated_in_autumn_fires_once():
    registry = durajobs.Registry()
    daily = registry.task(name="d", cron="30 1 * * *", tz="America/New_York")(lambda o: [])
    before = datetime(2026, 10, 31, 16, 0, tzinfo=UTC)
    first = daily.next_run(before)
    second = daily.next_run(first)
    assert first.astimezone(daily.tz).strftime("%m-%d %H:%M %z") == "11-01 01:30 -0400"
    assert second.astimezone(daily.tz).strftime("%m-%d %H:%M %z") == "11-02 01:30 -0500"
    half_hourly = registry.task(name="h", cron="*/30 * * * *", tz="America/New_York")(lambda o: [])
    moment = datetime(2026, 11, 1, 4, 50, tzinfo=UTC)  # 00:50 EDT
    local = []
    for _ in range(5):
        moment = half_hourly.next_run(moment)
        local.append(moment.astimezone(half_hourly.tz).strftime("%H:%M %z"))
    assert local == ["01:00 -0400", "01:30 -0400", "02:00 -0500", "02:30 -0500", "03:00 -0500"]


def test_latest_at_or_before_skips_the_repeated_autumn_time():
    registry = durajobs.Registry()
    daily = registry.task(name="d", cron="30 1 * * *", tz="America/New_York")(lambda o: [])
    after_both = datetime(2026, 11, 1, 7, 0, tzinfo=UTC)  # 02:00 EST, after the second 01:30
    assert daily.latest_at_or_before(after_both) == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
