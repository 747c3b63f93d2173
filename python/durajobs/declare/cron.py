"""Cron tasks: what to enqueue at each occurrence of a cron expression in an IANA time zone.

Occurrences come from croniter in the task's zone. On daylight-saving switch days the rule is:
a local time that does not exist (spring forward) fires once, at the first instant after the gap
(croniter's choice: 02:30 becomes 03:00); a local time that happens twice (fall back) fires once,
the first time. Each local wall-clock time fires at most once per day.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from croniter import croniter

from durajobs._values.durations import positive_count
from durajobs._values.records import EnqueueResult
from durajobs.declare.enqueue import EnqueueRequest
from durajobs.errors import DeclarationInvalid


class EntryJob(Protocol):
    """What a task's entry names: a declared job (`durajobs.Job`), seen from the cron side."""

    @property
    def name(self) -> str: ...

    def request(self, input: Any) -> EnqueueRequest: ...

    def enqueue(self, input: Any, *, using: Any = None) -> EnqueueResult: ...


CatchUp = Literal["skip", "run-once", "run-all"]
DEFAULT_MAX_CATCH_UP = 10
# the instant a task's describe() asks its entries at: fixed, so a manifest never changes by itself
DESCRIBED_AT = datetime(2000, 1, 1, tzinfo=UTC)
Entries = Callable[[datetime], Sequence[tuple[EntryJob, Mapping[str, Any]]]]


def zone(name: object) -> ZoneInfo:
    """The IANA zone `name`, or X_JOB_DECLARATION_INVALID suggesting the nearest real names."""
    if not isinstance(name, str) or not name:
        raise DeclarationInvalid(
            "a task needs tz, an IANA time zone such as 'Europe/Paris'", detail={"field": "tz"}
        )
    known = available_timezones()
    if name in known:
        try:
            return ZoneInfo(name)
        except ZoneInfoNotFoundError:  # pragma: no cover - listed but missing
            pass
    by_city = sorted(z for z in known if z.rsplit("/", 1)[-1].lower() == name.lower())
    # Area/City names only: a close spelling of 'CEST' is not the fixed-offset 'EST'
    regional = sorted(z for z in known if "/" in z and not z.startswith("Etc/"))
    close = by_city or difflib.get_close_matches(name, regional, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(z) for z in close)}?" if close else "see the IANA list"
    raise DeclarationInvalid(
        f"tz {name!r} is not an IANA time zone; {hint}",
        detail={"field": "tz", "suggestions": close},
        hint=f"tz={close[0]!r}" if close else "tz='Area/City', e.g. 'America/Bogota'",
    )


def _second_instance(moment: datetime, tz: ZoneInfo) -> bool:
    """True for the second time a repeated local wall-clock time happens (fall back)."""
    local = moment.astimezone(tz).replace(tzinfo=None)
    first = local.replace(tzinfo=tz, fold=0)
    second = local.replace(tzinfo=tz, fold=1)
    return first.utcoffset() != second.utcoffset() and moment == second.astimezone(UTC)


@dataclass(eq=False)
class Task:
    """A declared cron task."""

    name: str
    cron: str
    tz: ZoneInfo
    entries: Entries
    catch_up: CatchUp
    max_catch_up: int

    def next_run(self, after: datetime) -> datetime:
        """The first occurrence strictly after `after` (aware), in UTC."""
        iterator = croniter(self.cron, after.astimezone(self.tz))
        while True:
            found: datetime = iterator.get_next(datetime)
            moment = found.astimezone(UTC)
            if not _second_instance(moment, self.tz):
                return moment

    def latest_at_or_before(self, now: datetime) -> datetime:
        """The last occurrence at or before `now`, found directly (no walk over a long gap)."""
        iterator = croniter(self.cron, (now + timedelta(microseconds=1)).astimezone(self.tz))
        while True:
            found: datetime = iterator.get_prev(datetime)
            moment = found.astimezone(UTC)
            if not _second_instance(moment, self.tz):
                return moment

    def due(self, watermark: datetime, now: datetime) -> list[tuple[datetime, datetime]]:
        """The fires owed at `now` after `watermark`: (occurrence, new watermark) pairs.

        skip: the true latest missed occurrence only; run-once: the earliest missed, once, the
        watermark passing every missed one; run-all: each missed one, at most max_catch_up.
        """
        first = self.next_run(watermark)
        if first > now:
            return []
        if self.catch_up == "skip":
            latest = self.latest_at_or_before(now)
            return [(latest, latest)]
        if self.catch_up == "run-once":
            return [(first, self.latest_at_or_before(now))]
        fires: list[tuple[datetime, datetime]] = []
        moment = first
        while moment <= now and len(fires) < self.max_catch_up:
            fires.append((moment, moment))
            moment = self.next_run(moment)
        return fires

    def requests(self, occurrence: datetime) -> list[dict[str, Any]]:
        """The enqueue requests of one occurrence, from the task's entries (no I/O)."""
        entries = self.entries(occurrence)
        if inspect.isawaitable(entries):
            if inspect.iscoroutine(entries):
                entries.close()  # never awaited: close it rather than leak a warning
            raise DeclarationInvalid(
                f"task {self.name}: enqueue must answer [(job, input), ...] synchronously; do "
                "I/O in a job it enqueues (the fan-out pattern)",
                detail={"task": self.name},
            )
        return [job.request(input).fire_entry() for job, input in entries]

    def enqueue(self, *, using: object = None) -> list[EnqueueResult]:
        """Fire every entry now, by hand: each job under its own idempotency key."""
        now = datetime.now(UTC)
        return [job.enqueue(input, using=using) for job, input in self.entries(now)]

    def describe(self) -> dict[str, Any]:
        """A plain description: its schedule and the jobs its entries enqueue, in the entries'
        order. The entries are asked for the first occurrence after a fixed instant (no I/O, and
        the same answer on every run, so a manifest of it is byte-identical); entries that
        cannot be asked synchronously describe no jobs."""
        try:
            entries = self.entries(self.next_run(DESCRIBED_AT))
        except Exception:
            entries = []
        if inspect.isawaitable(entries):
            if inspect.iscoroutine(entries):
                entries.close()
            entries = []
        return {
            "kind": "task",
            "name": self.name,
            "cron": self.cron,
            "tz": self.tz.key,
            "catch_up": self.catch_up,
            "max_catch_up": self.max_catch_up,
            "jobs": list(dict.fromkeys(job.name for job, _input in entries)),
        }


def declare_task(
    add: Callable[[Task], None],
    *,
    name: str,
    cron: str,
    tz: str,
    catch_up: CatchUp = "skip",
    max_catch_up: int = DEFAULT_MAX_CATCH_UP,
) -> Callable[[Entries], Task]:
    """Check a task's declaration; answer the decorator that hands the task to `add`."""
    if not isinstance(name, str) or not name.strip():
        raise DeclarationInvalid("a task needs a non-empty name", detail={"field": "name"})
    zone_info = zone(tz)
    if not isinstance(cron, str) or not croniter.is_valid(cron):
        raise DeclarationInvalid(
            f"task {name}: {cron!r} is not a cron expression", detail={"field": "cron"}
        )
    if catch_up not in ("skip", "run-once", "run-all"):
        raise DeclarationInvalid(
            f"task {name}: catch_up must be 'skip', 'run-once' or 'run-all', got {catch_up!r}",
            detail={"field": "catch_up"},
        )
    bound = positive_count(max_catch_up, field="max_catch_up")

    def register(entries: Entries) -> Task:
        if inspect.iscoroutinefunction(entries):
            raise DeclarationInvalid(
                f"task {name}: enqueue must be a plain function answering [(job, input), ...]",
                detail={"field": "enqueue"},
            )
        task = Task(
            name=name,
            cron=cron,
            tz=zone_info,
            entries=entries,
            catch_up=catch_up,
            max_catch_up=bound,
        )
        add(task)
        return task

    return register
