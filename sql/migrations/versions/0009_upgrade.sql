-- Revision 0009 up: bulk enqueue.
-- jobs.enqueue_many spent about as long on its checks and answers as on its insert. Its three
-- shape checks (objects only, known keys, no explicit null where NULL is refused) walked every
-- key of every request; one pass now says whether any would refuse, and only then do they run,
-- from jobs._check_request_shapes, to name the first culprit. A batch whose every request made
-- its own row (nothing deduped, so no id taken and no key held) is answered from the requests,
-- without the lookups a dedupe needs. A deduped request's live holder is found by a join in the
-- answering statement instead of a jobs._find_live call per request. Measured at 1,000
-- requests a call, server time: a fresh batch about 26 ms to 20 ms, a batch whose every key is
-- held about 43 ms to 17 ms.
-- jobs.requeue_many had the same per-row call: it ran jobs._find_live for every finished row of
-- the state, in two passes a call (the batch, then `remaining`), about 3.4 s a call next to
-- 200,000 finished rows. It now joins the live rows, once a call, and answers `remaining` from
-- the same pass. It also checks each row's state again under its lock: it locked its batch by id
-- alone, so a row requeued and claimed by another session since the call read it was reset to
-- ready while its worker ran it.
-- One new refusal: a JSON object or array given to enqueue_many for a text argument (name,
-- queue, idempotency_key, tenant_id, traceparent, enqueued_by) was stored as its JSON text; it
-- is X_ARGUMENT_INVALID now. Otherwise the same arguments, answers, errors and locks.
-- Schema version 9. Frozen: never edit after release; a change ships as a new revision.

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 9
$$;

-- >>> sql/functions/020_enqueue.sql: the shape checks, enqueue_many
-- jobs._check_request_shapes: refuse a jobs.enqueue_many requests array (a JSON array) whose
-- shape is wrong, naming the first culprit: an element that is not an object, then a key that is
-- not an argument of jobs.enqueue, then an explicit null where jobs.enqueue refuses NULL (never
-- read as the default), then a JSON object or array where a text argument goes (it was stored
-- as its JSON text before revision 0009). Raises X_ARGUMENT_INVALID. Locks nothing. Introduced
-- in revision 0009 (the first three checks were in jobs.enqueue_many).
create function jobs._check_request_shapes(requests jsonb)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_arguments constant text[] := array['name', 'input', 'idempotency_key', 'queue', 'tenant_id',
                                       'run_at', 'max_attempts', 'priority', 'id', 'run_id',
                                       'traceparent', 'enqueued_by'];
  v_bad_key text;
begin
  -- one pass over the array tells whether any check below would refuse it; they walk every key
  -- of every request, so they run only then, to name the culprit. The text arguments are
  -- spelled out: a subquery over a list per request cost more than the pass
  if not exists (
       select 1
         from jsonb_array_elements(requests) e
        where case
                when jsonb_typeof(e) <> 'object' then true
                else e - v_arguments <> '{}'::jsonb
                     or e -> 'queue' = 'null'::jsonb
                     or e -> 'max_attempts' = 'null'::jsonb
                     or e -> 'priority' = 'null'::jsonb
                     or jsonb_typeof(e -> 'name') in ('object', 'array')
                     or jsonb_typeof(e -> 'queue') in ('object', 'array')
                     or jsonb_typeof(e -> 'idempotency_key') in ('object', 'array')
                     or jsonb_typeof(e -> 'tenant_id') in ('object', 'array')
                     or jsonb_typeof(e -> 'traceparent') in ('object', 'array')
                     or jsonb_typeof(e -> 'enqueued_by') in ('object', 'array')
              end) then
    return;
  end if;

  if exists (select 1 from jsonb_array_elements(requests) e where jsonb_typeof(e) <> 'object') then
    perform jobs._invalid('jobs.enqueue_many', 'requests', 'must hold JSON objects only');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_object_keys(e.item) as k(key)
   where k.key <> all(v_arguments)
   order by e.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key, 'is not an argument of jobs.enqueue');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_each(e.item) as k(key, value)
   where k.key in ('queue', 'max_attempts', 'priority')
     and jsonb_typeof(k.value) = 'null'
   order by e.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key,
                          'must not be null (leave it out for the default)');
  end if;
  select format('requests[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(requests) with ordinality as e(item, ord),
         jsonb_each(e.item) as k(key, value)
   where k.key in ('name', 'queue', 'idempotency_key', 'tenant_id', 'traceparent', 'enqueued_by')
     and jsonb_typeof(k.value) in ('object', 'array')
   order by e.ord
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.enqueue_many', v_bad_key,
                          'must be a string, not a JSON object or array');
  end if;
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
        left join jobs.jobs by_id on r.id_supplied and ins.id is null and by_id.id = r.id
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
    join jobs.jobs j on r.id_supplied and j.id = r.id
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

-- >>> sql/functions/130_operator.sql: requeue_many
-- jobs.requeue_many: requeue finished jobs of one state (done, failed, dead, cancelled),
-- optionally of one queue, name and tenant, at most 1,000 a call. A row whose key a live job
-- holds stays; of several finished rows sharing a key, the oldest is requeued. Keeps each run,
-- so completed steps replay.
-- Answers (affected, remaining): remaining counts the rows a next call could still move, as of
-- the call's snapshot.
-- Raises X_ARGUMENT_INVALID. Locks the rows it moves (skip locked). Wakes their queues.
-- Introduced in revision 0005; since revision 0009 it finds the movable rows once a call, with
-- a join to the live rows instead of a jobs._find_live call per finished row (about 1.7 s a
-- pass next to 200,000 finished rows, and a call made two passes), and checks each row's state
-- again under its lock (before, a row claimed since the call read it was reset to ready).
create or replace function jobs.requeue_many(
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
  v_now timestamptz := jobs._now();
  v_movable bigint;
  v_affected integer;
  v_queues text[];
  v_queue text;
begin
  perform jobs._bulk_check('jobs.requeue_many', requeue_many.state,
                           array['done', 'failed', 'dead', 'cancelled']);
  with movable as materialized (
    -- of several finished rows sharing a key, the oldest; none whose key a live job holds
    select distinct on (j.name, coalesce(j.tenant_id, ''), j.idempotency_key) j.id
      from jobs.jobs j
     where j.state = requeue_many.state
       and (requeue_many.queue is null or j.queue = requeue_many.queue)
       and (requeue_many.name is null or j.name = requeue_many.name)
       and (requeue_many.tenant_id is null or j.tenant_id = requeue_many.tenant_id)
       and not exists (
             select 1
               from jobs.jobs live
              where live.name = j.name
                and coalesce(live.tenant_id, '') = coalesce(j.tenant_id, '')
                and live.idempotency_key = j.idempotency_key
                and live.state in ('ready', 'delayed', 'running', 'suspended'))
     order by j.name, coalesce(j.tenant_id, ''), j.idempotency_key, j.created_at, j.id
  ),
  batch as materialized (
    -- the state again, under the lock: a row another session moved on since `movable` was read
    -- (requeued and claimed, say) is read anew here, and a lock by id alone would take it
    select j.id
      from jobs.jobs j
      join movable m on m.id = j.id
     where j.state = requeue_many.state
     order by j.created_at, j.id
     limit 1000
       for update of j skip locked
  ),
  moved as (
    update jobs.jobs j
       set state = 'ready', run_at = v_now, attempt = 0, last_error = null,
           last_error_code = null, last_error_stack = null, lease_expires_at = null,
           finished_at = null, updated_at = v_now
      from batch b
     where j.id = b.id
    returning j.queue
  )
  select (select count(*) from movable), count(*), coalesce(array_agg(distinct m.queue), '{}')
    into v_movable, v_affected, v_queues
    from moved m;

  foreach v_queue in array v_queues loop
    perform pg_notify('jobs_wake', v_queue);
  end loop;

  -- each moved row was its key's only movable row, and its key is live now
  return (v_affected, v_movable - v_affected)::jobs.bulk_result;
end;
$$;
