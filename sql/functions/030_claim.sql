-- 030_claim: hand waiting jobs to a worker under a lease, re-take the rows of dead workers, and
-- bury the rows whose lease lapsed on their final attempt.
--
-- Tables: jobs.jobs (update), jobs.queue_pauses and jobs.declarations (read),
-- jobs.counter_buckets (a burial counts).
-- Locks: job rows, each with `for update skip locked`, so claimers never wait for one another's
-- rows (and the claiming backend's own counter shard). While a concurrency limit is declared,
-- also one transaction-scoped advisory lock per limited group the claim hands a row of, taken in
-- the order of their keys: claimers of one group take turns, so no limit is exceeded even for an
-- instant, and claimers of other groups never wait.

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

-- jobs._claim_limited: the waiting rows jobs._claim hands out while a concurrency limit is
-- declared (jobs.declarations.concurrency). Arguments: the calling function's name, the queues
-- to read (not paused), worker_id, room (how many rows at most), visibility, and the claim's now.
-- Uncapped rows are taken as the unlimited claim takes them. Capped rows are read apart (their
-- own range of jobs_claim_idx) and passed over while their group (the job, or the job and key
-- when keyed) runs at its limit; the candidates are locked skip locked, then the claim takes the
-- advisory lock of each group in key order and counts what the group runs now: a statement of
-- its own, so it sees every claim of the group committed before the lock was granted. A
-- running row holds its place until it settles, is cancelled or buried, or its lapsed lease is
-- re-taken as a new attempt (which keeps the place): a killed worker's rows go on counting until
-- then, so a limit never admits a second copy of a run still thought alive. A keyed limit that
-- says when_busy 'fail' settles a candidate whose key another run holds as 'failed'
-- (X_JOB_KEY_BUSY) instead of holding it back; one whose key only its own run holds (a
-- continuation of the same run_id) waits.
-- Answers the rows it refused (state 'failed', counted as failed), then the claimed rows, as
-- jobs._claim does (has_steps NULL). Raises X_ARGUMENT_INVALID when
-- called outside a read committed transaction: a snapshot older than the lock would miss claims.
-- Locks: the rows it reads skip locked, the advisory locks of the groups it hands out.
create function jobs._claim_limited(
  function_name text,
  queues text[],
  worker_id text,
  room integer,
  visibility interval,
  now timestamptz
)
returns setof jobs.claimed_job
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_free uuid[];
  v_held uuid[];
  v_admitted uuid[];
  v_refused uuid[];
  v_full_jobs text[];
  v_full_keys text[];
  v_lock bigint;
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    perform jobs._invalid(function_name, 'transaction',
                          'must be read committed while a concurrency limit is declared');
  end if;

  -- uncapped rows, exactly as the unlimited claim reads them
  select coalesce(array_agg(w.id), '{}')
    into v_free
    from unnest(_claim_limited.queues) as q(queue)
    cross join lateral (
      select j.id
        from jobs.jobs j
       where j.queue = q.queue
         and j.capped = false
         and j.state in ('ready', 'delayed', 'suspended')
         and j.run_at <= _claim_limited.now
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
         for update skip locked
    ) w;

  -- the groups already at their limit, counted without a lock: only to pass over their rows, so
  -- a backlog of one busy key never hides the other keys' rows behind it
  with limits as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
  ),
  running as (
    select r.name, r.concurrency_key, count(*) as busy
      from jobs.jobs r
     where r.state = 'running'
       and r.capped
     group by r.name, r.concurrency_key
  )
  select coalesce(array_agg(distinct l.name) filter (
           where not l.concurrency_keyed
             and (select sum(x.busy) from running x where x.name = l.name) >= l.concurrency),
           '{}'),
         -- a 'fail' group's rows must be seen, to be refused
         coalesce(array_agg(x.name || E'\x1f' || x.concurrency_key) filter (
           where l.concurrency_keyed and l.when_busy = 'wait' and x.busy >= l.concurrency), '{}')
    into v_full_jobs, v_full_keys
    from limits l
    left join running x on x.name = l.name;

  -- capped candidates in hand-out order, at most what each group has room for now
  with limits as (
    select d.name, d.concurrency, d.concurrency_keyed, d.when_busy
      from jobs.declarations d
     where d.concurrency is not null
  ),
  waiting as (
    select w.id, w.name, w.concurrency_key, w.priority, w.run_at
      from unnest(_claim_limited.queues) as q(queue)
      cross join lateral (
        select j.id, j.name, j.concurrency_key, j.priority, j.run_at
          from jobs.jobs j
         where j.queue = q.queue
           and j.capped = true
           and j.state in ('ready', 'delayed', 'suspended')
           and j.run_at <= _claim_limited.now
           and not (j.name = any(v_full_jobs))
           and not (j.name || E'\x1f' || coalesce(j.concurrency_key, '') = any(v_full_keys))
         order by j.priority, j.run_at, j.id
         limit _claim_limited.room
      ) w
  ),
  grouped as (
    select w.id, l.concurrency as cap, l.when_busy,
           row_number() over (
             partition by w.name, case when l.concurrency_keyed then w.concurrency_key end
             order by w.priority, w.run_at, w.id) as nth
      from waiting w
      left join limits l on l.name = w.name
  )
  select coalesce(array_agg(g.id), '{}')
    into v_held
    from grouped g
   where g.cap is null or g.when_busy = 'fail' or g.nth <= g.cap;

  select coalesce(array_agg(c.id), '{}')
    into v_held
    from (
      select j.id
        from jobs.jobs j
       where j.id = any(v_held)
         and j.capped = true
         and j.state in ('ready', 'delayed', 'suspended')
         and j.run_at <= _claim_limited.now
         for update skip locked
    ) c;

  if cardinality(v_held) > 0 then
    -- by lock key, not by name: two groups may share a key, and one order for all claimers is
    -- what keeps them from waiting on each other in a circle
    for v_lock in
      select distinct hashtextextended(
               'durajobs.concurrency:' || j.name || E'\x1f'
               || coalesce(case when d.concurrency_keyed then j.concurrency_key end, ''), 0)
        from jobs.jobs j
        join jobs.declarations d on d.name = j.name and d.concurrency is not null
       where j.id = any(v_held)
       order by 1
    loop
      perform pg_advisory_xact_lock(v_lock);
    end loop;

    -- under the locks, a statement of its own: what each group runs now, committed claims of
    -- the other claimers included
    with held as (
      select j.id, j.name, j.run_id, j.priority, j.run_at, d.concurrency as cap, d.when_busy,
             case when d.concurrency_keyed then j.concurrency_key end as group_key
        from jobs.jobs j
        left join jobs.declarations d on d.name = j.name and d.concurrency is not null
       where j.id = any(v_held)
    ),
    running as (
      select r.name, r.concurrency_key, r.run_id, count(*) as busy
        from jobs.jobs r
       where r.state = 'running'
         and r.capped
         and r.name in (select h.name from held h)
       group by r.name, r.concurrency_key, r.run_id
    ),
    ranked as (
      select h.id, h.cap, h.when_busy,
             row_number() over (partition by h.name, h.group_key
                                order by h.priority, h.run_at, h.id) as nth,
             (select coalesce(sum(x.busy), 0)
                from running x
               where x.name = h.name
                 and (h.group_key is null or x.concurrency_key = h.group_key)) as busy,
             (select coalesce(sum(x.busy), 0)
                from running x
               where x.name = h.name
                 and x.concurrency_key = h.group_key
                 and x.run_id = h.run_id) as busy_own
        from held h
    ),
    decided as (
      select r.id,
             r.cap is null or r.nth <= r.cap - r.busy as admitted,
             -- refused only on evidence that another run holds the key: a running row of
             -- another run, or an earlier candidate this claim admits
             r.when_busy = 'fail'
               and r.busy - r.busy_own + least(r.nth - 1, greatest(r.cap - r.busy, 0)) > 0
               as refused
        from ranked r
    )
    select coalesce(array_agg(d.id) filter (where d.admitted), '{}'),
           coalesce(array_agg(d.id) filter (where not d.admitted and d.refused), '{}')
      into v_admitted, v_refused
      from decided d;

    if cardinality(v_refused) > 0 then
      return query
        with refused as (
          update jobs.jobs j
             set state = 'failed',
                 last_error = format('X_JOB_KEY_BUSY: key %s of job %s is held by another run',
                                     j.concurrency_key, j.name),
                 last_error_code = 'X_JOB_KEY_BUSY',
                 last_error_stack = null,
                 claimed_by = _claim_limited.worker_id,
                 claimed_at = _claim_limited.now,
                 lease_expires_at = null,
                 finished_at = _claim_limited.now,
                 updated_at = _claim_limited.now
           where j.id = any(v_refused)
          returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                    j.max_attempts, j.claims, j.priority, j.run_at, j.created_at,
                    j.lease_expires_at, j.last_error, j.traceparent, j.enqueued_by, j.claimed_at
        ),
        -- a refusal ends the row, so it counts where a settle would: as failed
        counted as (
          select jobs._count_settled(_claim_limited.now, array_agg(r.name), array_agg(r.state),
                                     array_agg(r.claimed_at))
            from refused r
        )
        select r.id, r.run_id, r.name, r.queue, r.input, r.tenant_id, r.state, r.attempt,
               r.max_attempts, r.claims, r.priority, r.run_at, r.created_at, r.lease_expires_at,
               r.last_error, r.traceparent, r.enqueued_by, null::boolean
          from refused r
         cross join counted;
    end if;
  end if;

  return query
    with chosen as materialized (
      select j.id
        from jobs.jobs j
       where j.id = any(v_free || coalesce(v_admitted, '{}'))
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
    ),
    claimed as (
      update jobs.jobs j
         set state = 'running',
             claimed_by = _claim_limited.worker_id,
             claimed_at = _claim_limited.now,
             lease_expires_at = _claim_limited.now + _claim_limited.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = _claim_limited.now
       where j.id = any(array(select chosen.id from chosen))
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
  v_room integer;
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
  v_room := batch_size - v_taken;

  if exists (select 1 from jobs.declarations d where d.concurrency is not null) then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by, l.has_steps
        from jobs._claim_limited(function_name, v_queues, worker_id, v_room, visibility, v_now) l;
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
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
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
-- rows due now by priority (lower first), run_at, id. Paused queues are skipped. While a job
-- declares a concurrency limit (jobs.declare_job), its rows are handed out only while their
-- group (the job, or the job and its concurrency_key) runs fewer attempts than the limit, across
-- every claimer; a row held back stays waiting, burns no attempt and keeps its place.
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
