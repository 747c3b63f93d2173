-- 080_requeue: run a finished job again, keeping its run, so completed steps replay.
--
-- Tables: jobs.jobs_history (the row leaves), jobs.jobs_live (it comes back), jobs.steps
-- (delete). Lock order: the job row, then its steps.

-- jobs._revived: the live row a finished row becomes when it is requeued at `now`: ready and due
-- now, attempt 0, no last error, no lease, not finished, its capped flag as the limits say now.
-- Its claim count is kept, so a token from before the requeue cannot settle the new attempt.
-- Answers a jobs.jobs_live row. Raises nothing. Locks nothing.
create function jobs._revived(h jobs.jobs_history, now timestamptz)
returns jobs.jobs_live
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select row(
    h.id, h.name, h.queue, h.input, h.idempotency_key, h.tenant_id, h.run_id,
    'ready', h.priority,
    0,           -- attempt
    h.max_attempts,
    _revived.now,  -- run_at
    h.created_at,
    _revived.now,  -- updated_at
    null,        -- finished_at
    h.claimed_by, h.claimed_at,
    null,        -- lease_expires_at
    h.claims,
    null, null, null,  -- last_error, last_error_code, last_error_stack
    h.progress, h.traceparent, h.enqueued_by, h.concurrency_key,
    -- the limits may have changed since the row was live
    jobs._capped(h.name, h.queue, h.tenant_id),
    null,        -- result: the run ends again, with its own
    h.parent_id
  )::jobs.jobs_live
$$;

-- jobs.requeue: move a finished job (done, failed, dead, cancelled) back to 'ready', due now,
-- with attempt 0 and no last error. Its claim token is kept, never reset, so a token from
-- before the requeue cannot settle the new attempt.
-- Arguments: id; from_step (optional): that step and every step that started at or after its
-- start are dropped in the same statement, so they run again; tenant_id (optional: act only on
-- that tenant's job; a session bound to a tenant always acts for its tenant, 014_tenants).
-- Answers true. Raises X_JOB_NOT_FOUND (no such id, or another tenant's),
-- X_JOB_NOT_REQUEUEABLE (the job is live: requeueing it would run it twice), X_JOB_DUPLICATE
-- (a live job holds its idempotency key), X_ARGUMENT_INVALID (from_step names no step of the
-- run), X_JOB_TENANT_MISMATCH. Locks: the job row, then its steps.
-- Wakes the job's queue.
create function jobs.requeue(id uuid, from_step text default null, tenant_id text default null)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_live text;
  v_holder jobs.enqueue_result;
  v_from timestamptz;
begin
  perform jobs._require(array['operator'], 'jobs.requeue', scoped => true);
  if id is null then
    perform jobs._invalid('jobs.requeue', 'id', 'must be a job id');
  end if;
  perform jobs._check_label('jobs.requeue', 'from_step', requeue.from_step, required => false);
  if jobs._foreign_job(requeue.id,
                       jobs._scoped_tenant('jobs.requeue', 'tenant_id', requeue.tenant_id)) then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', requeue.id),
                        jsonb_build_object('id', requeue.id));
  end if;

  select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
  if v_live is null then
    select j.id, j.name, j.queue, j.state, j.tenant_id, j.idempotency_key, j.run_id
      into v_job
      from jobs.jobs_history j
     where j.id = requeue.id
       for update;
    if not found then
      -- a requeue that committed while this one waited for the row's lock moved it back
      select j.state into v_live from jobs.jobs_live j where j.id = requeue.id;
      if v_live is null then
        perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', requeue.id),
                            jsonb_build_object('id', requeue.id));
      end if;
    end if;
  end if;
  if v_live is not null then
    perform jobs._raise(
      'X_JOB_NOT_REQUEUEABLE',
      format('job %s is %s; only a finished job can be requeued', requeue.id, v_live),
      jsonb_build_object('id', requeue.id, 'state', v_live));
  end if;

  v_holder := jobs._find_live(v_job.name, v_job.tenant_id, v_job.idempotency_key);
  if v_holder.id is not null then
    perform jobs._raise(
      'X_JOB_DUPLICATE',
      format('job %s cannot be requeued: live job %s holds idempotency key %s', requeue.id,
             v_holder.id, v_job.idempotency_key),
      jsonb_build_object('id', requeue.id, 'job', v_job.name, 'existing_id', v_holder.id,
                         'idempotency_key', v_job.idempotency_key, 'tenant_id', v_job.tenant_id));
  end if;

  if from_step is not null then
    select s.started_at
      into v_from
      from jobs.steps s
     where s.run_id = v_job.run_id
       and s.name = requeue.from_step;
    if not found then
      perform jobs._invalid('jobs.requeue', 'from_step',
                            format('names no step of run %s', v_job.run_id));
    end if;
  end if;

  begin
    with dropped as (
      delete from jobs.steps s
       where requeue.from_step is not null
         and s.run_id = v_job.run_id
         and (s.name = requeue.from_step or s.started_at >= v_from)
    ),
    gone as (
      delete from jobs.jobs_history j
       where j.id = requeue.id
      returning j
    )
    insert into jobs.jobs_live
    select e.* from gone g cross join lateral jobs._revived(g.j, v_now) e;
  exception
    when unique_violation then
      -- a live twin committed between the check and the update
      v_holder := jobs._find_live(v_job.name, v_job.tenant_id, v_job.idempotency_key);
      perform jobs._raise(
        'X_JOB_DUPLICATE',
        format('job %s cannot be requeued: a live job holds idempotency key %s', requeue.id,
               v_job.idempotency_key),
        jsonb_build_object('id', requeue.id, 'job', v_job.name, 'existing_id', v_holder.id,
                           'idempotency_key', v_job.idempotency_key));
  end;

  perform pg_notify('jobs_wake', jobs._wake_token(v_job.queue));
  return true;
end;
$$;
