-- Revision 0011 down: remove jobs.purge, its result type, jobs._run_stands,
-- jobs._outbox_awaits, jobs.worker_running_v1 and the indexes jobs_done_idx, jobs_ended_idx and
-- jobs_run_shared_idx; put back the jobs.enqueue of revision 0001, the jobs.enqueue_many,
-- jobs.outbox_stage, jobs.remove and jobs.remove_many of revision 0010 (a run_id not given is a
-- random uuid again; the rows made meanwhile keep their run ids, their own ids), and go back to
-- schema version 10. Nothing stored is touched.

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 10
$$;

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
      coalesce(enqueue.id, jobs._uuid_v7()), enqueue.name, enqueue.queue, enqueue.input,
      enqueue.idempotency_key, enqueue.tenant_id, coalesce(enqueue.run_id, gen_random_uuid()),
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

drop function jobs.worker_running_v1(text);
drop function jobs.purge(interval, interval, interval, integer);
drop type jobs.purge_result;
drop function jobs._run_stands(uuid);
drop function jobs._outbox_awaits(uuid);
drop index jobs.jobs_run_shared_idx;
drop index jobs.jobs_ended_idx;
drop index jobs.jobs_done_idx;
