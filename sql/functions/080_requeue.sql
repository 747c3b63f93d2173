-- 080_requeue: run a finished job again, keeping its run, so completed steps replay.
--
-- Tables: jobs.jobs (update), jobs.steps (delete). Lock order: the job row, then its steps.

-- jobs.requeue: move a finished job (done, failed, dead, cancelled) back to 'ready', due now,
-- with attempt 0 and no last error. Its claim token is kept, never reset, so a token from
-- before the requeue cannot settle the new attempt.
-- Arguments: id; from_step (optional): that step and every step that started at or after its
-- start are dropped in the same statement, so they run again.
-- Answers true. Raises X_JOB_NOT_FOUND (no such id), X_JOB_NOT_REQUEUEABLE (the job is live:
-- requeueing it would run it twice), X_JOB_DUPLICATE (a live job holds its idempotency key),
-- X_ARGUMENT_INVALID (from_step names no step of the run). Locks: the job row, then its steps.
-- Wakes the job's queue.
create function jobs.requeue(id uuid, from_step text default null)
returns boolean
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_holder jobs.enqueue_result;
  v_from timestamptz;
begin
  if id is null then
    perform jobs._invalid('jobs.requeue', 'id', 'must be a job id');
  end if;

  select j.id, j.name, j.queue, j.state, j.tenant_id, j.idempotency_key, j.run_id
    into v_job
    from jobs.jobs j
   where j.id = requeue.id
     for update;
  if not found then
    perform jobs._raise('X_JOB_NOT_FOUND', format('no job has id %s', requeue.id),
                        jsonb_build_object('id', requeue.id));
  end if;
  if v_job.state not in ('done', 'failed', 'dead', 'cancelled') then
    perform jobs._raise(
      'X_JOB_NOT_REQUEUEABLE',
      format('job %s is %s; only a finished job can be requeued', requeue.id, v_job.state),
      jsonb_build_object('id', requeue.id, 'state', v_job.state));
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
    )
    update jobs.jobs j
       set state = 'ready',
           run_at = v_now,
           -- the limits may have changed since the row was live
           capped = jobs._capped(j.name, j.queue, j.tenant_id),
           attempt = 0,
           last_error = null,
           last_error_code = null,
           last_error_stack = null,
           lease_expires_at = null,
           finished_at = null,
           updated_at = v_now
     where j.id = requeue.id;
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

  perform pg_notify('jobs_wake', v_job.queue);
  return true;
end;
$$;
