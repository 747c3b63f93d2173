-- 100_outbox: the transactional outbox, for an application whose business database is not the
-- database that holds the queue. An enqueue inside the application's transaction stages a row
-- here; a relay claims staged rows under a lease, publishes each with jobs.enqueue under the
-- row's own id (so a re-publish after a crash meets the job the first one made, live or
-- finished), and marks it published.
--
-- Tables: jobs.outbox (insert, update), jobs.declarations (read: a stage refuses what the publish
-- would). Locks: outbox rows, `for update skip locked` in the claim.
-- Wake: pg_notify('jobs_outbox_wake', '') from a stage, delivered on commit, and only when no
-- committed unclaimed row is already waiting (a relay that has one to do is already busy).
-- Order: rows go out by (staged_at, seq): the transaction's start, then the order the rows were
-- staged in (seq is a sequence: ids are time-ordered only to the millisecond). Claims are
-- serialised (a transaction-scoped advisory lock) and a relay claims only ahead of any row
-- another relay holds, so even with several relays a later row never overtakes an earlier one.

create table jobs.outbox (
  -- the id IS the job's id, and the run id is allocated here: a staged enqueue answers real ids
  id uuid primary key,
  run_id uuid not null,
  staged_at timestamptz not null,
  seq bigint generated always as identity,
  request jsonb not null,
  claimed_by text,
  claim_expires_at timestamptz,
  published_at timestamptz,
  constraint outbox_request_object_check check (jsonb_typeof(request) = 'object')
);

-- what a relay claims: unpublished rows, in publish order
create index outbox_unpublished_idx
  on jobs.outbox (staged_at, seq)
  where published_at is null;

create type jobs.outbox_record as (
  id uuid,
  run_id uuid,
  staged_at timestamptz,
  request jsonb,
  claimed_by text,
  claim_expires_at timestamptz
);

-- jobs.outbox_stage: stage one job in the caller's transaction; it commits or rolls back with
-- the caller's business rows, and a relay publishes it after commit.
-- Arguments: those of jobs.enqueue but id and on_conflict (the staged row's id becomes the
-- job's id; a live holder of the key is found at publish).
-- A queue, max_attempts or priority left NULL is left out of the staged request, so the publish
-- takes the declaration of the queue's database; a declaration in this database is checked now
-- (a tenant it requires), since a publish that raises holds up every row staged after it.
-- Answers (id, run_id, false): the ids the job will have. Raises what jobs.enqueue's argument
-- checks raise. Locks nothing but the new row. A run_id not given is the row's (the job's) own
-- id, as in jobs.enqueue.
create function jobs.outbox_stage(
  name text,
  input jsonb,
  idempotency_key text,
  queue text default null,
  tenant_id text default null,
  run_at timestamptz default null,
  max_attempts integer default null,
  priority integer default null,
  run_id uuid default null,
  traceparent text default null,
  enqueued_by text default null,
  concurrency_key text default null
)
returns jobs.enqueue_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_run_id uuid := coalesce(outbox_stage.run_id, v_id);
  v_declared record;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('enqueuer'), 'usage')) then
    perform jobs._denied(array['enqueuer'], 'jobs.outbox_stage');
  end if;
  -- a session bound to a tenant stages for it alone (014_tenants)
  if jobs._any_binding() then
    outbox_stage.tenant_id := jobs._scoped_tenant('jobs.outbox_stage', 'tenant_id',
                                                  outbox_stage.tenant_id);
  end if;
  select t.queue, t.max_attempts, t.priority, t.tenant_required, t.concurrency_keyed
    into v_declared
    from jobs.declarations t
   where t.name = outbox_stage.name;
  perform jobs._check_enqueue('jobs.outbox_stage', '', outbox_stage.name, outbox_stage.input,
                              outbox_stage.idempotency_key,
                              coalesce(outbox_stage.queue, v_declared.queue, 'default'),
                              outbox_stage.tenant_id, coalesce(outbox_stage.run_at, v_now),
                              coalesce(outbox_stage.max_attempts, v_declared.max_attempts, 20),
                              coalesce(outbox_stage.priority, v_declared.priority, 0),
                              coalesce(v_declared.tenant_required, false),
                              outbox_stage.concurrency_key,
                              coalesce(v_declared.concurrency_keyed, false),
                              outbox_stage.traceparent, outbox_stage.enqueued_by);
  -- refused now, as the publish would refuse it: a publish that raises holds up every row
  -- staged after it
  if outbox_stage.run_id is not null then
    perform jobs._check_run_tenant('jobs.outbox_stage', 'run_id', outbox_stage.run_id,
                                   outbox_stage.tenant_id);
  end if;

  -- silent while a committed row waits unclaimed: its relay is already on the way. In the
  -- unpublished index's order, so the test reads waiting rows only: as an exists, the planner
  -- scans the table, published history first
  if (select 1
        from jobs.outbox o
       where o.published_at is null
         and o.claimed_by is null
       order by o.staged_at, o.seq
       limit 1) is null then
    perform pg_notify('jobs_outbox_wake', '');
  end if;

  insert into jobs.outbox as o (id, run_id, staged_at, request)
  values (
    v_id, v_run_id, v_now,
    -- absent options drop out; the input is kept exactly, nulls inside it included
    jsonb_strip_nulls(jsonb_build_object(
      'name', outbox_stage.name,
      'idempotency_key', outbox_stage.idempotency_key,
      'queue', outbox_stage.queue,
      'tenant_id', outbox_stage.tenant_id,
      'run_at', outbox_stage.run_at,
      'max_attempts', outbox_stage.max_attempts,
      'priority', outbox_stage.priority,
      'traceparent', outbox_stage.traceparent,
      'enqueued_by', outbox_stage.enqueued_by,
      'concurrency_key', outbox_stage.concurrency_key))
      || jsonb_build_object('input', outbox_stage.input));
  return (v_id, v_run_id, false)::jobs.enqueue_result;
end;
$$;

-- jobs._check_relay: refuse a relay call without a claimant or with an impossible lease.
-- Raises X_ARGUMENT_INVALID. Locks nothing.
create function jobs._check_relay(function_name text, relay_id text, ids uuid[])
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._check_label(function_name, 'relay_id', relay_id);
  if ids is null or array_position(ids, null) is not null then
    perform jobs._invalid(function_name, 'ids', 'must be an array of outbox ids without NULL');
  end if;
end;
$$;

-- jobs.outbox_claim: claim up to batch_size staged rows for relay_id under a lease. A claim,
-- not a read: the claimant and the lease are stamped in the locking statement, so a second
-- relay cannot take the same rows until the lease lapses (a dead relay's rows come back then).
-- A relay claims only rows ahead of the first row another relay holds under a live lease, and
-- claims run one at a time: several relays never publish out of order (one works, the others
-- stand by until its rows are published or its lease lapses).
-- Arguments: relay_id, batch_size (100), lease (30 s; positive, at most a day).
-- Answers the claimed rows in (staged_at, seq) order. Raises X_ARGUMENT_INVALID.
-- Locks: an advisory lock for the claiming transaction, then the rows it answers.
create function jobs.outbox_claim(
  relay_id text,
  batch_size integer default 100,
  lease interval default interval '30 seconds'
)
returns setof jobs.outbox_record
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_held_from jobs.outbox%rowtype;
begin
  perform jobs._require(array['worker'], 'jobs.outbox_claim');
  perform jobs._check_relay('jobs.outbox_claim', outbox_claim.relay_id, '{}');
  if batch_size is null or batch_size not between 1 and 10000 then
    perform jobs._invalid('jobs.outbox_claim', 'batch_size', 'must be an integer from 1 to 10000');
  end if;
  if lease is null or lease <= interval '0' or lease > interval '1 day' then
    perform jobs._invalid('jobs.outbox_claim', 'lease', 'must be a positive interval of at most a day');
  end if;

  -- one claim at a time (released at commit, so safe behind a pool): the next claim's snapshot
  -- sees this one's stamps, and the prefix rule below holds
  perform pg_advisory_xact_lock(hashtext('jobs.outbox_claim'));

  select o.*
    into v_held_from
    from jobs.outbox o
   where o.published_at is null
     and o.claimed_by is distinct from outbox_claim.relay_id
     and o.claim_expires_at > v_now
   order by o.staged_at, o.seq
   limit 1;

  return query
    with claimable as materialized (
      select o.id
        from jobs.outbox o
       where o.published_at is null
         -- its own held rows too: a relay never claims past rows it still holds
         and (o.claimed_by is null
              or o.claim_expires_at <= v_now
              or o.claimed_by = outbox_claim.relay_id)
         and (v_held_from.id is null
              or (o.staged_at, o.seq) < (v_held_from.staged_at, v_held_from.seq))
       order by o.staged_at, o.seq
       limit outbox_claim.batch_size
         for update skip locked
    ),
    claimed as (
      update jobs.outbox o
         set claimed_by = outbox_claim.relay_id,
             claim_expires_at = v_now + outbox_claim.lease
        from claimable c
       where o.id = c.id
      returning o.id, o.run_id, o.staged_at, o.seq, o.request, o.claimed_by, o.claim_expires_at
    )
    select c.id, c.run_id, c.staged_at, c.request, c.claimed_by, c.claim_expires_at
      from claimed c
     order by c.staged_at, c.seq;
end;
$$;

-- jobs.outbox_mark_published: record that relay_id published these rows. Fenced: only rows
-- this relay still holds under a live lease, not yet published (the first writer wins).
-- Arguments: relay_id, ids. Answers the ids it marked. Raises X_ARGUMENT_INVALID.
-- Locks: the rows it marks.
create function jobs.outbox_mark_published(relay_id text, ids uuid[])
returns setof uuid
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker'], 'jobs.outbox_mark_published');
  perform jobs._check_relay('jobs.outbox_mark_published', outbox_mark_published.relay_id,
                            outbox_mark_published.ids);
  return query
    update jobs.outbox o
       set published_at = v_now
     where o.id = any(outbox_mark_published.ids)
       and o.claimed_by = outbox_mark_published.relay_id
       and o.claim_expires_at > v_now
       and o.published_at is null
    returning o.id;
end;
$$;

-- jobs.outbox_release: hand back rows relay_id claimed but did not publish (a failed publish
-- stopped its batch), so the next pass takes them at once instead of after the lease.
-- Fenced like jobs.outbox_mark_published. Arguments: relay_id, ids.
-- Answers how many rows it released. Raises X_ARGUMENT_INVALID. Locks: those rows.
create function jobs.outbox_release(relay_id text, ids uuid[])
returns integer
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_released integer;
begin
  perform jobs._require(array['worker'], 'jobs.outbox_release');
  perform jobs._check_relay('jobs.outbox_release', outbox_release.relay_id, outbox_release.ids);
  update jobs.outbox o
     set claimed_by = null,
         claim_expires_at = null
   where o.id = any(outbox_release.ids)
     and o.claimed_by = outbox_release.relay_id
     and o.claim_expires_at > v_now
     and o.published_at is null;
  get diagnostics v_released = row_count;
  return v_released;
end;
$$;

-- jobs._publish: enqueue one staged request under the outbox row's own ids.
-- Answers jobs.enqueue's answer. Raises what jobs.enqueue raises.
create function jobs._publish(staged jobs.outbox_record)
returns jobs.enqueue_result
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  select jobs.enqueue(
    name => staged.request ->> 'name',
    input => staged.request -> 'input',
    idempotency_key => staged.request ->> 'idempotency_key',
    queue => staged.request ->> 'queue',
    tenant_id => staged.request ->> 'tenant_id',
    run_at => (staged.request ->> 'run_at')::timestamptz,
    max_attempts => (staged.request ->> 'max_attempts')::integer,
    priority => (staged.request ->> 'priority')::integer,
    id => staged.id,
    run_id => staged.run_id,
    on_conflict => 'dedupe',
    traceparent => staged.request ->> 'traceparent',
    enqueued_by => staged.request ->> 'enqueued_by',
    concurrency_key => staged.request ->> 'concurrency_key')
$$;

-- jobs.outbox_relay: where the outbox and the queue share one database, relay a batch in one
-- transaction: claim, publish each row in order, mark them published. A publish that raises
-- rolls the whole batch back, so nothing overtakes anything.
-- Arguments: relay_id, batch_size (100).
-- Answers one (id, run_id, deduped) per published row, in publish order. Claims are serialised,
-- so a second relay waits for this transaction rather than publish rows behind it.
-- Raises X_ARGUMENT_INVALID and what jobs.enqueue raises. Locks: the claimed outbox rows.
create function jobs.outbox_relay(relay_id text, batch_size integer default 100)
returns setof jobs.enqueue_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_record jobs.outbox_record;
  v_result jobs.enqueue_result;
  v_published uuid[] := '{}';
begin
  perform jobs._require(array['worker'], 'jobs.outbox_relay');
  for v_record in
    select c.id, c.run_id, c.staged_at, c.request, c.claimed_by, c.claim_expires_at
      from jobs.outbox_claim(relay_id => outbox_relay.relay_id,
                             batch_size => outbox_relay.batch_size) c
  loop
    v_result := jobs._publish(v_record);
    v_published := v_published || v_record.id;
    return next v_result;
  end loop;
  perform jobs.outbox_mark_published(outbox_relay.relay_id, v_published);
end;
$$;
