-- 030_claim: hand waiting jobs to a worker under a lease, re-take the rows of dead workers, and
-- bury the rows whose lease lapsed on their final attempt.
--
-- Tables: jobs.jobs (update), jobs.queue_pauses (read), jobs.counter_buckets (a burial counts).
-- Locks: job rows only, each with `for update skip locked`, so claimers never wait for one
-- another (and the claiming backend's own counter shard).

create type jobs.claimed_job as (
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
);

-- jobs._claim: the claim itself, behind jobs.claim_v1. Arguments: the calling function's name
-- (errors name it), then those of jobs.claim_v1, none defaulted. recover_lapsed false skips the
-- burial and the re-take (both read jobs_lease_idx); the waiting rows are handed out as always.
-- Answers has_steps NULL: jobs.claim_v1 fills it in for the rows it answers.
-- Raises what jobs.claim_v1 raises, naming function_name.
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
-- the statements' plans are kept: re-planning them on every call, as the plan cache would
-- choose to, is most of an idle worker's pickup claim
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
             b.last_error, b.traceparent, b.enqueued_by, null::boolean
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
             c.last_error, c.traceparent, c.enqueued_by, null::boolean
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
           c.last_error, c.traceparent, c.enqueued_by, null::boolean
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$$;


-- jobs.claim_v1: claim up to batch_size jobs of the given queues for worker_id.
-- Arguments: queues (non-empty), worker_id, batch_size (1), visibility (30 s lease),
-- drop_exhausted (job names that end 'failed' instead of 'dead' when their final attempt's lease
-- lapses, because they do not dead-letter) and recover_lapsed (true: this call also buries and
-- re-takes rows whose lease lapsed). A worker passes recover_lapsed true about once a second and
-- false between: the scan for lapsed leases reads every dead entry of jobs_lease_idx that a
-- vacuum has not yet removed, which after a burst of work costs more than the claim itself.
-- Order: first rows whose lease lapsed (a dead worker's, re-taken as a new attempt), then waiting
-- rows due now by priority (lower first), run_at, id. Paused queues are skipped.
-- Answers the claimed rows with state 'running' and their claim token, which every later call on
-- the attempt must present, and has_steps: whether the run may have stored steps, so a worker
-- reads the step history only of runs that may have one. Also answers, with state 'dead' or
-- 'failed', the rows it buried: running rows whose lease lapsed at attempt >= max_attempts,
-- settled in this statement with last_error 'LEASE_LAPSED_FINAL_ATTEMPT' and never handed out;
-- a burial counts as dead (or failed) in the counters. Never more claimed rows than batch_size
-- (the candidates are materialised before the update).
-- Raises X_JOB_CLAIM_QUEUES_EMPTY, X_ARGUMENT_INVALID. Locks: the rows it answers.
create function jobs.claim_v1(
  queues text[],
  worker_id text,
  batch_size integer default 1,
  visibility interval default interval '30 seconds',
  drop_exhausted text[] default '{}',
  recover_lapsed boolean default true
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
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true
                   from jobs.steps s
                  where s.run_id = c.run_id
                  order by s.run_id, s.name
                  limit 1) is not null
      from jobs._claim('jobs.claim_v1', claim_v1.queues, claim_v1.worker_id,
                       claim_v1.batch_size, claim_v1.visibility, claim_v1.drop_exhausted,
                       claim_v1.recover_lapsed) c;
end;
$$;

-- jobs.worker_running_v1: the rows worker_id holds running, with their claim tokens. A worker
-- whose wait for a claim was cut by a cancel asks it before it stops: the claim may have
-- committed while its answer was thrown away, and the rows it does not know it holds go back
-- uncounted (jobs.nack_v1, fenced on these tokens) instead of lapsing as counted attempts.
-- Reads the running rows only (jobs_lease_idx). Answers (id, claim), in no particular order.
-- Raises X_ARGUMENT_INVALID for a NULL or blank worker_id. Locks nothing.
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
