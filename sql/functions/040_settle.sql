-- 040_settle: end or renew an attempt: ack, nack, heartbeat and their batch forms.
--
-- Tables: jobs.jobs_live (update; a settle that ends the row moves it to jobs.jobs_history in the
-- same statement), jobs.counter_buckets (every ack and counted nack adds to its job name's
-- counters in the settling statement). Locks: the settled row, and the settling backend's own
-- counter shard.
-- Fence: every call matches only a row that is still 'running' under the caller's worker id AND
-- claim token. 'running' lets a cancel stick (the cancelled body's ack matches nothing); the
-- token stops a body whose lease lapsed from settling the attempt that replaced it, even one
-- claimed again by the same worker id. A miss answers false; it never raises.
-- Plans: each public function here finds its rows by primary key whatever the statistics say.
-- Sequential scans are off for them: a plan kept from a moment the table was a page or two reads
-- all of it on every call once a backlog fills it (until an analyze), and with them off a
-- statement that must read a small table whole costs past the JIT threshold, so JIT is off too.

create type jobs.settle_result as (
  id uuid,
  landed boolean
);

-- jobs._check_fence: refuse a settle call missing its fence.
-- Raises X_ARGUMENT_INVALID. Locks nothing.
create function jobs._check_fence(function_name text, id uuid, worker_id text, claim bigint)
returns void
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if id is null then
    perform jobs._invalid(function_name, 'id', 'must be a job id');
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label(function_name, 'worker_id', worker_id);
  end if;
  if claim is null then
    perform jobs._invalid(function_name, 'claim', 'must be the claim token jobs.claim_v1 answered');
  end if;
end;
$$;

-- jobs.ack_v1: mark a claimed job done.
-- Arguments: id, worker_id, claim (the token from jobs.claim_v1).
-- Answers whether it landed (false: the attempt no longer owns the row).
-- Raises X_ARGUMENT_INVALID. Locks the row.
create function jobs.ack_v1(id uuid, worker_id text, claim bigint)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set jit = off
as $$
declare
  v_landed bigint;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.ack_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.ack_v1');
  end if;
  perform jobs._check_fence('jobs.ack_v1', ack_v1.id, ack_v1.worker_id, ack_v1.claim);
  select count(*)
    into v_landed
    from jobs._ack_rows(ack_v1.worker_id, array[ack_v1.id], array[ack_v1.claim], null) a
   where a.landed;
  return v_landed > 0;
end;
$$;

-- jobs._ack_rows: ack claimed rows of one worker in one statement, each fenced on its claim,
-- storing each row's result (results NULL, or shorter than ids: NULL results). The statement
-- moves the rows to history, counts them, and wakes the parents waiting for them (030 of
-- 230_children); the caller checked the arguments. Answers (id, landed) per id, in input order.
-- Locks (deletes) the rows this worker holds under those claims, in id order, read by primary
-- key, then their parents.
create function jobs._ack_rows(worker_id text, ids uuid[], claims bigint[], results jsonb[])
returns setof jobs.settle_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
-- a bitmap scan would visit the rows in the order they lie on disk, not in id order
set enable_bitmapscan = off
set jit = off
as $$
declare
  v_now timestamptz := jobs._now();
begin
  return query
    with requested as (
      select r.id, r.claim, r.result, r.ord
        from unnest(ids, claims, results) with ordinality as r(id, claim, result, ord)
       -- results shorter than ids pads them, never the other way
       where r.ord <= cardinality(ids)
    ),
    -- the rows by primary key, in id order (the index scan's order of the sorted ids: one lock
    -- order for every caller), each judged as the delete reaches it, and again on the row's
    -- newest version if another transaction changed it meanwhile. Not a join to `requested`:
    -- the planner could then read every live row through a partial index whose statistics
    -- say no row is running. No index holds the claim: the fence is a hashed lookup of
    -- (id, claim), which `is true` keeps a filter rather than a join
    gone as (
      delete from jobs.jobs_live j
       where j.id = any(ids)
         and j.state = 'running'
         and j.claimed_by = _ack_rows.worker_id
         and ((j.id, j.claims) in (select q.id, q.claim from requested q)) is true
      returning j.id, j.name, j.queue, j.input, j.idempotency_key, j.tenant_id, j.run_id,
                j.priority, j.attempt, j.max_attempts, j.run_at, j.created_at, j.claimed_by,
                j.claimed_at, j.claims, j.last_error, j.last_error_code, j.last_error_stack,
                j.progress, j.traceparent, j.enqueued_by, j.concurrency_key, j.capped,
                j.parent_id
    ),
    -- what jobs._ended makes of each row, spelled out: a call of it per row costs a third of
    -- the ack. A batch without results joins nothing (the right side is empty)
    settled as (
      insert into jobs.jobs_history_done as h (
        id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
        max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
        lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
        traceparent, enqueued_by, concurrency_key, capped, result, parent_id)
      select g.id, g.name, g.queue, g.input, g.idempotency_key, g.tenant_id, g.run_id, 'done',
             g.priority, g.attempt, g.max_attempts, g.run_at, g.created_at, v_now, v_now,
             g.claimed_by, g.claimed_at, null, g.claims, g.last_error, g.last_error_code,
             g.last_error_stack, g.progress, g.traceparent, g.enqueued_by, g.concurrency_key,
             g.capped, q.result, g.parent_id
        from gone g
        -- one result an id: an id named twice is acked once, as jobs.ack_many_v1 acks it
        left join (select distinct on (r.id) r.id, r.result
                     from requested r
                    where results is not null
                    order by r.id, r.ord) q
          on q.id = g.id
      returning h.id, h.claims, h.name, h.claimed_at, h.parent_id
    ),
    -- the counters and the waiting parents move in this statement, so neither can disagree
    -- with the rows; jobs._wake_parents is told which children just left, so it need not see
    -- this statement's own deletes
    counted as (
      select jobs._count_settled(v_now, array_agg(s.name), array_agg('done'::text),
                                 array_agg(s.claimed_at)) as rows,
             case when bool_or(s.parent_id is not null) then
               jobs._wake_parents(array_agg(s.id) filter (where s.parent_id is not null),
                                  array_agg(s.parent_id) filter (where s.parent_id is not null))
             end as woken
        from settled s
    )
    select r.id, s.id is not null
      from requested r
      cross join counted
      left join settled s on s.id = r.id and s.claims = r.claim
     order by r.ord;
  -- one notice a statement, whatever it settled: an awaiting caller reads its jobs again
  perform jobs._settled();
end;
$$;

-- jobs._check_ack_many: refuse a batch ack's malformed arguments. Raises X_ARGUMENT_INVALID.
-- Locks nothing.
create function jobs._check_ack_many(
  function_name text,
  worker_id text,
  ids uuid[],
  claims bigint[]
)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label(function_name, 'worker_id', worker_id);
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or coalesce(array_ndims(ids), 1) <> 1 or coalesce(array_ndims(claims), 1) <> 1 then
    perform jobs._invalid(function_name, 'ids, claims',
                          'must be one-dimensional arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid(function_name, 'ids, claims', 'must not contain NULL');
  end if;
end;
$$;

-- jobs.ack_many_v1: ack many claimed jobs of one worker in one statement, storing no results.
-- Arguments: worker_id, ids and claims (parallel arrays of equal length).
-- Answers (id, landed) per id, in input order. Raises X_ARGUMENT_INVALID. Locks the rows this
-- worker holds under those claims, in id order, each read by primary key; then the parents
-- of those that are children, to wake them.
create function jobs.ack_many_v1(worker_id text, ids uuid[], claims bigint[])
returns setof jobs.settle_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set jit = off
as $$
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.ack_many_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.ack_many_v1');
  end if;
  perform jobs._check_ack_many('jobs.ack_many_v1', worker_id, ids, claims);
  return query
    select a.id, a.landed from jobs._ack_rows(worker_id, ids, claims, null) a;
end;
$$;

-- jobs.ack_results_v1: ack many claimed jobs of one worker in one statement, storing what
-- each body returned.
-- Arguments: worker_id, ids, claims and results (parallel arrays of equal length; a NULL
-- result stores none). A result larger than the 'step_output' size limit fails its row instead
-- (state 'failed', X_JOB_RESULT_INVALID), which counts as landed: the attempt ended.
-- Answers (id, landed) per id, in input order. Raises X_ARGUMENT_INVALID. Locks as
-- jobs.ack_many_v1.
create function jobs.ack_results_v1(
  worker_id text,
  ids uuid[],
  claims bigint[],
  results jsonb[]
)
returns setof jobs.settle_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set jit = off
as $$
declare
  v_limit integer;
  v_oversize integer[];
  v_ord integer;
  v_failed jsonb := '{}';
begin
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.ack_results_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.ack_results_v1');
  end if;
  perform jobs._check_ack_many('jobs.ack_results_v1', worker_id, ids, claims);
  if results is null or cardinality(results) <> cardinality(ids)
     or coalesce(array_ndims(results), 1) <> 1 then
    perform jobs._invalid('jobs.ack_results_v1', 'results',
                          'must be a one-dimensional array as long as ids');
  end if;

  -- an oversized result ends its row as a failure the body cannot retry away
  select array_agg(r.ord)
    into v_oversize
    from unnest(results) with ordinality as r(result, ord)
   where pg_column_size(r.result) > 1024
     and jobs._json_bytes(r.result) > jobs._max_bytes('step_output');
  if v_oversize is not null then
    v_limit := jobs._max_bytes('step_output');
    foreach v_ord in array v_oversize loop
      v_failed := v_failed || jsonb_build_object(
        ids[v_ord]::text,
        jobs.nack_v1(
          ids[v_ord], worker_id, claims[v_ord], 'failed',
          error => format('X_JOB_RESULT_INVALID: the result is %s bytes, over the step_output '
                          'limit of %s', jobs._json_bytes(results[v_ord]), v_limit),
          error_code => 'X_JOB_RESULT_INVALID'));
      results[v_ord] := null;
      claims[v_ord] := -1;  -- the row is no longer running under its claim: nothing to ack
    end loop;
  end if;

  return query
    select a.id, coalesce((v_failed ->> a.id::text)::boolean, a.landed)
      from jobs._ack_rows(worker_id, ids, claims, results) a;
end;
$$;

-- jobs.nack_v1: end a claimed attempt without success.
-- Arguments: id, worker_id, claim; next_state, the one decision on where the row goes:
-- 'ready' (retry after delay; also a shed), 'suspended' (a park: a sleep, or a job this deploy
-- cannot run, due after delay), 'dead' (dead-lettered) or 'failed' (terminal, not
-- dead-lettered); delay (0, at most 100 years); counts_as_attempt (true; false gives the claim's
-- attempt back, for a shed, a park or an interrupted attempt); error, error_code, error_stack
-- (written only when error is given: a shed writes nothing). A counted 'ready' on the final
-- attempt (attempt >= max_attempts) ends 'dead' instead: the row never runs past its budget.
-- Answers whether it landed. Raises X_ARGUMENT_INVALID. Locks the row.
create function jobs.nack_v1(
  id uuid,
  worker_id text,
  claim bigint,
  next_state text default 'ready',
  delay interval default interval '0',
  counts_as_attempt boolean default true,
  error text default null,
  error_code text default null,
  error_stack text default null
)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set jit = off
as $$
declare
  v_now timestamptz := jobs._now();
  v_held record;
  v_state text;
  v_counted integer;
  v_landed bigint;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.nack_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.nack_v1');
  end if;
  perform jobs._check_fence('jobs.nack_v1', nack_v1.id, nack_v1.worker_id, nack_v1.claim);
  if next_state is null or next_state not in ('ready', 'suspended', 'dead', 'failed') then
    perform jobs._invalid('jobs.nack_v1', 'next_state',
                          'must be one of ''ready'', ''suspended'', ''dead'', ''failed''');
  end if;
  if delay is null or delay < interval '0' or delay > interval '100 years' then
    perform jobs._invalid('jobs.nack_v1', 'delay', 'must be an interval from 0 to 100 years');
  end if;
  if counts_as_attempt is null then
    perform jobs._invalid('jobs.nack_v1', 'counts_as_attempt', 'must be true or false');
  end if;
  -- a failure report is cut to the limit, never refused: a refused nack would leave the attempt
  -- running until its lease lapsed. No limit is under 1 KiB, so a short report reads none
  if octet_length(nack_v1.error) > 1024 or octet_length(nack_v1.error_stack) > 1024 then
    nack_v1.error := jobs._cut(nack_v1.error, jobs._max_bytes('error_text'));
    nack_v1.error_stack := jobs._cut(nack_v1.error_stack, jobs._max_bytes('error_text'));
  end if;
  if length(nack_v1.error_code) > 200 then
    nack_v1.error_code := left(nack_v1.error_code, 200);
  end if;

  select j.attempt, j.max_attempts, j.parent_id
    into v_held
    from jobs.jobs_live j
   where j.id = nack_v1.id
     and j.state = 'running'
     and j.claimed_by = nack_v1.worker_id
     and j.claims = nack_v1.claim
     for update;
  if not found then
    return false;
  end if;
  -- the budget holds whatever the caller decided: a counted retry of the final attempt is the
  -- exhausted case, and it dead-letters rather than run past max_attempts
  v_state := case when nack_v1.next_state = 'ready' and nack_v1.counts_as_attempt
                       and v_held.attempt >= v_held.max_attempts then 'dead'
                  else nack_v1.next_state end;

  if v_state in ('dead', 'failed') then
    -- the row ends: it moves to history
    with gone as (
      delete from jobs.jobs_live j
       where j.id = nack_v1.id
      returning j
    ),
    settled as (
      insert into jobs.jobs_history as h
      select e.*
        from gone g
       cross join lateral jobs._ended(g.j, v_state, v_now, nack_v1.error, nack_v1.error_code,
                                      nack_v1.error_stack,
                                      give_back_attempt => not nack_v1.counts_as_attempt) e
      returning h.name, h.claimed_at
    )
    select jobs._count_settled(v_now, array_agg(s.name), array_agg(v_state),
                               array_agg(s.claimed_at))
      into v_counted
      from settled s;
    -- jobs.nack_many_v1 wakes the parents of all its rows at its end, in id order
    if v_held.parent_id is not null
       and coalesce(current_setting('durajobs.wake_later', true), '') <> 'on' then
      perform jobs._wake_parents(array[nack_v1.id], array[v_held.parent_id]);
    end if;
    perform jobs._settled();
    return true;
  end if;

  with settled as (
    update jobs.jobs_live j
       set state = v_state,
           run_at = v_now + nack_v1.delay,
           -- an uncounted attempt gives the claim's increment back, never below zero
           attempt = case when nack_v1.counts_as_attempt then j.attempt
                          else greatest(j.attempt - 1, 0) end,
           last_error = case when nack_v1.error is null then j.last_error else nack_v1.error end,
           last_error_code = case when nack_v1.error is null then j.last_error_code
                                  else nack_v1.error_code end,
           last_error_stack = case when nack_v1.error is null then j.last_error_stack
                                   else nack_v1.error_stack end,
           lease_expires_at = null,
           updated_at = v_now
     where j.id = nack_v1.id
    returning j.name, j.claimed_at
  ),
  -- a shed, a park and an interrupted attempt add nothing to the counters; a counted retry does
  counted as (
    select jobs._count_settled(v_now, array_agg(s.name), array_agg('retried'::text),
                               array_agg(s.claimed_at))
      from settled s
     where v_state = 'ready' and nack_v1.counts_as_attempt
  )
  select count(*) into v_landed from settled, counted;
  return v_landed > 0;
end;
$$;

-- jobs.nack_many_v1: nack many claimed jobs of one worker in one call.
-- Arguments: worker_id; nacks, a JSON array of objects with the keys of jobs.nack_v1
-- (id and claim required; next_state, delay as interval text such as '5 seconds' or 'PT5S',
-- counts_as_attempt, error, error_code, error_stack optional).
-- Answers (id, landed) per element, in input order. Raises X_ARGUMENT_INVALID (an unknown key
-- names its element; a value of the wrong type names the value). Locks the rows.
create function jobs.nack_many_v1(worker_id text, nacks jsonb)
returns setof jobs.settle_result
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set jit = off
as $$
declare
  v_ids uuid[];
  v_claims bigint[];
  v_next_states text[];
  v_delays interval[];
  v_counts boolean[];
  v_ord integer;
  v_bad_key text;
  v_children uuid[];
  v_parents uuid[];
begin
  perform jobs._require(array['worker'], 'jobs.nack_many_v1');
  if nacks is null or jsonb_typeof(nacks) <> 'array' then
    perform jobs._invalid('jobs.nack_many_v1', 'nacks', 'must be a JSON array of objects');
  end if;
  if exists (select 1 from jsonb_array_elements(nacks) e where jsonb_typeof(e) <> 'object') then
    perform jobs._invalid('jobs.nack_many_v1', 'nacks', 'must hold JSON objects only');
  end if;
  select format('nacks[%s].%s', e.ord, k.key)
    into v_bad_key
    from jsonb_array_elements(nacks) with ordinality as e(item, ord),
         jsonb_object_keys(e.item) as k(key)
   where k.key not in ('id', 'claim', 'next_state', 'delay', 'counts_as_attempt', 'error',
                       'error_code', 'error_stack')
   limit 1;
  if v_bad_key is not null then
    perform jobs._invalid('jobs.nack_many_v1', v_bad_key, 'is not an argument of jobs.nack_v1');
  end if;

  -- parse every element first, in one block: a value of the wrong type is an argument error
  begin
    select coalesce(array_agg((e.item ->> 'id')::uuid order by e.ord), '{}'),
           coalesce(array_agg((e.item ->> 'claim')::bigint order by e.ord), '{}'),
           coalesce(array_agg(coalesce(e.item ->> 'next_state', 'ready') order by e.ord), '{}'),
           coalesce(array_agg(coalesce((e.item ->> 'delay')::interval, interval '0')
                              order by e.ord), '{}'),
           coalesce(array_agg(coalesce((e.item ->> 'counts_as_attempt')::boolean, true)
                              order by e.ord), '{}')
      into v_ids, v_claims, v_next_states, v_delays, v_counts
      from jsonb_array_elements(nacks) with ordinality as e(item, ord);
  exception
    when invalid_text_representation or invalid_datetime_format or datetime_field_overflow
         or numeric_value_out_of_range or invalid_parameter_value or interval_field_overflow then
      perform jobs._invalid('jobs.nack_many_v1', 'nacks',
                            'holds a value of the wrong type: ' || sqlerrm);
  end;

  -- the parents are woken once, after every row: one nack a time would take their locks in
  -- the order of the batch, and two batches could take them in opposite orders
  -- the children among the rows, each read by primary key, whatever the statistics say
  select array_agg(l.id order by l.id), array_agg(l.parent_id order by l.id)
    into v_children, v_parents
    from unnest(v_ids) as r(id)
    cross join lateral (
      select j.id, j.parent_id
        from jobs.jobs_live j
       where j.id = r.id
      offset 0
    ) l
   where l.parent_id is not null;
  -- every row locked first, in id order: a nack at a time would lock them in the batch's
  -- order, and the same worker's jobs.heartbeat_many_v1 locks them in id order
  perform 1
     from jobs.jobs_live j
    where j.id = any(v_ids)
    order by j.id
      for update;
  perform set_config('durajobs.wake_later', 'on', true);
  for v_ord in 1..cardinality(v_ids) loop
    return query
      select v_ids[v_ord],
             jobs.nack_v1(
               id => v_ids[v_ord],
               worker_id => nack_many_v1.worker_id,
               claim => v_claims[v_ord],
               next_state => v_next_states[v_ord],
               delay => v_delays[v_ord],
               counts_as_attempt => v_counts[v_ord],
               error => nacks -> (v_ord - 1) ->> 'error',
               error_code => nacks -> (v_ord - 1) ->> 'error_code',
               error_stack => nacks -> (v_ord - 1) ->> 'error_stack');
  end loop;
  perform set_config('durajobs.wake_later', '', true);
  if v_children is not null then
    -- those the batch ended: a child retried is still live, and still waited for
    select array_agg(c.id order by c.id), array_agg(c.parent_id order by c.id)
      into v_children, v_parents
      from unnest(v_children, v_parents) as c(id, parent_id)
     where not exists (select 1 from jobs.jobs_live j where j.id = c.id);
    if v_children is not null then
      perform jobs._wake_parents(v_children, v_parents);
    end if;
  end if;
end;
$$;

-- jobs.heartbeat_v1: renew a claimed attempt's lease.
-- Arguments: id, worker_id, claim, visibility (30 s from now).
-- Answers 'ok' (renewed), 'cancelled' (an operator cancelled the row this attempt held: stop,
-- it is not a loss) or 'lost' (another claim owns the row, it finished, or it is gone).
-- Raises X_ARGUMENT_INVALID. Locks the row.
create function jobs.heartbeat_v1(
  id uuid,
  worker_id text,
  claim bigint,
  visibility interval default interval '30 seconds'
)
returns text
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set jit = off
as $$
declare
  v_now timestamptz := jobs._now();
  v_state text;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.heartbeat_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.heartbeat_v1');
  end if;
  perform jobs._check_fence('jobs.heartbeat_v1', heartbeat_v1.id, heartbeat_v1.worker_id,
                            heartbeat_v1.claim);
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.heartbeat_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;

  update jobs.jobs_live j
     set lease_expires_at = v_now + heartbeat_v1.visibility,
         updated_at = v_now
   where j.id = heartbeat_v1.id
     and j.state = 'running'
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if found then
    return 'ok';
  end if;

  -- a cancel keeps the token, so only the attempt that was running sees 'cancelled'
  select j.state
    into v_state
    from jobs.jobs_history j
   where j.id = heartbeat_v1.id
     and j.claimed_by = heartbeat_v1.worker_id
     and j.claims = heartbeat_v1.claim;
  if v_state = 'cancelled' then
    return 'cancelled';
  end if;
  return 'lost';
end;
$$;

create type jobs.heartbeat_answer as (
  id uuid,
  answer text
);

-- jobs.heartbeat_many_v1: renew the leases of many claimed attempts of one worker in one
-- statement, each fenced on its own claim, as jobs.heartbeat_v1 renews one.
-- Arguments: worker_id, ids and claims (parallel arrays of equal length), visibility (30 s from
-- now, for every row). Answers (id, answer) per id, in input order: 'ok' (renewed),
-- 'cancelled' (an operator cancelled the row this attempt held) or 'lost' (another claim owns
-- it, it finished, or it is gone). Raises X_ARGUMENT_INVALID. Locks the rows this worker holds
-- under those claims, in id order, each read by primary key.
create function jobs.heartbeat_many_v1(
  worker_id text,
  ids uuid[],
  claims bigint[],
  visibility interval default interval '30 seconds'
)
returns setof jobs.heartbeat_answer
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set jit = off
as $$
declare
  v_now timestamptz := jobs._now();
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.heartbeat_many_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.heartbeat_many_v1');
  end if;
  if worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200 then
    perform jobs._check_label('jobs.heartbeat_many_v1', 'worker_id',
                              heartbeat_many_v1.worker_id);
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims)
     or coalesce(array_ndims(ids), 1) <> 1 or coalesce(array_ndims(claims), 1) <> 1 then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims',
                          'must be one-dimensional arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'ids, claims', 'must not contain NULL');
  end if;
  if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
    perform jobs._invalid('jobs.heartbeat_many_v1', 'visibility',
                          'must be a positive interval of at most 1 day');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged, as jobs.ack_many_v1 reads them
    held as materialized (
      select l.id
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs_live j
           where j.id = r.id
             and j.claimed_by = heartbeat_many_v1.worker_id
             and j.claims = r.claim
          offset 0
             for update
        ) l
       where l.state = 'running'
    ),
    renewed as (
      update jobs.jobs_live j
         set lease_expires_at = v_now + heartbeat_many_v1.visibility,
             updated_at = v_now
       where j.id = any(array(select h.id from held h))
      returning j.id, j.claims
    )
    select r.id,
           case when n.id is not null then 'ok'
                -- a cancel keeps the token, so only the attempt that was running sees it
                when (select j.state
                        from jobs.jobs_history j
                       where j.id = r.id
                         and j.claimed_by = heartbeat_many_v1.worker_id
                         and j.claims = r.claim) = 'cancelled' then 'cancelled'
                else 'lost' end
      from requested r
      -- by the claim too: an earlier attempt of the same row in the same batch (cancelled,
      -- requeued and claimed again by this worker) must not read the new attempt's renewal
      left join renewed n on n.id = r.id and n.claims = r.claim
     order by r.ord;
end;
$$;
