-- Revision 0007 down: put back the claim_v1 and ack_many_v1 of revision 0006, drop
-- jobs.claim_v3 and jobs._claim, and go back to schema version 6.

create or replace function jobs.version()
returns integer
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select 6
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
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_taken integer;
begin
  if queues is null or cardinality(queues) = 0 then
    perform jobs._raise(
      'X_JOB_CLAIM_QUEUES_EMPTY',
      'jobs.claim_v1: queues is empty, so no job could ever be claimed',
      jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
  end if;
  if exists (select 1 from unnest(queues) q where q is null or btrim(q) = '') then
    perform jobs._invalid('jobs.claim_v1', 'queues', 'must not contain NULL or empty names');
  end if;
  if worker_id is null or btrim(worker_id) = '' then
    perform jobs._invalid('jobs.claim_v1', 'worker_id', 'must be a non-empty worker id');
  end if;
  if batch_size is null or batch_size < 1 then
    perform jobs._invalid('jobs.claim_v1', 'batch_size', 'must be an integer of at least 1');
  end if;
  if visibility is null or visibility <= interval '0' then
    perform jobs._invalid('jobs.claim_v1', 'visibility', 'must be a positive interval');
  end if;
  if drop_exhausted is null then
    perform jobs._invalid('jobs.claim_v1', 'drop_exhausted', 'must be an array (empty for none)');
  end if;

  -- a pause is a row, read here, so it takes effect at every worker's next claim
  select coalesce(array_agg(distinct q), '{}')
    into v_queues
    from unnest(queues) q
   where not exists (select 1 from jobs.queue_pauses p where p.queue = q);
  if cardinality(v_queues) = 0 then
    return;
  end if;

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
       limit claim_v1.batch_size
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
       limit claim_v1.batch_size
         for update skip locked
    ),
    claimed as (
      update jobs.jobs j
         set claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
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
           limit claim_v1.batch_size - v_taken
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit claim_v1.batch_size - v_taken
    ),
    claimed as (
      update jobs.jobs j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
        from due
       where j.id = due.id
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

drop function jobs.claim_v3(text[], text, integer, interval, text[], boolean);
drop function jobs._claim(text, text[], text, integer, interval, text[], boolean);

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
    settled as (
      update jobs.jobs j
         set state = 'done',
             lease_expires_at = null,
             finished_at = v_now,
             updated_at = v_now
        from requested r
       where j.id = r.id
         and j.state = 'running'
         and j.claimed_by = ack_many_v1.worker_id
         and j.claims = r.claim
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
