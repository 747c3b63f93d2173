"""Enqueue inside the caller's transaction (spec §3.I items 98-101, 107; R17), against a real
database: a SQLAlchemy Session or Connection (sync and async) or a psycopg connection, given as
`using=` or made ambient with `durajobs.in_transaction`; the wake on commit; mode='required';
the outbox (outbox=True) staging a job that a relay publishes later (a script with nothing
installed is processes/test_fresh_interpreters)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from uuid import UUID

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

import durajobs
from durajobs._values.durations import DeclarationInvalid
from durajobs.errors import ArgumentInvalid, ConfigInvalid, JobDuplicate, OutboxNoTransaction
from durajobs.services.relay import OutboxRelay
from support.factory import declare
from support.models import Actor, NotedItem
from support.outbox import job_rows, send_job, staged_rows
from support.rows import fetch_all


def _sa_url(conninfo: str, driver: str = "psycopg") -> URL:
    """Spell a libpq conninfo as a SQLAlchemy URL on the given driver."""
    parts = psycopg.conninfo.conninfo_to_dict(conninfo)
    host = str(parts.get("host") or "localhost")
    query: dict[str, str] = {}
    if host.startswith("/"):  # a Unix socket directory
        query["host"] = host
        host = ""
    return URL.create(
        f"postgresql+{driver}",
        username=str(parts["user"]) if parts.get("user") else None,
        password=str(parts["password"]) if parts.get("password") else None,
        host=host or None,
        port=int(parts["port"]) if parts.get("port") else None,
        database=str(parts["dbname"]),
        query=query,
    )


@pytest.fixture
def engine(database_url):
    made = create_engine(_sa_url(database_url))
    yield made
    made.dispose()


@pytest.fixture
def job(database_url):
    return send_job(durajobs.Registry(database_url))


@pytest.fixture
def orders(database_url):
    """A business table next to the queue, in the same database."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        connection.execute("create table orders (id serial primary key, customer text not null)")
    return "orders"


# --- a SQLAlchemy Session -------------------------------------------------------------------


def test_a_session_rolled_back_leaves_no_job(database_url, engine, job):
    with Session(engine) as session:
        answer = job.enqueue({"key": "a"}, using=session)
        assert answer.deduped is False
        session.rollback()
    assert job_rows(database_url) == []


def test_a_session_committed_writes_the_job_under_the_answered_ids(database_url, engine, job):
    with Session(engine) as session:
        answer = job.enqueue({"key": "a"}, using=session)
        # not visible to anyone else before the commit
        assert job_rows(database_url) == []
        session.commit()
    assert job_rows(database_url) == [(answer.id, answer.run_id)]
    assert fetch_all(database_url, "select name, input, state from jobs.jobs") == [
        ("send", {"key": "a", "note": ""}, "ready")
    ]


def test_in_transaction_makes_a_session_ambient(database_url, engine, job):
    with Session(engine) as session:
        with durajobs.in_transaction(session):
            assert durajobs.current_transaction() is session
            rolled_back = job.enqueue({"key": "a"})
        assert durajobs.current_transaction() is None
        session.rollback()
        with durajobs.in_transaction(session):
            committed = job.enqueue({"key": "b"})
            session.commit()
    assert job_rows(database_url) == [(committed.id, committed.run_id)]
    assert rolled_back.id != committed.id


def test_in_transaction_ends_with_its_block(database_url, engine, job):
    with Session(engine) as session, durajobs.in_transaction(session):
        job.enqueue({"key": "inside"})
        session.rollback()
    # outside the block the registry (mode 'direct') publishes on its own connection
    outside = job.enqueue({"key": "outside"})
    assert job_rows(database_url) == [(outside.id, outside.run_id)]


def test_a_sqlalchemy_connection_from_begin_joins_its_transaction(database_url, engine, job):
    with engine.begin() as connection:
        committed = job.enqueue({"key": "a"}, using=connection)

    def abandoned():
        with engine.begin() as connection:
            job.enqueue({"key": "b"}, using=connection)
            raise RuntimeError("abandon the unit of work")

    with pytest.raises(RuntimeError, match="abandon"):
        abandoned()
    assert job_rows(database_url) == [(committed.id, committed.run_id)]


def test_a_sqlalchemy_connection_not_yet_begun_commits_its_job(database_url, engine, job):
    with engine.connect() as connection:
        answer = job.enqueue({"key": "a"}, using=connection)
        connection.commit()
    assert job_rows(database_url) == [(answer.id, answer.run_id)]


def test_a_psycopg_connection_joins_its_transaction(database_url, job):
    with psycopg.connect(database_url) as connection:
        job.enqueue({"key": "a"}, using=connection)
        connection.rollback()
        committed = job.enqueue({"key": "b"}, using=connection)
        assert job_rows(database_url) == []
        connection.commit()
    assert job_rows(database_url) == [(committed.id, committed.run_id)]


def test_a_psycopg_transaction_block_on_an_autocommit_connection(database_url, job):
    with psycopg.connect(database_url, autocommit=True) as connection:

        def rolled_back():
            with connection.transaction():
                job.enqueue({"key": "a"}, using=connection)
                raise RuntimeError("roll it back")

        with pytest.raises(RuntimeError):
            rolled_back()
        with connection.transaction(), durajobs.in_transaction(connection):
            committed = job.enqueue({"key": "b"})
    assert job_rows(database_url) == [(committed.id, committed.run_id)]


def test_the_business_row_and_the_job_roll_back_together(database_url, engine, job, orders):
    with Session(engine) as session:
        session.execute(text("insert into orders (customer) values ('ada')"))
        job.enqueue({"key": "order:ada"}, using=session)
        session.rollback()
    assert fetch_all(database_url, "select count(*) from orders") == [(0,)]
    assert job_rows(database_url) == []


def test_the_business_row_and_the_job_commit_together(database_url, engine, job, orders):
    with Session(engine) as session:
        order_id = session.execute(
            text("insert into orders (customer) values ('ada') returning id")
        ).scalar_one()
        answer = job.enqueue({"key": f"order:{order_id}"}, using=session)
        session.commit()
    assert fetch_all(database_url, "select id, customer from orders") == [(order_id, "ada")]
    assert fetch_all(database_url, "select id, idempotency_key from jobs.jobs") == [
        (answer.id, f"order:{order_id}")
    ]


def test_a_psycopg_business_row_and_its_job_share_the_fate(database_url, job, orders):
    with psycopg.connect(database_url) as connection:
        connection.execute("insert into orders (customer) values ('grace')")
        job.enqueue({"key": "order:grace"}, using=connection)
        connection.rollback()
        connection.execute("insert into orders (customer) values ('linus')")
        answer = job.enqueue({"key": "order:linus"}, using=connection)
        connection.commit()
    assert fetch_all(database_url, "select customer from orders") == [("linus",)]
    assert job_rows(database_url) == [(answer.id, answer.run_id)]


def test_a_failed_business_write_takes_the_job_with_it(database_url, engine, job, orders):
    with Session(engine) as session:
        job.enqueue({"key": "order:null"}, using=session)
        with pytest.raises(Exception, match="null"):
            session.execute(text("insert into orders (customer) values (null)"))
        session.rollback()
    assert job_rows(database_url) == []


def test_a_sync_enqueue_on_an_async_transaction_is_refused(database_url, job):
    async def scenario():
        engine = create_async_engine(_sa_url(database_url))
        try:
            async with AsyncSession(engine) as session:
                with pytest.raises(DeclarationInvalid, match="enqueue_async"):
                    job.enqueue({"key": "a"}, using=session)
        finally:
            await engine.dispose()

    asyncio.run(scenario())
    assert job_rows(database_url) == []


# --- async: AsyncSession, AsyncConnection, psycopg AsyncConnection ------------------------------


def test_an_async_session_rolls_back_and_commits_its_job(database_url, job, orders):
    async def scenario():
        engine = create_async_engine(_sa_url(database_url))
        try:
            async with AsyncSession(engine) as session:
                await session.execute(text("insert into orders (customer) values ('ada')"))
                await job.enqueue_async({"key": "a"}, using=session)
                await session.rollback()
            async with AsyncSession(engine) as session:
                await session.execute(text("insert into orders (customer) values ('grace')"))
                answer = await job.enqueue_async({"key": "b"}, using=session)
                assert await asyncio.to_thread(job_rows, database_url) == []
                await session.commit()
            return answer
        finally:
            await engine.dispose()

    answer = asyncio.run(scenario())
    assert job_rows(database_url) == [(answer.id, answer.run_id)]
    assert fetch_all(database_url, "select customer from orders") == [("grace",)]


def test_in_transaction_makes_an_async_session_ambient(database_url, job):
    async def enqueue_deep_inside():
        await asyncio.sleep(0)  # the ambient transaction survives an await
        return await job.enqueue_async({"key": "deep"})

    async def scenario():
        engine = create_async_engine(_sa_url(database_url))
        try:
            async with AsyncSession(engine) as session:
                with durajobs.in_transaction(session):
                    await job.enqueue_async({"key": "dropped"})
                    await session.rollback()
                with durajobs.in_transaction(session):
                    answer = await enqueue_deep_inside()
                    await session.commit()
            return answer
        finally:
            await engine.dispose()

    answer = asyncio.run(scenario())
    assert job_rows(database_url) == [(answer.id, answer.run_id)]


def test_an_async_sqlalchemy_connection_joins_its_transaction(database_url, job):
    async def scenario():
        engine = create_async_engine(_sa_url(database_url))
        try:
            async with engine.begin() as connection:
                committed = await job.enqueue_async({"key": "a"}, using=connection)

            async def abandoned():
                async with engine.begin() as connection:
                    await job.enqueue_async({"key": "b"}, using=connection)
                    raise RuntimeError("abandon the unit of work")

            with pytest.raises(RuntimeError):
                await abandoned()
            return committed
        finally:
            await engine.dispose()

    committed = asyncio.run(scenario())
    assert job_rows(database_url) == [(committed.id, committed.run_id)]


def test_an_async_sqlalchemy_connection_not_yet_begun_commits_its_job(database_url, job):
    async def scenario():
        engine = create_async_engine(_sa_url(database_url))
        try:
            async with engine.connect() as connection:
                answer = await job.enqueue_async({"key": "a"}, using=connection)
                await connection.commit()
            return answer
        finally:
            await engine.dispose()

    answer = asyncio.run(scenario())
    assert job_rows(database_url) == [(answer.id, answer.run_id)]


def test_a_psycopg_async_connection_joins_its_transaction(database_url, job):
    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url) as connection:
            await job.enqueue_async({"key": "a"}, using=connection)
            await connection.rollback()
            answer = await job.enqueue_async({"key": "b"}, using=connection)
            await connection.commit()
        return answer

    answer = asyncio.run(scenario())
    assert job_rows(database_url) == [(answer.id, answer.run_id)]


# --- the wake follows the commit ---------------------------------------------------------------


def test_the_wake_is_delivered_on_commit_not_before(database_url, engine, job):
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute(durajobs._db.calls.listen())
        with Session(engine) as session:
            job.enqueue({"key": "rolled-back"}, using=session, queue="mail")
            session.rollback()
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
            job.enqueue({"key": "committed"}, using=session, queue="mail")
            # the transaction is open: the notification waits for its commit
            assert list(listener.notifies(timeout=0.3, stop_after=1)) == []
            session.commit()
        heard = list(listener.notifies(timeout=5, stop_after=1))
    with psycopg.connect(database_url) as owner:
        (token,) = owner.execute("select jobs._wake_token('mail')").fetchone()
    assert [(n.channel, n.payload) for n in heard] == [("jobs_wake", token)]


# --- mode='required' and the direct fallback ---------------------------------------------------


def test_mode_required_refuses_an_enqueue_outside_a_transaction(database_url, engine):
    job = send_job(durajobs.Registry(database_url, mode="required"))
    with pytest.raises(OutboxNoTransaction) as refused:
        job.enqueue({"key": "a"})
    assert refused.value.code == "X_OUTBOX_NO_TX"
    with pytest.raises(OutboxNoTransaction):
        job.as_(Actor("user:1", "org:1"), {"key": "a"})
    with pytest.raises(OutboxNoTransaction):
        asyncio.run(job.enqueue_async({"key": "a"}))
    assert job_rows(database_url) == []
    assert staged_rows(database_url) == []

    with Session(engine) as session:
        answer = job.enqueue({"key": "a"}, using=session)
        session.commit()
    with Session(engine) as session, durajobs.in_transaction(session):
        ambient = job.enqueue({"key": "b"})
        session.commit()
    assert job_rows(database_url) == sorted(
        [(answer.id, answer.run_id), (ambient.id, ambient.run_id)]
    )


def test_mode_required_with_an_outbox_refuses_then_stages(database_url, engine):
    job = send_job(durajobs.Registry(database_url, outbox=True, mode="required"))
    with pytest.raises(OutboxNoTransaction):
        job.enqueue({"key": "a"})
    assert staged_rows(database_url) == []
    with Session(engine) as session:
        staged = job.enqueue({"key": "a"}, using=session)
        session.commit()
    assert [(i, r) for i, r, _ in staged_rows(database_url)] == [(staged.id, staged.run_id)]
    assert job_rows(database_url) == []


def test_an_unknown_mode_is_refused_at_construction(database_url):
    with pytest.raises(DeclarationInvalid):
        durajobs.Registry(database_url, mode="optional")  # type: ignore[arg-type]


# --- an engine on another driver ---------------------------------------------------------------


def test_an_engine_on_a_foreign_driver_is_refused_clearly(database_url, job):
    """sqlite3 ships with Python: a driver connection that is not psycopg 3's."""
    engine = create_engine("sqlite://")
    try:
        with Session(engine) as session:
            with pytest.raises(ConfigInvalid, match="psycopg") as refused:
                job.enqueue({"key": "a"}, using=session)
            assert refused.value.detail == {"driver": "Connection"}
            assert "postgresql+psycopg://" in refused.value.hint
        with engine.begin() as connection, pytest.raises(ConfigInvalid):
            job.enqueue({"key": "b"}, using=connection)
    finally:
        engine.dispose()
    assert job_rows(database_url) == []


def test_something_that_is_not_a_transaction_is_refused(database_url, job):
    with pytest.raises(ConfigInvalid, match="cannot enqueue on a str"):
        job.enqueue({"key": "a"}, using="postgresql://elsewhere")
    with pytest.raises(ConfigInvalid, match="cannot enqueue on a object"):
        asyncio.run(job.enqueue_async({"key": "a"}, using=object()))
    assert job_rows(database_url) == []


# --- the outbox: staged in the transaction, published by a relay ---------------------------------


@pytest.fixture
def outbox_job(database_url):
    return send_job(durajobs.Registry(database_url, outbox=True))


def _relay_once(source_url: str, target_url: str | None = None) -> int:
    async def scenario():
        relay = OutboxRelay(source_url, target_url, listen=False)
        await relay.open()
        try:
            return await relay.run_once()
        finally:
            await relay.close()

    return asyncio.run(scenario())


def test_an_outbox_enqueue_in_a_transaction_stages_the_job(database_url, engine, outbox_job):
    with Session(engine) as session:
        staged = outbox_job.enqueue({"key": "a"}, using=session)
        assert staged_rows(database_url) == []
        session.commit()
    assert staged_rows(database_url) == [(staged.id, staged.run_id, None)]
    assert job_rows(database_url) == []
    assert staged.deduped is False


def test_an_outbox_enqueue_rolled_back_stages_nothing(database_url, engine, outbox_job, orders):
    with Session(engine) as session:
        session.execute(text("insert into orders (customer) values ('ada')"))
        outbox_job.enqueue({"key": "a"}, using=session)
        session.rollback()
    with psycopg.connect(database_url) as connection:
        outbox_job.enqueue({"key": "b"}, using=connection)
        connection.rollback()
    assert staged_rows(database_url) == []
    assert job_rows(database_url) == []
    assert fetch_all(database_url, "select count(*) from orders") == [(0,)]


def test_the_staged_ids_are_the_published_jobs_ids(database_url, engine, outbox_job):
    """R17 / item 107: the ids a staged enqueue answers are real, and name the published job."""
    with Session(engine) as session:
        staged = outbox_job.enqueue({"key": "a"}, using=session)
        session.commit()
    assert isinstance(staged.id, UUID)
    assert isinstance(staged.run_id, UUID)
    assert staged.id.int != 0
    assert staged.run_id.int != 0
    assert staged.id == staged.run_id  # a job's run is its own unless it continues another's
    assert staged.id.version == 7  # time-ordered, like every job id
    assert _relay_once(database_url) == 1
    assert job_rows(database_url) == [(staged.id, staged.run_id)]
    assert fetch_all(database_url, "select published_at is not null from jobs.outbox") == [(True,)]


@pytest.mark.parametrize("where", ["same database", "two databases"])
def test_the_staged_request_survives_the_relay(database_url, make_empty_database, where):
    queue_url = database_url
    if where == "two databases":
        queue_url = make_empty_database()
        durajobs.migrate(queue_url)
    registry = durajobs.Registry(queue_url, outbox=True)
    job = send_job(registry)
    chosen_run = UUID("0190a0a0-0000-4000-8000-000000000001")
    with psycopg.connect(database_url) as connection:
        staged = job.as_(
            Actor("user:7", "org:7"),
            {"key": "a", "note": "é ünïcode"},
            using=connection,
            queue="mail",
            priority=3,
            run_id=chosen_run,
            delay=timedelta(hours=1),
        )
    assert staged.run_id == chosen_run
    assert _relay_once(database_url, None if queue_url == database_url else queue_url) == 1
    assert fetch_all(
        queue_url,
        "select id, run_id, name, queue, input, idempotency_key, tenant_id, enqueued_by,"
        " priority, max_attempts, state, run_at > now() + interval '50 minutes'"
        " from jobs.jobs",
    ) == [
        (
            staged.id,
            chosen_run,
            "send",
            "mail",
            {"key": "a", "note": "é ünïcode"},
            "a",
            "org:7",
            "user:7",
            3,
            job.retry.attempts,
            "delayed",
            True,
        )
    ]


def test_on_conflict_error_cannot_be_staged(database_url, engine, outbox_job):
    with Session(engine) as session:
        with pytest.raises(ArgumentInvalid, match="on_conflict") as refused:
            outbox_job.enqueue({"key": "a"}, using=session, on_conflict="error")
        assert refused.value.code == "X_ARGUMENT_INVALID"
        with durajobs.in_transaction(session), pytest.raises(ArgumentInvalid):
            outbox_job.enqueue({"key": "a"}, on_conflict="error")
        session.commit()
    assert staged_rows(database_url) == []
    # outside a transaction nothing is staged, so the policy is answered at once
    outbox_job.enqueue({"key": "a"})
    with pytest.raises(JobDuplicate):
        outbox_job.enqueue({"key": "a"}, on_conflict="error")


def test_an_outbox_enqueue_outside_a_transaction_publishes_directly(database_url, outbox_job):
    answer = outbox_job.enqueue({"key": "a"})
    assert job_rows(database_url) == [(answer.id, answer.run_id)]
    assert staged_rows(database_url) == []
    again = asyncio.run(outbox_job.enqueue_async({"key": "a"}))
    assert (again.id, again.run_id, again.deduped) == (answer.id, answer.run_id, True)


def test_an_async_session_stages_in_the_outbox(database_url, outbox_job):
    async def scenario():
        engine = create_async_engine(_sa_url(database_url))
        try:
            async with AsyncSession(engine) as session:
                await outbox_job.enqueue_async({"key": "dropped"}, using=session)
                await session.rollback()
            async with AsyncSession(engine) as session:
                with durajobs.in_transaction(session):
                    staged = await outbox_job.enqueue_async({"key": "kept"})
                await session.commit()
            return staged
        finally:
            await engine.dispose()

    staged = asyncio.run(scenario())
    assert staged_rows(database_url) == [(staged.id, staged.run_id, None)]
    assert job_rows(database_url) == []
    assert _relay_once(database_url) == 1
    assert job_rows(database_url) == [(staged.id, staged.run_id)]


def test_outbox_false_publishes_straight_to_the_queue_inside_a_transaction(database_url):
    """Per call, outbox=False bypasses staging: the job goes to the queue's own database now."""
    registry = durajobs.Registry(database_url=database_url, outbox=True)

    @declare(registry, "bypass", input=NotedItem)
    async def bypass(ctx):
        return None

    with psycopg.connect(database_url) as connection:
        queued = bypass.enqueue({"key": "now"}, using=connection, outbox=False)
        connection.rollback()  # the caller's transaction does not carry it
    with psycopg.connect(database_url, autocommit=True) as observer:
        assert observer.execute(
            "select count(*) from jobs.jobs where id = %s", [queued.id]
        ).fetchone() == (1,)
        assert observer.execute("select count(*) from jobs.outbox").fetchone() == (0,)


def test_mode_required_refuses_an_autocommit_connection_with_no_transaction_open(database_url):
    job = send_job(durajobs.Registry(database_url, mode="required"))
    with psycopg.connect(database_url, autocommit=True) as connection:
        with pytest.raises(OutboxNoTransaction, match="autocommit"):
            job.enqueue({"key": "a"}, using=connection)
        with connection.transaction():
            joined = job.enqueue({"key": "b"}, using=connection)
    assert job_rows(database_url) == [(joined.id, joined.run_id)]

    async def scenario():
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            with pytest.raises(OutboxNoTransaction, match="autocommit"):
                await job.enqueue_async({"key": "c"}, using=conn)

    asyncio.run(scenario())
    assert len(job_rows(database_url)) == 1
