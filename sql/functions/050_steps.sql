-- 050_steps: durable step checkpoints, keyed by run, so a later attempt replays a step's stored
-- result instead of running it again.
--
-- Tables: jobs.steps (insert, update, read), jobs.jobs_live (read, share lock), jobs.jobs_history
-- (read: a cancelled row).
-- Lock order: the job row (for share, so no cancel or settle slips between the fence and the
-- write), then the step row.

create type jobs.step_record as (
  name text,
  status text,
  output jsonb,
  error text,
  attempts integer,
  started_at timestamptz,
  finished_at timestamptz,
  wake_at timestamptz
);

-- jobs.steps_v1: a run's step records, in the order they started.
-- Arguments: run_id; tenant_id (optional: answer nothing unless the run is this tenant's; a
-- session bound to a tenant always reads as its tenant, 014_tenants). Answers one
-- jobs.step_record per step. Raises X_ARGUMENT_INVALID, X_JOB_TENANT_MISMATCH. Locks nothing.
create function jobs.steps_v1(run_id uuid, tenant_id text default null)
returns setof jobs.step_record
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_tenant text := steps_v1.tenant_id;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                      jobs._role_name('worker'), 'usage')
          or pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                         jobs._role_name('operator'), 'usage')) then
    perform jobs._denied(array['worker', 'operator'], 'jobs.steps_v1');
  end if;
  if run_id is null then
    perform jobs._invalid('jobs.steps_v1', 'run_id', 'must be a run id');
  end if;
  if jobs._any_binding() then
    v_tenant := jobs._scoped_tenant('jobs.steps_v1', 'tenant_id', steps_v1.tenant_id);
  end if;
  -- another tenant's run answers as a run with no steps
  if v_tenant is not null
     and (exists (select 1 from jobs.jobs j
                   where j.id = steps_v1.run_id and j.tenant_id is distinct from v_tenant)
          or exists (select 1 from jobs.jobs j
                      where j.run_id = steps_v1.run_id and j.run_id <> j.id
                        and j.tenant_id is distinct from v_tenant)) then
    return;
  end if;
  return query
    select s.name, s.status, s.output, s.error, s.attempts, s.started_at, s.finished_at, s.wake_at
      from jobs.steps s
     where s.run_id = steps_v1.run_id
     order by s.started_at, s.name;
end;
$$;

-- jobs.record_step_v1: store a step's outcome for the run of a claimed job, fenced on the claim
-- like jobs.ack_v1.
-- Arguments: id, worker_id, claim (the attempt's fence); name; status ('completed', 'sleeping',
-- 'waiting', 'failed'); output (the step's JSON result); error; wake_at (when a sleeping or
-- waiting step is due). A completed step is never overwritten: it ran once, ever.
-- Answers the stored jobs.step_record.
-- Raises X_JOB_CANCELLED (the job was cancelled), X_JOB_LEASE_LOST (another claim owns the job,
-- it finished, or it is gone), X_STEP_DUPLICATE (the step already completed in this run),
-- X_ARGUMENT_INVALID. Locks: the job row (share), then the step row.
create function jobs.record_step_v1(
  id uuid,
  worker_id text,
  claim bigint,
  name text,
  status text,
  output jsonb default null,
  error text default null,
  wake_at timestamptz default null
)
returns jobs.step_record
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_job record;
  v_step jobs.step_record;
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.record_step_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.record_step_v1');
  end if;
  perform jobs._check_fence('jobs.record_step_v1', record_step_v1.id, record_step_v1.worker_id,
                            record_step_v1.claim);
  if name is null or name !~ '[^[:space:]]' or length(name) > 200 then
    perform jobs._check_label('jobs.record_step_v1', 'name', record_step_v1.name);
  end if;
  if status is null or not (status = any(jobs.step_statuses())) then
    perform jobs._invalid('jobs.record_step_v1', 'status',
                          'must be one of ' || array_to_string(jobs.step_statuses(), ', '));
  end if;
  -- no limit is under 1 KiB, so a small output reads none
  if pg_column_size(record_step_v1.output) > 1024
     or pg_column_compression(record_step_v1.output) is not null then
    perform jobs._check_bytes('jobs.record_step_v1', 'output',
                              jobs._json_bytes(record_step_v1.output), 'step_output');
  end if;
  -- a step's failure is a report, cut to the limit as jobs.nack_v1 cuts one
  if octet_length(record_step_v1.error) > 1024 then
    record_step_v1.error := jobs._cut(record_step_v1.error, jobs._max_bytes('error_text'));
  end if;
  if wake_at is not null
     and not (wake_at between v_now - interval '100 years' and v_now + interval '100 years') then
    perform jobs._invalid('jobs.record_step_v1', 'wake_at',
                          'must be NULL or an instant within 100 years of now');
  end if;

  select j.run_id, j.state, j.claimed_by, j.claims
    into v_job
    from jobs.jobs_live j
   where j.id = record_step_v1.id
     for share;
  if not found then
    -- a finished row: a cancel of this very attempt is told apart from a lost lease
    select j.run_id, j.state, j.claimed_by, j.claims
      into v_job
      from jobs.jobs_history j
     where j.id = record_step_v1.id
       and j.state = 'cancelled';
  end if;
  if found
     and v_job.state = 'cancelled'
     and v_job.claimed_by = record_step_v1.worker_id
     and v_job.claims = record_step_v1.claim then
    perform jobs._raise(
      'X_JOB_CANCELLED',
      format('job %s was cancelled; step %s was not recorded', record_step_v1.id, record_step_v1.name),
      jsonb_build_object('id', record_step_v1.id, 'step', record_step_v1.name));
  end if;
  if not found
     or v_job.state <> 'running'
     or v_job.claimed_by is distinct from record_step_v1.worker_id
     or v_job.claims <> record_step_v1.claim then
    perform jobs._raise(
      'X_JOB_LEASE_LOST',
      format('job %s is no longer held by claim %s of worker %s; step %s was not recorded',
             record_step_v1.id, record_step_v1.claim, record_step_v1.worker_id, record_step_v1.name),
      jsonb_build_object('id', record_step_v1.id, 'worker_id', record_step_v1.worker_id,
                         'claim', record_step_v1.claim, 'step', record_step_v1.name));
  end if;

  insert into jobs.steps as s (
    run_id, name, status, output, error, attempts, started_at, updated_at, finished_at, wake_at)
  values (
    v_job.run_id, record_step_v1.name, record_step_v1.status, record_step_v1.output,
    record_step_v1.error, 1, v_now, v_now,
    case when record_step_v1.status in ('completed', 'failed') then v_now end,
    record_step_v1.wake_at)
  on conflict on constraint steps_pkey do update
     set status = excluded.status,
         output = excluded.output,
         error = excluded.error,
         -- a step that failed and is tried again counts one more attempt
         attempts = s.attempts + case when s.status = 'failed' then 1 else 0 end,
         updated_at = excluded.updated_at,
         finished_at = excluded.finished_at,
         wake_at = excluded.wake_at
   where s.status <> 'completed'
  returning s.name, s.status, s.output, s.error, s.attempts, s.started_at, s.finished_at, s.wake_at
    into v_step;

  if v_step.name is null then
    perform jobs._raise(
      'X_STEP_DUPLICATE',
      format('step %s of run %s already completed; a step runs once', record_step_v1.name,
             v_job.run_id),
      jsonb_build_object('id', record_step_v1.id, 'run_id', v_job.run_id,
                         'step', record_step_v1.name));
  end if;
  return v_step;
end;
$$;
