-- Revision 0007 up: the hot path. The claim moves into jobs._claim, which updates the rows it
-- hands out by primary key and keeps generic plans; jobs.claim_v1 calls it, and jobs.claim_v3
-- lets a worker skip the scan for lapsed leases between its once-a-second recoveries.
-- jobs.ack_many_v1 reads and locks each row by primary key before its fence is judged. Same
-- arguments, answers and errors for every function that existed. Schema version 7. Frozen:
-- never edit after release; a change ships as a new revision.

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 7
$$;

-- >>> sql/functions/030_claim.sql: _claim, claim_v1, claim_v3
-- jobs._claim: the claim itself, for jobs.claim_v1 and jobs.claim_v3. Arguments: the calling
-- function's name (errors name it), then those of jobs.claim_v3, none defaulted.
-- recover_lapsed false skips the burial and the re-take (both read jobs_lease_idx); the waiting
-- rows are handed out as always. Raises what jobs.claim_v1 raises, naming function_name.
-- Introduced in revision 0007 (the body of jobs.claim_v1 until then).
create function jobs._claim(
  function_name text,
  queues text[],
  worker_id text,
  batch_size integer,
  visibility interval,
  drop_exhausted text[],
  recover_lapsed boolean
)
returns setof jobs.claimed_job
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
-- the statements' plans are kept (since revision 0007): re-planning them on every call, as the
-- plan cache chose to, was most of an idle worker's pickup claim
set plan_cache_mode = force_generic_plan
as $$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
begin
  if queues is null or cardinality(queues) = 0 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      function_name || ': queues is empty, so no job could ever be claimed',
      jsonb_build_object('function', function_name, 'argument', 'queues'));
  end if;
  if exists (select 1 from unnest(queues) q where q is null or btrim(q) = '') then
    perform jobs._invalid(function_name, 'queues', 'must not contain NULL or empty names');
  end if;
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid(function_name, 'worker_id', 'must be a non-empty worker id');
  end if;
  if batch_size is null or batch_size < 1 then
    perform jobs._invalid(function_name, 'batch_size', 'must be an integer of at least 1');
  end if;
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid(function_name, 'visibility', 'must be a positive interval');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid(function_name, 'drop_exhausted', 'must be an array (empty for none)');
  end if;
  if recover_lapsed is null then
    perform jobs._invalid(function_name, 'recover_lapsed', 'must be true or false');
  end if;

  -- a pause is a row, read here, so it takes effect at every worker's next claim
  select coalesce(array_agg(distinct q), '{}')
    into v_queues
    from unnest(queues) q
   where not exists (select 1 from jobs.queue_pauses p where p.queue = q);
  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
    -- bury: a row whose lease lapsed on its final attempt would take a worker per lease forever
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt >= j.max_attempts
         order by j.lease_expires_at, j.id
         limit _claim.batch_size
           for update skip locked
      ),
      buried as (
        update jobs.jobs j
           set state = case when j.name = any(drop_exhausted) then 'failed' else 'dead' end,
               last_error = 'LEASE_LAPSED_FINAL_ATTEMPT',
               last_error_code = null,
               last_error_stack = null,
               lease_expires_at = null,
               finished_at = v_now,
               updated_at = v_now
          from lapsed
         where j.id = lapsed.id
        returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                  j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                  j.last_error, j.traceparent, j.enqueued_by, j.claimed_at
      ),
      -- a burial ends the row, so it counts where a settle would
      counted as (
        select jobs._count_settled(v_now, array_agg(b.name), array_agg(b.state),
                                   array_agg(b.claimed_at))
          from buried b
      )
      select b.id, b.run_id, b.name, b.queue, b.input, b.tenant_id, b.state, b.attempt,
             b.max_attempts, b.claims, b.priority, b.run_at, b.created_at, b.lease_expires_at,
             b.last_error, b.traceparent, b.enqueued_by
        from buried b
       cross join counted;

    -- re-take: a dead worker's row with attempts left comes back as a new, counted attempt
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt < j.max_attempts
         order by j.lease_expires_at, j.id
         limit _claim.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs j
           set claimed_by = _claim.worker_id,
               claimed_at = v_now,
               lease_expires_at = v_now + _claim.visibility,
               claims = j.claims + 1,
               attempt = j.attempt + 1,
               updated_at = v_now
          from lapsed
         where j.id = lapsed.id
        returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                  j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                  j.last_error, j.traceparent, j.enqueued_by
      )
      select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
             c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
             c.last_error, c.traceparent, c.enqueued_by
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;

  -- hand out waiting rows due now; skip locked: a second claimer must not wait for this one.
  -- Each queue is read on its own, in jobs_claim_idx order, so the scan stops after the rows it
  -- needs: `queue = any(...)` would read and sort every waiting row of every queue instead.
  return query
    with due as materialized (
      select w.id
        from unnest(v_queues) as q(queue)
        cross join lateral (
          select j.id, j.priority, j.run_at
            from jobs.jobs j
           where j.queue = q.queue
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit _claim.batch_size - v_taken
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit _claim.batch_size - v_taken
    ),
    claimed as (
      -- by primary key: a join to `due` let the planner hash a scan of the whole table
      update jobs.jobs j
         set state = 'running',
             claimed_by = _claim.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + _claim.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(array(select due.id from due))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$$;

create or replace function jobs.claim_v1(
  queues text[],
  worker_id text,
  batch_size integer default 1,
  visibility interval default interval '30 seconds',
  drop_exhausted text[] default '{}'
)
returns setof jobs.claimed_job
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  return query
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claim, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by
      from jobs._claim('jobs.claim_v1', queues, worker_id, batch_size, visibility,
                       drop_exhausted, true) c;
end;
$$;

-- jobs.claim_v3: jobs.claim_v2, and recover_lapsed (default true) says whether this call also
-- buries and re-takes rows whose lease lapsed. A worker passes true about once a second and
-- false between: the scan for lapsed leases reads every dead entry of jobs_lease_idx that a
-- vacuum has not yet removed, which after a burst of work costs more than the claim itself.
-- Arguments, order, answers, errors and locks: those of jobs.claim_v2 (errors name
-- jobs.claim_v3), plus recover_lapsed. Introduced in revision 0007.
create function jobs.claim_v3(
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
           -- as in jobs.claim_v2: a run past its first attempt always reads its history
           c.attempt > 1 or exists (select 1 from jobs.steps s where s.run_id = c.run_id)
      from jobs._claim('jobs.claim_v3', claim_v3.queues, claim_v3.worker_id,
                       claim_v3.batch_size, claim_v3.visibility, claim_v3.drop_exhausted,
                       claim_v3.recover_lapsed) c;
end;
$$;

-- >>> sql/functions/040_settle.sql: ack_many_v1
create or replace function jobs.ack_many_v1(worker_id text, ids uuid[], claims bigint[])
returns setof jobs.settle_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.ack_many_v1', 'worker_id', 'must be the claiming worker''s id');
  end if;
  if ids is null or claims is null or cardinality(ids) <> cardinality(claims) then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims', 'must be arrays of equal length');
  end if;
  if array_position(ids, null) is not null or array_position(claims, null) is not null then
    perform jobs._invalid('jobs.ack_many_v1', 'ids, claims', 'must not contain NULL');
  end if;

  return query
    with requested as (
      select r.id, r.claim, r.ord
        from unnest(ids, claims) with ordinality as r(id, claim, ord)
    ),
    -- each row by primary key, locked, then judged: with the fence in the join the planner
    -- read every live row of the table through a partial index whose statistics said no row
    -- was running (`offset 0` keeps the fence out of the lookup)
    held as materialized (
      select l.id
        -- one lock order for every caller
        from (select q.id, q.claim from requested q order by q.id) r
        cross join lateral (
          select j.id, j.state, j.claimed_by, j.claims
            from jobs.jobs j
           where j.id = r.id
          offset 0
             for update
        ) l
       where l.state = 'running'
         and l.claimed_by = ack_many_v1.worker_id
         and l.claims = r.claim
    ),
    settled as (
      update jobs.jobs j
         set state = 'done',
             lease_expires_at = null,
             finished_at = v_now,
             updated_at = v_now
       where j.id = any(array(select h.id from held h))
      returning j.id, j.claims, j.name, j.claimed_at
    ),
    counted as (
      select jobs._count_settled(v_now, array_agg(s.name), array_agg('done'::text),
                                 array_agg(s.claimed_at)) as rows
        from settled s
    )
    select r.id, s.id is not null
      from requested r
      cross join counted
      left join settled s on s.id = r.id and s.claims = r.claim
     order by r.ord;
end;
$$;
