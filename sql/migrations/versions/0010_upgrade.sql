-- Revision 0010 up: the enqueue's wake and ids.
-- jobs._announce, the wake throttle every enqueue runs, tests for a waiting row of its queue in
-- its 250 ms slot. The planner could take the claim index for that test (its state test proves
-- the index's predicate) and read every waiting row of the queue, filtering on created_at: with
-- statistics that did not yet know the queue's backlog, a single enqueue next to 12,000 waiting
-- rows took 3.2 ms of server time instead of 0.33, growing with the backlog. Each range now
-- sits in a subquery that names no state, so only the (queue, created_at) index serves it; the
-- test reads the slot's rows.
-- jobs._uuid_v7, which makes the id of every single enqueue, outbox row and event, was a SQL
-- function calling another SQL function, re-planned on every call: about 50 us. It is PL/pgSQL
-- now, about 9 us, with the formula still only in jobs._uuid_v7_many.
-- jobs.queue_stats() (no queues named) lists a paused queue even when it holds nothing counted;
-- before, a queue paused ahead of its jobs, or after they all finished, was not listed at all.
-- A review of every statement under misleading statistics found more reads that grew with the
-- table rather than the answer; these are fixed here:
-- - jobs.enqueue_many's answering statement joined jobs.jobs for requests that supplied an id
--   as a plain join, which the planner hashed over a scan of the whole table whenever a batch
--   deduped anything, even on fresh statistics (1,000 requests next to 143,000 rows: 76-117 ms).
--   It probes the primary key per request now, and so does the check that follows.
-- - jobs.outbox_stage's wake test scanned the outbox, published history first (15-20 ms a stage
--   next to 100,000 published rows); it reads the unpublished index in order now.
-- - jobs.claim_v2 and jobs.claim_v3 asked whether a run has steps with an exists that the
--   planner could answer by hashing every step, per claim, on statistics taken while
--   jobs.steps was small; the probe walks the steps' primary key now.
-- - jobs.remove and jobs.remove_many read the whole table on every call to find other rows of
--   a run (no index leads with run_id); they ask only when the run has steps.
-- - jobs.queue_depth read the clock (jobs._now(), which cannot be inlined) once per live row,
--   four fifths of its time at 22,000 live rows; it reads it once a call.
-- - jobs.jobs, jobs.steps and jobs.outbox are analyzed after 2,000 changed rows, whatever their
--   size (jobs.jobs: after 5 % before). A sample with no live row in it made every by-id write
--   (ack_v1, nack_v1, heartbeat_v1, progress_v1, cancel, promote, the outbox's mark and release)
--   read the whole backlog through a partial index it believed empty, until the next analyze.
-- Otherwise the same arguments, answers, errors and locks. Schema version 10. Frozen: never
-- edit after release; a change ships as a new revision.

-- jobs.version: the installed schema version; the Python package refuses an older one.
-- Answers an integer. Raises nothing. Introduced in revision 0001; since then it answers the
-- number of the newest revision installed (10 since revision 0010).
create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 10
$$;

-- >>> sql/functions/010_util.sql: _uuid_v7

-- jobs._uuid_v7: a time-ordered uuid (RFC 9562 version 7), so ids sort by creation and new rows
-- land at the right edge of every id index.
-- Answers a uuid. Raises nothing. Introduced in revision 0001; since revision 0007 one element of
-- jobs._uuid_v7_many, which holds the only copy of the formula. PL/pgSQL since revision 0010: as
-- a SQL function it re-planned the SQL function it calls on every call, about 50 us of a single
-- enqueue; now about 9.
create or replace function jobs._uuid_v7()
returns uuid
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  return (jobs._uuid_v7_many(1))[1];
end;
$$;

-- >>> sql/functions/020_enqueue.sql: _announce

-- jobs._announce: wake idle workers of `queue` for rows created at `created_at`, unless a row
-- another transaction created in the same 250 ms slot, due at once and STILL WAITING, already
-- announced it: the workers it woke are claiming and will find this row too. A row of the slot
-- that was already claimed says nothing about this one (its worker may be idle again), so it
-- does not silence the wake (since revision 0006; before, a second job 50 ms after the first
-- waited for the poll).
-- Rows of the calling transaction share its created_at and are skipped: Postgres folds identical
-- notifications of one transaction anyway. Answers whether it notified. Locks nothing.
-- Reads the slot's rows of the queue by (queue, created_at), whatever the statistics say (since
-- revision 0010). Introduced in revision 0001.
create or replace function jobs._announce(queue text, created_at timestamptz)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_slot timestamptz := to_timestamp(floor(extract(epoch from _announce.created_at) * 4) / 4);
begin
  -- each inner query names no state, so the planner cannot take the claim index (whose
  -- predicate the state test proves) and read every waiting row of a backlog to find the
  -- slot's few; offset 0 keeps the state test out. Two ranges, so the index bounds skip the
  -- caller's own rows however many it made.
  if exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs j
                where j.queue = _announce.queue
                  and j.created_at >= v_slot
                  and j.created_at < _announce.created_at
               offset 0) before_mine
        where before_mine.state in ('ready', 'delayed')
          and before_mine.run_at <= before_mine.created_at + interval '1 second')
     or exists (
       select 1
         from (select j.state, j.run_at, j.created_at
                 from jobs.jobs j
                where j.queue = _announce.queue
                  and j.created_at > _announce.created_at
                  and j.created_at < v_slot + interval '250 milliseconds'
               offset 0) after_mine
        where after_mine.state in ('ready', 'delayed')
          and after_mine.run_at <= after_mine.created_at + interval '1 second') then
    return false;
  end if;
  perform pg_notify('jobs_wake', _announce.queue);
  return true;
end;
$$;

-- >>> sql/functions/060_stats.sql: queue_stats

-- jobs.queue_stats: per queue, how many jobs are ready, delayed, running, suspended and dead,
-- and how long the oldest ready-and-due job has waited past its run_at.
-- Each row counts in exactly one bucket. ready: state 'ready' (a shed row included, even while
-- its short delay runs) and 'delayed' rows that came due; delayed: 'delayed' rows not yet due.
-- A suspended row (a sleep, a park) is excluded from oldest_ready_age even when due, on purpose.
-- Arguments: queues (NULL: every queue holding a counted job, and every paused queue; given:
-- exactly those, zeros included).
-- Answers one jobs.queue_stat per queue, ordered by queue. Locks nothing.
-- Since revision 0008 each state is read through the partial index that holds it, so the
-- finished rows of a queue, however many, are never read (a metrics scrape calls this). Since
-- revision 0010 a paused queue is listed even when it holds nothing counted: a pause taken
-- before the jobs come, or one that outlived them, was invisible. Introduced in revision 0001.
create or replace function jobs.queue_stats(queues text[] default null)
returns setof jobs.queue_stat
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  return query
    with counted_rows as (
      -- one branch per partial index: waiting (jobs_claim_idx), running (jobs_lease_idx) and
      -- dead (jobs_dead_idx); one scan over all five states would read the finished rows too
      select j.queue, j.state, j.run_at
        from jobs.jobs j
       where j.state in ('ready', 'delayed', 'suspended')
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs j
       where j.state = 'running'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
      union all
      select j.queue, j.state, j.run_at
        from jobs.jobs j
       where j.state = 'dead'
         and (queue_stats.queues is null or j.queue = any(queue_stats.queues))
    ),
    counted as (
      select r.queue,
             -- a delayed row that came due waits like a ready one: count it there
             count(*) filter (where r.state = 'ready'
                                 or (r.state = 'delayed' and r.run_at <= v_now)) as ready,
             count(*) filter (where r.state = 'delayed' and r.run_at > v_now) as delayed,
             count(*) filter (where r.state = 'running') as running,
             count(*) filter (where r.state = 'suspended') as suspended,
             count(*) filter (where r.state = 'dead') as dead,
             v_now - min(r.run_at) filter (where r.state in ('ready', 'delayed')
                                             and r.run_at <= v_now) as oldest_ready_age
        from counted_rows r
       group by r.queue
    ),
    wanted as (
      select q.queue
        from unnest(queue_stats.queues) as q(queue)
       union
      select c.queue
        from counted c
       union
      select p.queue
        from jobs.queue_pauses p
       where queue_stats.queues is null
    )
    select w.queue,
           coalesce(c.ready, 0),
           coalesce(c.delayed, 0),
           coalesce(c.running, 0),
           coalesce(c.suspended, 0),
           coalesce(c.dead, 0),
           c.oldest_ready_age,
           exists (select 1 from jobs.queue_pauses p where p.queue = w.queue)
      from wanted w
      left join counted c on c.queue = w.queue
     order by w.queue;
end;
$$;

-- >>> sql/functions/020_enqueue.sql: enqueue_many

-- jobs.enqueue_many: put many jobs on the queue in one statement, with the rules of
-- jobs.enqueue. Arguments: requests, a JSON array of objects whose keys are jobs.enqueue's
-- argument names (name, input and idempotency_key required; queue, tenant_id, run_at,
-- max_attempts, priority, id, run_id, traceparent, enqueued_by optional); on_conflict for all.
-- A key repeated inside the batch dedupes to its first occurrence.
-- Answers one (id, run_id, deduped) per request, in input order.
-- Raises what jobs.enqueue raises, naming the request (requests[3].name); under
-- on_conflict => 'error' the first duplicate raises (detail.reason 'key_held', 'id_exists', or
-- 'key_repeated' for a key repeated inside the batch) and nothing is inserted.
-- Locks: the unique indexes. One wake per queue per statement. Introduced in revision 0001;
-- since revision 0009 a batch with nothing to refuse and nothing to dedupe is checked in one
-- pass and answered without a lookup, and a deduped request's holder is found by a join (the
-- checks, and a call per deduped request, had cost about as much as the insert).
create or replace function jobs.enqueue_many(requests jsonb, on_conflict text default 'dedupe')
returns setof jobs.enqueue_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_requests jobs._enqueue_request[];
  v_pending jobs._enqueue_request[];
  -- the answers so far, as parallel arrays (request ordinal, id, run_id, deduped)
  v_answered integer[] := '{}';
  v_answer_ids uuid[] := '{}';
  v_answer_run_ids uuid[] := '{}';
  v_answer_deduped boolean[] := '{}';
  v_inserted uuid[];
  v_request jobs._enqueue_request;
  v_bad_key text;
  v_bad_ord integer;
  v_new_ids uuid[];
  v_duplicate record;
  v_queue text;
begin
  perform jobs._check_on_conflict('jobs.enqueue_many', enqueue_many.on_conflict);
  if requests is null or jsonb_typeof(requests) <> 'array' then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must be a JSON array of job objects');
  end if;
  perform jobs._check_request_shapes(requests);

  v_new_ids := jobs._uuid_v7_many(jsonb_array_length(requests));
  begin
  -- one typed pass over the array (jsonb_to_recordset): a field lookup and a cast per field
  -- and request cost more than the insert
  select coalesce(array_agg(parsed.r order by (parsed.r).ord), '{}')
    into v_requests
    from (
      select (x.ord::integer,
              coalesce(x.id, v_new_ids[x.ord]),
              x.id is not null,
              x.name,
              coalesce(x.queue, 'default'),
              -- a JSON null input stays jsonb 'null' (the recordset makes it SQL NULL), so the
              -- refusal says "got null" as it always did
              coalesce(x.input,
                       case when requests -> (x.ord::integer - 1) ? 'input' then 'null'::jsonb end),
              x.idempotency_key,
              x.tenant_id,
              coalesce(x.run_id, gen_random_uuid()),
              coalesce(x.run_at, v_now),
              coalesce(x.max_attempts, 20),
              coalesce(x.priority, 0),
              x.traceparent,
              x.enqueued_by)::jobs._enqueue_request as r
        from rows from (
               jsonb_to_recordset(requests) as (
                 id uuid, name text, queue text, input jsonb, idempotency_key text,
                 tenant_id text, run_id uuid, run_at timestamptz, max_attempts integer,
                 priority integer, traceparent text, enqueued_by text)
             ) with ordinality as x(id, name, queue, input, idempotency_key, tenant_id, run_id,
                                    run_at, max_attempts, priority, traceparent, enqueued_by,
                                    ord)
    ) parsed;
  exception
    when invalid_text_representation or invalid_datetime_format or datetime_field_overflow
         or numeric_value_out_of_range or invalid_parameter_value then
      perform jobs._invalid('jobs.enqueue_many', 'requests',
                            'holds a value of the wrong type: ' || sqlerrm);
  end;

  select format('requests[%s].id', later.ord)
    into v_bad_key
    from unnest(v_requests) later
    join unnest(v_requests) earlier
      on earlier.id = later.id and earlier.ord < later.ord and later.id_supplied
   order by later.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key, 'repeats the id of an earlier request');
  end if;

  -- one pass finds the first request that jobs._check_enqueue would refuse (the same tests, kept
  -- in step with it); only that request is checked by it, which raises the error naming it. A
  -- call per request cost more than the request's insert.
  select r.ord
    into v_bad_ord
    from unnest(v_requests) r
   where r.name is null or btrim(r.name) = ''
      or r.input is null or jsonb_typeof(r.input) <> 'object'
      or r.idempotency_key is null or btrim(r.idempotency_key) = ''
      or r.queue is null or btrim(r.queue) = ''
      or r.tenant_id = ''
      or not isfinite(r.run_at)
      or r.max_attempts is null or r.max_attempts < 1
      or r.priority is null
   order by r.ord
   limit 1;
  if v_bad_ord is not null then
    v_request := v_requests[v_bad_ord];
    perform jobs._check_enqueue('jobs.enqueue_many', format('requests[%s].', v_request.ord),
                                v_request.name, v_request.input, v_request.idempotency_key,
                                v_request.queue, v_request.tenant_id, v_request.run_at,
                                v_request.max_attempts, v_request.priority);
  end if;

  v_pending := v_requests;
  -- two passes at most, as in jobs.enqueue: a live holder may finish between conflict and lookup
  for v_try in 1..2 loop
    with inserted as (
      insert into jobs.jobs as j (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
        max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by)
      select r.id, r.name, r.queue, r.input, r.idempotency_key, r.tenant_id, r.run_id,
             case when r.run_at > v_now then 'delayed' else 'ready' end, r.priority,
             r.max_attempts, r.run_at, v_now, v_now, r.traceparent, r.enqueued_by
        from unnest(v_pending) r
       order by r.ord
      on conflict do nothing
      returning j.id
    )
    select coalesce(array_agg(inserted.id), '{}')
      into v_inserted
      from inserted;

    -- every request made its own row (the usual batch): nothing was deduped, so no id was
    -- taken and no key held, and each request answers its row
    if v_try = 1 and cardinality(v_inserted) = cardinality(v_requests) then
      for v_queue in
        select distinct r.queue
          from unnest(v_requests) r
         where r.run_at <= v_now + interval '1 second'
      loop
        perform jobs._announce(v_queue, v_now);
      end loop;
      return query
        select r.id, r.run_id, false
          from unnest(v_requests) r
         order by r.ord;
      return;
    end if;

    -- a new statement, so the lookups see this batch's rows: a key repeated in the batch
    -- dedupes to its first occurrence
    with answered as (
      select r.ord,
             case
               when ins.id is not null then (r.id, r.run_id, false)::jobs.enqueue_result
               when by_id.id is not null then (by_id.id, by_id.run_id, true)::jobs.enqueue_result
               when live.id is not null then (live.id, live.run_id, true)::jobs.enqueue_result
             end as answer
        from unnest(v_pending) r
        left join unnest(v_inserted) as ins(id) on ins.id = r.id
        -- a probe of the primary key per request that needs one: as a plain join the planner
        -- hashed a scan of the whole table, even on fresh statistics (since revision 0010)
        left join lateral (
          select b.id, b.run_id
            from jobs.jobs b
           where r.id_supplied
             and ins.id is null
             and b.id = r.id
          offset 0
        ) by_id on true
        -- the live holder, as jobs._find_live finds it, in the statement rather than a call
        -- per request (since revision 0009: the calls cost more than a batch's insert)
        left join lateral (
          select j.id, j.run_id
            from jobs.jobs j
           where ins.id is null
             and by_id.id is null
             and j.name = r.name
             and coalesce(j.tenant_id, '') = coalesce(r.tenant_id, '')
             and j.idempotency_key = r.idempotency_key
             and j.state in ('ready', 'delayed', 'running', 'suspended')
           limit 1
        ) live on true
    ),
    found_answers as (
      select a.ord, (a.answer).id, (a.answer).run_id, (a.answer).deduped
        from answered a
       where (a.answer).id is not null
    )
    select v_answered || coalesce(array_agg(f.ord order by f.ord), '{}'),
           v_answer_ids || coalesce(array_agg(f.id order by f.ord), '{}'),
           v_answer_run_ids || coalesce(array_agg(f.run_id order by f.ord), '{}'),
           v_answer_deduped || coalesce(array_agg(f.deduped order by f.ord), '{}')
      into v_answered, v_answer_ids, v_answer_run_ids, v_answer_deduped
      from found_answers f;

    select coalesce(array_agg((r.*)::jobs._enqueue_request order by r.ord), '{}')
      into v_pending
      from unnest(v_pending) r
      left join unnest(v_answered) as done(ord) on done.ord = r.ord
     where done.ord is null;
    exit when cardinality(v_pending) = 0;
  end loop;

  -- after the inserts, so an id another transaction took meanwhile is caught too: a supplied
  -- id answers only the same job (name, tenant, key), never a stranger
  select r.ord, r.id, j.name, j.idempotency_key
    into v_duplicate
    from unnest(v_requests) r
    -- by primary key, as above
    cross join lateral (
      select b.name, b.tenant_id, b.idempotency_key
        from jobs.jobs b
       where r.id_supplied
         and b.id = r.id
      offset 0
    ) j
   where j.name <> r.name
      or coalesce(j.tenant_id, '') <> coalesce(r.tenant_id, '')
      or j.idempotency_key <> r.idempotency_key
   order by r.ord
   limit 1;
  if found then
    perform jobs._raise(
      'X_JOB_DUPLICATE',
      format('requests[%s]: id %s already names job %s with idempotency key %s; an id is never '
             'reused', v_duplicate.ord, v_duplicate.id, v_duplicate.name,
             v_duplicate.idempotency_key),
      jsonb_build_object('reason', 'id_taken', 'existing_id', v_duplicate.id,
                         'request', v_duplicate.ord),
      'pass a fresh id, or none and one is made');
  end if;

  if cardinality(v_pending) > 0 then
    perform jobs._raise(
      'X_DRIVER_UNAVAILABLE',
      format('enqueue of %s was rejected but no live row holds its idempotency key',
             v_pending[1].name),
      jsonb_build_object('job', v_pending[1].name, 'idempotency_key', v_pending[1].idempotency_key));
  end if;

  if enqueue_many.on_conflict = 'error' then
    select r.ord, r.name, r.idempotency_key, r.tenant_id, a.id, r.id_supplied,
           earlier.ord as earlier_ord
      into v_duplicate
      from unnest(v_answered, v_answer_ids, v_answer_deduped) as a(ord, id, deduped)
      join unnest(v_requests) r on r.ord = a.ord
      left join unnest(v_requests) earlier on earlier.id = a.id and earlier.ord < r.ord
     where a.deduped
     order by r.ord
     limit 1;
    if found and v_duplicate.earlier_ord is not null then
      -- the holder is a row of this very batch, rolled back with it: name the request instead
      perform jobs._raise(
        'X_JOB_DUPLICATE',
        format('requests[%s]: job %s repeats the idempotency key %s of requests[%s]',
               v_duplicate.ord, v_duplicate.name, v_duplicate.idempotency_key,
               v_duplicate.earlier_ord),
        jsonb_build_object('reason', 'key_repeated', 'job', v_duplicate.name,
                           'idempotency_key', v_duplicate.idempotency_key,
                           'request', v_duplicate.ord, 'earlier_request', v_duplicate.earlier_ord));
    elsif found then
      perform jobs._raise(
        'X_JOB_DUPLICATE',
        format('requests[%s]: job %s with idempotency key %s is already held by job %s',
               v_duplicate.ord, v_duplicate.name, v_duplicate.idempotency_key,
               v_duplicate.id),
        jsonb_build_object('reason', case when v_duplicate.id_supplied
                                          and v_duplicate.id = (v_requests[v_duplicate.ord]).id
                                          then 'id_exists' else 'key_held' end,
                           'job', v_duplicate.name, 'idempotency_key', v_duplicate.idempotency_key,
                           'tenant_id', v_duplicate.tenant_id,
                           'existing_id', v_duplicate.id, 'request', v_duplicate.ord));
    end if;
  end if;

  -- one wake per queue that received a row due now
  for v_queue in
    select distinct r.queue
      from unnest(v_answered, v_answer_deduped) as a(ord, deduped)
      join unnest(v_requests) r on r.ord = a.ord
     where not a.deduped
       and r.run_at <= v_now + interval '1 second'
  loop
    perform jobs._announce(v_queue, v_now);
  end loop;

  return query
    select a.id, a.run_id, a.deduped
      from unnest(v_answered, v_answer_ids, v_answer_run_ids, v_answer_deduped)
             as a(ord, id, run_id, deduped)
     order by a.ord;
end;
$$;

-- >>> sql/functions/030_claim.sql: claim_v2, claim_v3

-- jobs.claim_v2: jobs.claim_v1, and for each row whether its run has stored steps, so a worker
-- reads the step history only of runs that may have one: true past the first attempt, else
-- whether a step is stored (most first attempts have none).
-- Arguments, order, answers and errors: those of jobs.claim_v1, plus has_steps.
-- Locks: those of jobs.claim_v1. Introduced in revision 0006.
create or replace function jobs.claim_v2(
  queues text[],
  worker_id text,
  batch_size integer default 1,
  visibility interval default interval '30 seconds',
  drop_exhausted text[] default '{}'
)
returns table (
  id uuid,
  run_id uuid,
  name text,
  queue text,
  input jsonb,
  tenant_id text,
  state text,
  attempt integer,
  max_attempts integer,
  claim bigint,
  priority integer,
  run_at timestamptz,
  created_at timestamptz,
  lease_expires_at timestamptz,
  last_error text,
  traceparent text,
  enqueued_by text,
  has_steps boolean
)
language sql
volatile
set search_path = pg_catalog, pg_temp
as $$
  select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
         c.max_attempts, c.claim, c.priority, c.run_at, c.created_at, c.lease_expires_at,
         c.last_error, c.traceparent, c.enqueued_by,
         -- a run past its first attempt always reads its history: a body whose lease lapsed
         -- may have written a step after this statement's snapshot was taken. The probe
         -- walks the primary key's order, so no plan can hash every step instead (one was
         -- chosen on statistics taken while the table was small; since revision 0010)
         c.attempt > 1
           or (select true
                 from jobs.steps s
                where s.run_id = c.run_id
                order by s.run_id, s.name
                limit 1) is not null
    from jobs.claim_v1(queues, worker_id, batch_size, visibility, drop_exhausted) c
$$;

-- jobs.claim_v3: jobs.claim_v2, and recover_lapsed (default true) says whether this call also
-- buries and re-takes rows whose lease lapsed. A worker passes true about once a second and
-- false between: the scan for lapsed leases reads every dead entry of jobs_lease_idx that a
-- vacuum has not yet removed, which after a burst of work costs more than the claim itself.
-- Arguments, order, answers, errors and locks: those of jobs.claim_v2 (errors name
-- jobs.claim_v3), plus recover_lapsed. Introduced in revision 0007.
create or replace function jobs.claim_v3(
  queues text[],
  worker_id text,
  batch_size integer default 1,
  visibility interval default interval '30 seconds',
  drop_exhausted text[] default '{}',
  recover_lapsed boolean default true
)
returns table (
  id uuid,
  run_id uuid,
  name text,
  queue text,
  input jsonb,
  tenant_id text,
  state text,
  attempt integer,
  max_attempts integer,
  claim bigint,
  priority integer,
  run_at timestamptz,
  created_at timestamptz,
  lease_expires_at timestamptz,
  last_error text,
  traceparent text,
  enqueued_by text,
  has_steps boolean
)
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  return query
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claim, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- as in jobs.claim_v2: a run past its first attempt always reads its history, and
           -- the probe walks the primary key
           c.attempt > 1
             or (select true
                   from jobs.steps s
                  where s.run_id = c.run_id
                  order by s.run_id, s.name
                  limit 1) is not null
      from jobs._claim('jobs.claim_v3', claim_v3.queues, claim_v3.worker_id,
                       claim_v3.batch_size, claim_v3.visibility, claim_v3.drop_exhausted,
                       claim_v3.recover_lapsed) c;
end;
$$;

-- >>> sql/functions/100_outbox.sql: outbox_stage

-- jobs.outbox_stage: stage one job in the caller's transaction; it commits or rolls back with
-- the caller's business rows, and a relay publishes it after commit.
-- Arguments: those of jobs.enqueue but id and on_conflict (the staged row's id becomes the
-- job's id; a live holder of the key is found at publish).
-- Answers (id, run_id, false): the ids the job will have. Raises what jobs.enqueue's argument
-- checks raise. Locks nothing but the new row. Introduced in revision 0002.
create or replace function jobs.outbox_stage(
  name text,
  input jsonb,
  idempotency_key text,
  queue text default 'default',
  tenant_id text default null,
  run_at timestamptz default null,
  max_attempts integer default 20,
  priority integer default 0,
  run_id uuid default null,
  traceparent text default null,
  enqueued_by text default null
)
returns jobs.enqueue_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_id uuid := jobs._uuid_v7();
  v_run_id uuid := coalesce(outbox_stage.run_id, gen_random_uuid());
begin
  perform jobs._check_enqueue('jobs.outbox_stage', '', outbox_stage.name, outbox_stage.input,
                              outbox_stage.idempotency_key, outbox_stage.queue,
                              outbox_stage.tenant_id, coalesce(outbox_stage.run_at, v_now),
                              outbox_stage.max_attempts, outbox_stage.priority);

  -- silent while a committed row waits unclaimed: its relay is already on the way. In the
  -- unpublished index's order, so the test reads waiting rows only: as an exists, the planner
  -- scanned the table, published history first (since revision 0010)
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
      'enqueued_by', outbox_stage.enqueued_by))
      || jsonb_build_object('input', outbox_stage.input));
  return (v_id, v_run_id, false)::jobs.enqueue_result;
end;
$$;

-- >>> sql/functions/130_operator.sql: remove, remove_many

-- jobs.remove: delete a job that is not running, and its run's steps once no row of the run
-- is left. Arguments: id. Answers true.
-- Raises X_JOB_NOT_FOUND, X_JOB_NOT_REMOVABLE (it is running: cancel it first).
-- Locks: the job row, then its steps. Introduced in revision 0005.
create or replace function jobs.remove(id uuid)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_job record;
begin
  select j.state, j.run_id into v_job from jobs.jobs j where j.id = remove.id for update;
  if not found then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', remove.id),
                        jsonb_build_object('id', remove.id));
  end if;
  if v_job.state = 'running' then
    perform jobs._raise('X_JOB_NOT_REMOVABLE',
                        format('job %s is running; cancel it first', remove.id),
                        jsonb_build_object('id', remove.id, 'state', v_job.state));
  end if;
  delete from jobs.jobs j where j.id = remove.id;
  -- no index leads with run_id, so asking whether another row shares the run reads the table:
  -- asked only when the run has steps to delete (since revision 0010; before, on every call)
  if exists (select 1 from jobs.steps s where s.run_id = v_job.run_id)
     and not exists (select 1 from jobs.jobs j where j.run_id = v_job.run_id) then
    delete from jobs.steps s where s.run_id = v_job.run_id;
  end if;
  return true;
end;
$$;

-- jobs.remove_many: delete jobs of one state (any but running), optionally of one queue, name
-- and tenant, at most 1,000 a call, with the steps of runs no row is left of.
-- A call's rows are in no particular order (since revision 0008; oldest first before).
-- Answers (affected, remaining). Raises X_ARGUMENT_INVALID. Locks the rows (skip locked), then
-- their steps. Introduced in revision 0005.
create or replace function jobs.remove_many(
  state text,
  queue text default null,
  name text default null,
  tenant_id text default null
)
returns jobs.bulk_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_affected integer;
  v_remaining bigint;
  v_runs uuid[];
begin
  perform jobs._bulk_check('jobs.remove_many', remove_many.state,
                           array['ready', 'delayed', 'suspended', 'done', 'failed', 'dead',
                                 'cancelled']);
  with batch as materialized (
    -- in no particular order: every row of the state goes, and since revision 0008 no index
    -- orders the table by age (a sort of the whole state came before the first row locked)
    select j.id
      from jobs.jobs j
     where j.state = remove_many.state
       and (remove_many.queue is null or j.queue = remove_many.queue)
       and (remove_many.name is null or j.name = remove_many.name)
       and (remove_many.tenant_id is null or j.tenant_id = remove_many.tenant_id)
     limit 1000
       for update skip locked
  ),
  removed as (
    delete from jobs.jobs j
     using batch b
     where j.id = b.id
    returning j.run_id
  )
  select count(*), coalesce(array_agg(distinct r.run_id), '{}')
    into v_affected, v_runs
    from removed r;

  -- as in jobs.remove: the table is read for the runs' other rows only when a run has steps
  if exists (select 1 from jobs.steps s where s.run_id = any(v_runs)) then
    delete from jobs.steps s
     where s.run_id = any(v_runs)
       and not exists (select 1 from jobs.jobs j where j.run_id = s.run_id);
  end if;

  select count(*)
    into v_remaining
    from jobs.jobs j
   where j.state = remove_many.state
     and (remove_many.queue is null or j.queue = remove_many.queue)
     and (remove_many.name is null or j.name = remove_many.name)
     and (remove_many.tenant_id is null or j.tenant_id = remove_many.tenant_id);
  return (v_affected, v_remaining)::jobs.bulk_result;
end;
$$;

-- >>> sql/functions/170_inspect.sql: queue_depth

-- jobs.queue_depth: the number an autoscaler scales workers on, per queue: the jobs running
-- plus the jobs due now (ready, delayed or suspended with run_at <= now), minus the running jobs
-- that draining workers hold (they come back as due work once handed back, and are not new
-- demand). A paused queue is left out: more workers would not drain it.
-- Arguments: queues (NULL: every queue holding live work). Answers one jobs.queue_depth_row per
-- queue with live work, ordered by queue. Locks nothing. Introduced in revision 0006; since
-- revision 0010 it reads the clock once a call, not once a row (four fifths of its time at
-- 22,000 live rows).
create or replace function jobs.queue_depth(queues text[] default null)
returns setof jobs.queue_depth_row
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  with clock as materialized (
    select jobs._now() as now
  ),
  live as (
    select j.queue,
           j.state,
           j.run_at,
           j.state = 'running'
           and exists (select 1
                         from jobs.workers w
                        where w.id = j.claimed_by
                          and w.draining_at is not null
                          and w.expires_at > (select c.now from clock c)) as held_by_draining
      from jobs.jobs j
     where j.state in ('ready', 'delayed', 'suspended', 'running')
       and (queue_depth.queues is null or j.queue = any(queue_depth.queues))
       and not exists (select 1 from jobs.queue_pauses p where p.queue = j.queue)
  ),
  counted as (
    select l.queue,
           count(*) filter (where l.state = 'running') as running,
           count(*) filter (where l.state <> 'running'
                                 and l.run_at <= (select c.now from clock c)) as due,
           count(*) filter (where l.state = 'running' and l.held_by_draining) as draining_held
      from live l
     group by l.queue
  )
  select c.queue, c.running, c.due, c.draining_held, c.running + c.due - c.draining_held
    from counted c
   order by c.queue
$$;

-- >>> sql/functions/180_storage.sql: statistics after 2,000 changes

alter table jobs.jobs set (
  autovacuum_analyze_threshold = 2000,
  autovacuum_analyze_scale_factor = 0
);

alter table jobs.steps set (
  autovacuum_analyze_threshold = 2000,
  autovacuum_analyze_scale_factor = 0
);

alter table jobs.outbox set (
  autovacuum_analyze_threshold = 2000,
  autovacuum_analyze_scale_factor = 0
);
