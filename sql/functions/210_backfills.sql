-- 210_backfills: the backfill ledger, one row per pass of a declared backfill (a run of its job;
-- the attempts of one run are one pass). The Python factory (durajobs.declare.backfill) writes it
-- as a pass starts, after each page and as it ends; `durajobs backfill` reads it as a deploy
-- gate. Only a completed pass blocks a backfill from running again: a failed or interrupted one
-- is resumed by its own retry (which adopts its row) or replaced by a new pass.
--
-- Tables: jobs.backfills. Locks: the pass's row. Two live passes of one name cannot start
-- together: the name is the job's idempotency key, so its job is one at a time (a forced pass
-- enqueued by hand beside a live one is its own row, and both run).

create table jobs.backfills (
  id bigint generated always as identity primary key,
  name text not null check (length(name) between 1 and 200),
  run_id uuid not null unique,
  job_id uuid not null,
  tenant_id text,
  status text not null check (status in ('running', 'completed', 'failed')),
  -- the declaration's fingerprint (its source, handle and count, not its rate or batch): a
  -- completed pass whose checksum moved is reported, never re-run by itself
  checksum text not null check (length(checksum) between 1 and 200),
  environment text not null check (length(environment) between 1 and 200),
  forced boolean not null default false,
  batches integer not null default 0 check (batches >= 0),
  rows_processed bigint not null default 0 check (rows_processed >= 0),
  started_at timestamptz not null,
  updated_at timestamptz not null,
  completed_at timestamptz,
  failed_at timestamptz,
  error text check (length(error) <= 2000)
);

create index backfills_name_idx on jobs.backfills (name, started_at desc, id desc);

-- jobs.backfill_start_v1: begin (or resume) the pass that run `run_id` of backfill `name` makes.
-- Arguments: name, run_id and job_id (the pass's run and job), checksum (the declaration's
-- fingerprint), environment (where the pass runs), force (start a new pass even after a
-- completed one), tenant_id (the run's tenant, NULL for none).
-- Answers one row: outcome 'adopted' (this run's row exists: a retry resumes it, its started_at
-- kept, its completion and failure cleared), 'skipped' (a pass of this name completed and force
-- is false: nothing to do; previous_run_id and previous_checksum name that pass) or 'started' (a
-- new row). batches and rows_processed are the row's counts (zero when skipped).
-- Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED (worker kind). Locks the run's row.
create function jobs.backfill_start_v1(
  name text,
  run_id uuid,
  job_id uuid,
  checksum text,
  environment text,
  force boolean default false,
  tenant_id text default null
)
returns table (
  outcome text,
  previous_run_id uuid,
  previous_checksum text,
  batches integer,
  rows_processed bigint
)
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
  v_batches integer;
  v_rows bigint;
  v_done_run uuid;
  v_done_checksum text;
begin
  perform jobs._require(array['worker'], 'jobs.backfill_start_v1');
  perform jobs._check_label('jobs.backfill_start_v1', 'name', backfill_start_v1.name);
  perform jobs._check_label('jobs.backfill_start_v1', 'checksum', backfill_start_v1.checksum);
  perform jobs._check_label('jobs.backfill_start_v1', 'environment',
                            backfill_start_v1.environment);
  if run_id is null or job_id is null then
    perform jobs._invalid('jobs.backfill_start_v1', 'run_id, job_id', 'must not be NULL');
  end if;
  if force is null then
    perform jobs._invalid('jobs.backfill_start_v1', 'force', 'must be true or false');
  end if;
  update jobs.backfills b
     set status = 'running', completed_at = null, failed_at = null, error = null,
         updated_at = v_now
   where b.run_id = backfill_start_v1.run_id
  returning b.batches, b.rows_processed into v_batches, v_rows;
  if found then
    return query select 'adopted'::text, null::uuid, null::text, v_batches, v_rows;
    return;
  end if;

  if not backfill_start_v1.force then
    select b.run_id, b.checksum into v_done_run, v_done_checksum
      from jobs.backfills b
     where b.name = backfill_start_v1.name
       and b.status = 'completed'
     order by b.completed_at desc, b.id desc
     limit 1;
    if found then
      return query select 'skipped'::text, v_done_run, v_done_checksum, 0, 0::bigint;
      return;
    end if;
  end if;

  insert into jobs.backfills (name, run_id, job_id, tenant_id, status, checksum, environment,
                              forced, started_at, updated_at)
  values (backfill_start_v1.name, backfill_start_v1.run_id, backfill_start_v1.job_id,
          backfill_start_v1.tenant_id, 'running', backfill_start_v1.checksum,
          backfill_start_v1.environment, backfill_start_v1.force, v_now, v_now);
  return query select 'started'::text, null::uuid, null::text, 0, 0::bigint;
end;
$$;

-- jobs.backfill_progress_v1: record how far the pass of run `run_id` has got: `batches` pages
-- and `rows_processed` rows in all. The counts are totals, not increments, so a page that runs
-- again after a crash writes the same numbers and nothing is counted twice; a count below the
-- stored one is ignored. Answers whether a running pass took it.
-- Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED (worker kind). Locks the row.
create function jobs.backfill_progress_v1(run_id uuid, batches integer, rows_processed bigint)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker'], 'jobs.backfill_progress_v1');
  if batches is null or batches < 0 or rows_processed is null or rows_processed < 0 then
    perform jobs._invalid('jobs.backfill_progress_v1', 'batches, rows_processed',
                          'must be counts of at least 0');
  end if;
  update jobs.backfills b
     set batches = greatest(b.batches, backfill_progress_v1.batches),
         rows_processed = greatest(b.rows_processed, backfill_progress_v1.rows_processed),
         updated_at = jobs._now()
   where b.run_id = backfill_progress_v1.run_id
     and b.status = 'running';
  return found;
end;
$$;

-- jobs.backfill_finish_v1: end the pass of run `run_id`: status 'completed', or 'failed' with
-- `error` (at most 2,000 characters kept). Answers whether a running pass took it.
-- Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED (worker kind). Locks the row.
create function jobs.backfill_finish_v1(run_id uuid, status text, error text default null)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  perform jobs._require(array['worker'], 'jobs.backfill_finish_v1');
  if status is null or status not in ('completed', 'failed') then
    perform jobs._invalid('jobs.backfill_finish_v1', 'status', 'must be completed or failed');
  end if;
  update jobs.backfills b
     set status = backfill_finish_v1.status,
         completed_at = case when backfill_finish_v1.status = 'completed' then v_now end,
         failed_at = case when backfill_finish_v1.status = 'failed' then v_now end,
         error = left(backfill_finish_v1.error, 2000),
         updated_at = v_now
   where b.run_id = backfill_finish_v1.run_id
     and b.status = 'running';
  return found;
end;
$$;

-- jobs.backfills_v1: the ledger's rows, newest pass first: every pass of the backfill `backfill`
-- (NULL: of every backfill), at most `max_rows`. job_state is the state of the pass's job now (NULL once purged): a
-- row still 'running' whose job ended dead or cancelled is a pass that will not finish.
-- Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED (worker and operator kinds). Locks nothing.
create function jobs.backfills_v1(backfill text default null, max_rows integer default 1000)
returns table (
  id bigint,
  name text,
  run_id uuid,
  job_id uuid,
  tenant_id text,
  status text,
  job_state text,
  checksum text,
  environment text,
  forced boolean,
  batches integer,
  rows_processed bigint,
  started_at timestamptz,
  updated_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  error text
)
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker', 'operator'], 'jobs.backfills_v1');
  perform jobs._check_label('jobs.backfills_v1', 'backfill', backfills_v1.backfill, false);
  if max_rows is null or max_rows not between 1 and 10000 then
    perform jobs._invalid('jobs.backfills_v1', 'max_rows', 'must be from 1 to 10,000');
  end if;
  return query
    select b.id, b.name, b.run_id, b.job_id, b.tenant_id, b.status,
           (select j.state::text from jobs.jobs j where j.id = b.job_id), b.checksum,
           b.environment, b.forced, b.batches, b.rows_processed, b.started_at, b.updated_at,
           b.completed_at, b.failed_at, b.error
      from jobs.backfills b
     where backfills_v1.backfill is null or b.name = backfills_v1.backfill
     order by b.started_at desc, b.id desc
     limit backfills_v1.max_rows;
end;
$$;
