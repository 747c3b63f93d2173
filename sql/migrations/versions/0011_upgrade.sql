-- Revision 0011 up: retention. jobs.purge deletes, a bounded batch a call, what has outlived its
-- window: done jobs after 14 days, failed, dead and cancelled jobs after 90 (from finished_at),
-- the steps of runs whose last row went, outbox rows published more than 7 days ago, and
-- expired events. Before, every table kept its history until an operator removed it by hand,
-- and the events table only grew. Two partial indexes order the finished rows by age, one per
-- window (an ack adds one index entry). A job enqueued without a run_id now has its own id as
-- run_id (jobs.enqueue, jobs.enqueue_many and jobs.outbox_stage are re-created for it; a random
-- uuid before), and jobs_run_shared_idx holds the jobs that continue another's run, so whether a
-- run still has a row is two index probes instead of a read of the table (jobs._run_stands, which
-- jobs.remove and jobs.remove_many, re-created, use too). Also jobs.worker_running_v1: the rows a
-- worker holds running, which a worker whose claim a cancel cut gives back. Schema version 11.
-- Frozen: never edit after release; a change ships as a new revision.

-- jobs.version: the installed schema version; the Python package refuses an older one.
-- Answers an integer. Raises nothing. Introduced in revision 0001; since then it answers the
-- number of the newest revision installed (11 since revision 0011).
create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 11
$$;

-- >>> sql/functions/020_enqueue.sql: enqueue

-- jobs.enqueue: put one job on the queue.
-- Arguments: name, input (a JSON object), idempotency_key; optional queue ('default'),
-- tenant_id, run_at (now), max_attempts (20), priority (0, lower runs first), id (the job's id,
-- e.g. an outbox row's), run_id (keeps a resumed run's step history), on_conflict ('dedupe' or
-- 'error'), traceparent, enqueued_by.
-- Answers (id, run_id, deduped): the new job's ids, or with deduped = true the ids of the live job
-- holding (name, tenant_id, idempotency_key), or of the row that already has the given id, live
-- or finished. A run_at more than now makes the row 'delayed', else 'ready'.
-- Raises X_ARGUMENT_INVALID, X_JOB_INPUT_INVALID, X_IDEMPOTENCY_REQUIRED; X_JOB_DUPLICATE under
-- on_conflict => 'error' (detail.reason 'key_held' or 'id_exists'), and always when the given id
-- already names a different job (name, tenant or key differ: 'id_taken'); X_DRIVER_UNAVAILABLE
-- when two inserts conflict and no row explains why (the unique index is missing).
-- A run_id not given is the job's own id (since revision 0011; a random uuid before), so only a
-- job that continues another's run is in jobs_run_shared_idx.
-- Locks: the unique indexes. Introduced in revision 0001.
create or replace function jobs.enqueue(
  name text,
  input jsonb,
  idempotency_key text,
  queue text default 'default',
  tenant_id text default null,
  run_at timestamptz default null,
  max_attempts integer default 20,
  priority integer default 0,
  id uuid default null,
  run_id uuid default null,
  on_conflict text default 'dedupe',
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
  v_run_at timestamptz := coalesce(enqueue.run_at, jobs._now());
  v_id uuid := coalesce(enqueue.id, jobs._uuid_v7());
  v_result jobs.enqueue_result;
  v_by_id record;
begin
  perform jobs._check_enqueue('jobs.enqueue', '', enqueue.name, enqueue.input,
                              enqueue.idempotency_key, enqueue.queue, enqueue.tenant_id,
                              v_run_at, enqueue.max_attempts, enqueue.priority);
  perform jobs._check_on_conflict('jobs.enqueue', enqueue.on_conflict);

  -- two tries at most: the live holder may finish between the conflict and the lookup
  for v_try in 1..2 loop
    -- no conflict target: a taken id (primary key) and a live key (partial unique index) both
    -- insert nothing, and the lookups below tell which
    insert into jobs.jobs as j (
      id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority,
      max_attempts, run_at, created_at, updated_at, traceparent, enqueued_by)
    values (
      v_id, enqueue.name, enqueue.queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, v_id),
      case when v_run_at > v_now then 'delayed' else 'ready' end, enqueue.priority,
      enqueue.max_attempts, v_run_at, v_now, v_now, enqueue.traceparent, enqueue.enqueued_by)
    on conflict do nothing
    returning j.id, j.run_id, false
      into v_result;

    if v_result.id is not null then
      if v_run_at <= v_now + interval '1 second' then
        perform jobs._announce(enqueue.queue, v_now);
      end if;
      return v_result;
    end if;

    if enqueue.id is not null then
      select j.id, j.run_id, j.name, j.tenant_id, j.idempotency_key
        into v_by_id
        from jobs.jobs j
       where j.id = enqueue.id;
      if found then
        -- the same job published again (an outbox relay after a crash) answers the row it
        -- made, live or finished; an id naming a different job is never reused
        if v_by_id.name <> enqueue.name
           or coalesce(v_by_id.tenant_id, '') <> coalesce(enqueue.tenant_id, '')
           or v_by_id.idempotency_key <> enqueue.idempotency_key then
          perform jobs._raise(
            'X_JOB_DUPLICATE',
            format('id %s already names job %s with idempotency key %s; an id is never reused',
                   enqueue.id, v_by_id.name, v_by_id.idempotency_key),
            jsonb_build_object('reason', 'id_taken', 'existing_id', enqueue.id,
                               'job', enqueue.name, 'idempotency_key', enqueue.idempotency_key),
            'pass a fresh id, or none and one is made');
        end if;
        if enqueue.on_conflict = 'error' then
          perform jobs._raise(
            'X_JOB_DUPLICATE',
            format('job %s already exists', enqueue.id),
            jsonb_build_object('reason', 'id_exists', 'existing_id', enqueue.id,
                               'job', enqueue.name, 'idempotency_key', enqueue.idempotency_key));
        end if;
        return (v_by_id.id, v_by_id.run_id, true)::jobs.enqueue_result;
      end if;
    end if;

    v_result := jobs._find_live(enqueue.name, enqueue.tenant_id, enqueue.idempotency_key);
    if v_result.id is not null then
      if enqueue.on_conflict = 'error' then
        perform jobs._raise(
          'X_JOB_DUPLICATE',
          format('job %s with idempotency key %s is already held by live job %s',
                 enqueue.name, enqueue.idempotency_key, v_result.id),
          jsonb_build_object('reason', 'key_held', 'job', enqueue.name,
                             'idempotency_key', enqueue.idempotency_key,
                             'tenant_id', enqueue.tenant_id, 'existing_id', v_result.id));
      end if;
      return v_result;
    end if;
  end loop;

  perform jobs._raise(
    'X_DRIVER_UNAVAILABLE',
    format('enqueue of %s was rejected but no live row holds its idempotency key', enqueue.name),
    jsonb_build_object('job', enqueue.name, 'idempotency_key', enqueue.idempotency_key));
  return null;
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
-- checks, and a call per deduped request, had cost about as much as the insert); since
-- revision 0011 a run_id not given is the job's own id, as in jobs.enqueue.
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
              coalesce(x.run_id, x.id, v_new_ids[x.ord]),
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

-- >>> sql/functions/100_outbox.sql: outbox_stage

-- jobs.outbox_stage: stage one job in the caller's transaction; it commits or rolls back with
-- the caller's business rows, and a relay publishes it after commit.
-- Arguments: those of jobs.enqueue but id and on_conflict (the staged row's id becomes the
-- job's id; a live holder of the key is found at publish).
-- Answers (id, run_id, false): the ids the job will have. Raises what jobs.enqueue's argument
-- checks raise. Locks nothing but the new row. Introduced in revision 0002; since revision
-- 0011 a run_id not given is the row's (the job's) own id, as in jobs.enqueue.
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
  v_run_id uuid := coalesce(outbox_stage.run_id, v_id);
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

-- >>> sql/functions/190_purge.sql

-- 190_purge: retention. What has outlived its window is deleted a bounded batch a call, so the
-- tables stop growing with history: finished jobs, the steps of runs no row is left of,
-- published outbox rows and expired events.
--
-- Tables: jobs.jobs, jobs.steps, jobs.outbox, jobs.events (delete). Also here: how a run's rows
-- are found (jobs_run_shared_idx, jobs._run_stands, used by jobs.remove and jobs.remove_many
-- too); the default run_id of jobs.enqueue, jobs.enqueue_many and jobs.outbox_stage is the
-- job's own id, which keeps that index small (the functions themselves stay in their files). Lock order: job rows (skip
-- locked), then their runs' steps, then outbox rows (skip locked), then events (skip locked).
-- Calls are serialised by a transaction-scoped advisory lock: two purges splitting one run
-- between them would each see the other's row still standing and leave the run's steps behind.
-- One clock reading a call (jobs._now()).
-- Introduced in revision 0011.

-- the finished rows by age, one index per window: with one index for both, every call would walk
-- the whole band of failed and dead rows kept for 90 days before reaching the done rows that
-- came of age. A finished row is in exactly one of them, so an ack adds one index entry.
create index jobs_done_idx
  on jobs.jobs (finished_at)
  where state = 'done';

create index jobs_ended_idx
  on jobs.jobs (finished_at)
  where state in ('failed', 'dead', 'cancelled');

-- the jobs that continue another job's run. A job enqueued without a run_id has its own id as
-- run_id (since this revision), so a run's rows are the row whose id is the run's plus the rows
-- of this index: whether a run has a row left is two index probes, not a read of the table. A
-- new job enters it only when enqueued with another's run_id; rows made before this revision
-- (a random run_id each) are all in it until they are deleted.
create index jobs_run_shared_idx
  on jobs.jobs (run_id)
  where run_id <> id;

-- jobs._run_stands: whether a job row of the run is left: the row whose id is the run's (a job
-- enqueued without a run_id), or one continuing the run (jobs_run_shared_idx, its predicate
-- spelled out so the planner can prove it). Two index probes.
-- Answers boolean. Raises nothing. Locks nothing. Introduced in revision 0011.
create function jobs._run_stands(run_id uuid)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select exists (
           select 1 from jobs.jobs j where j.id = _run_stands.run_id and j.run_id = j.id
         )
      or exists (
           select 1 from jobs.jobs j where j.run_id = _run_stands.run_id and j.run_id <> j.id
         )
$$;

-- jobs._outbox_awaits: whether an unpublished outbox row of this database names the job id: its
-- relay published it and stopped before marking the row, so the row will be published again,
-- and the job must stay to meet that publish (jobs.enqueue dedupes on the id) or it runs twice.
-- A primary key probe. Answers boolean. Raises nothing. Locks nothing. Introduced in revision
-- 0011.
create function jobs._outbox_awaits(id uuid)
returns boolean
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select exists (
    select 1 from jobs.outbox o where o.id = _outbox_awaits.id and o.published_at is null
  )
$$;

create type jobs.purge_result as (
  jobs integer,
  steps integer,
  outbox integer,
  events integer
);

-- jobs.purge: delete, a batch each, done jobs finished more than done_after ago; failed, dead
-- and cancelled jobs finished more than ended_after ago; the steps of the runs whose last row
-- went; outbox rows published more than published_after ago; events past their expiry.
-- Never a live job (ready, delayed, running, suspended), never an unpublished outbox row, and
-- never a finished job that an unpublished outbox row of this database names (its relay
-- published it and stopped before marking the row: the job must stay to meet the next publish,
-- or it would run again).
-- Arguments: done_after (default 14 days), ended_after (90 days), published_after (7 days),
-- batch_size (1..10000, default 1000: at most that many jobs of each window, outbox rows and
-- events a call). Answers (jobs, steps, outbox, events) deleted; call again until all are 0.
-- Raises X_ARGUMENT_INVALID. Locks: see the file's head. Introduced in revision 0011.
create function jobs.purge(
  done_after interval default interval '14 days',
  ended_after interval default interval '90 days',
  published_after interval default interval '7 days',
  batch_size integer default 1000
)
returns jobs.purge_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_jobs integer;
  v_steps integer := 0;
  v_outbox integer;
  v_events integer;
  v_runs uuid[];
begin
  if done_after is null or done_after < interval '0' then
    perform jobs._invalid('jobs.purge', 'done_after', 'must be an interval of 0 or more');
  end if;
  if ended_after is null or ended_after < interval '0' then
    perform jobs._invalid('jobs.purge', 'ended_after', 'must be an interval of 0 or more');
  end if;
  if published_after is null or published_after < interval '0' then
    perform jobs._invalid('jobs.purge', 'published_after', 'must be an interval of 0 or more');
  end if;
  if batch_size is null or batch_size < 1 or batch_size > 10000 then
    perform jobs._invalid('jobs.purge', 'batch_size', 'must be between 1 and 10000');
  end if;

  perform pg_advisory_xact_lock(hashtext('jobs.purge'));

  -- each window in its own subquery, so each walks its own partial index oldest first
  with batch as materialized (
    select d.id
      from (select j.id
              from jobs.jobs j
             where j.state = 'done'
               and j.finished_at < v_now - purge.done_after
               and not jobs._outbox_awaits(j.id)
             order by j.finished_at
             limit purge.batch_size
               for update skip locked) d
    union all
    select e.id
      from (select j.id
              from jobs.jobs j
             where j.state in ('failed', 'dead', 'cancelled')
               and j.finished_at < v_now - purge.ended_after
               and not jobs._outbox_awaits(j.id)
             order by j.finished_at
             limit purge.batch_size
               for update skip locked) e
  ),
  removed as (
    delete from jobs.jobs j
     using batch b
     where j.id = b.id
    returning j.run_id
  )
  select count(*), coalesce(array_agg(distinct r.run_id), '{}')
    into v_jobs, v_runs
    from removed r;

  with gone as (
    delete from jobs.steps s
     where s.run_id = any(v_runs)
       and not jobs._run_stands(s.run_id)
    returning 1
  )
  select count(*) into v_steps from gone;

  -- no index orders either table by age: the scan stops at the batch's last row, and both are
  -- written in about the order they age in
  with gone as (
    delete from jobs.outbox o
     where o.id in (
       select p.id
         from jobs.outbox p
        where p.published_at < v_now - purge.published_after
        limit purge.batch_size
          for update skip locked
     )
    returning 1
  )
  select count(*) into v_outbox from gone;

  with gone as (
    delete from jobs.events e
     where e.id in (
       select x.id
         from jobs.events x
        where x.expires_at <= v_now
        limit purge.batch_size
          for update skip locked
     )
    returning 1
  )
  select count(*) into v_events from gone;

  return (v_jobs, v_steps, v_outbox, v_events)::jobs.purge_result;
end;
$$;

-- >>> sql/functions/130_operator.sql: remove

-- jobs.remove: delete a job that is not running, and its run's steps once no row of the run
-- is left. Arguments: id. Answers true.
-- Raises X_JOB_NOT_FOUND, X_JOB_NOT_REMOVABLE (it is running: cancel it first).
-- Locks: the job row, then its steps. Introduced in revision 0005; since revision 0011 whether
-- a row of the run is left is two index probes (jobs._run_stands), not a read of the table.
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
  if not jobs._run_stands(v_job.run_id) then
    delete from jobs.steps s where s.run_id = v_job.run_id;
  end if;
  return true;
end;
$$;

-- >>> sql/functions/130_operator.sql: remove_many

-- jobs.remove_many: delete jobs of one state (any but running), optionally of one queue, name
-- and tenant, at most 1,000 a call, with the steps of runs no row is left of.
-- A call's rows are in no particular order (since revision 0008; oldest first before).
-- Answers (affected, remaining). Raises X_ARGUMENT_INVALID. Locks the rows (skip locked), then
-- their steps. Introduced in revision 0005; since revision 0011 a run's remaining rows are two
-- index probes a run (jobs._run_stands), not a read of the table.
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

  delete from jobs.steps s
   where s.run_id = any(v_runs)
     and not jobs._run_stands(s.run_id);

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

-- >>> sql/functions/030_claim.sql: worker_running_v1

-- jobs.worker_running_v1: the rows worker_id holds running, with their claim tokens. A worker
-- whose wait for a claim was cut by a cancel asks it before it stops: the claim may have
-- committed while its answer was thrown away, and the rows it does not know it holds go back
-- uncounted (jobs.nack_v1, fenced on these tokens) instead of lapsing as counted attempts.
-- Reads the running rows only (jobs_lease_idx). Answers (id, claim), in no particular order.
-- Raises X_ARGUMENT_INVALID for a NULL or blank worker_id. Locks nothing. Introduced in
-- revision 0011.
create function jobs.worker_running_v1(worker_id text)
returns table (id uuid, claim bigint)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.worker_running_v1', 'worker_id', 'must name the worker');
  end if;
  return query
    select j.id, j.claims
      from jobs.jobs j
     where j.state = 'running'
       and j.claimed_by = worker_running_v1.worker_id;
end;
$$;
