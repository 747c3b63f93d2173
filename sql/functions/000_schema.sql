-- 000_schema: the jobs schema, its tables and indexes.
--
-- Tables: jobs.jobs (one row per job, kept after it finishes), jobs.steps (durable step records
-- keyed by run), jobs.queue_pauses (a pause is a row the claim reads), jobs.error_codes (every
-- X_* code with its SQLSTATE and its fix).
-- Lock order everywhere: the job row, then its steps, then anything else.
-- States are plain text, narrowed by list in every reader: a newer schema may add a state, and an
-- older reader must fail loudly on it rather than have the database refuse the newer writer.

create schema if not exists jobs;

create table jobs.jobs (
  id uuid primary key,
  name text not null,
  queue text not null,
  input jsonb not null,
  idempotency_key text not null,
  tenant_id text,
  run_id uuid not null,
  state text not null,
  priority integer not null default 0,
  attempt integer not null default 0,
  max_attempts integer not null,
  run_at timestamptz not null,
  created_at timestamptz not null,
  updated_at timestamptz not null,
  finished_at timestamptz,
  -- the lease: who holds the row and until when; claims moves on every claim and is never reset,
  -- so it fences every settle, renewal and step write of a superseded attempt
  claimed_by text,
  claimed_at timestamptz,
  lease_expires_at timestamptz,
  claims bigint not null default 0,
  last_error text,
  last_error_code text,
  last_error_stack text,
  progress jsonb,
  traceparent text,
  enqueued_by text,
  -- a limit the claim enforces: the run's key under a keyed concurrency declaration, and whether
  -- the job's name is capped at all (kept in step with jobs.declarations by jobs.declare_job),
  -- so capped rows wait apart and an uncapped claim never reads them
  concurrency_key text,
  capped boolean not null default false,
  constraint jobs_attempt_check check (attempt >= 0),
  constraint jobs_max_attempts_check check (max_attempts >= 1),
  constraint jobs_input_object_check check (jsonb_typeof(input) = 'object')
);

-- the dedupe namespace: name, tenant (NULL is its own namespace) and key, over live rows only,
-- so a finished job never blocks the same work tomorrow
create unique index jobs_name_tenant_idempotency_live_idx
  on jobs.jobs (name, (coalesce(tenant_id, '')), idempotency_key)
  where state in ('ready', 'delayed', 'running', 'suspended');

-- the claim reads only waiting rows, in hand-out order; finished rows are not in this index.
-- capped second: the rows of capped jobs are read apart, so a backlog of them held back by a
-- limit is never walked past to reach the uncapped rows behind it
create index jobs_claim_idx
  on jobs.jobs (queue, capped, priority, run_at, id)
  where state in ('ready', 'delayed', 'suspended');

-- the running rows of capped jobs, by name and key: what the claim counts against a limit
create index jobs_capped_running_idx
  on jobs.jobs (name, concurrency_key)
  where state = 'running' and capped;

-- lapsed leases: a dead worker's rows are found without scanning the waiting ones
create index jobs_lease_idx
  on jobs.jobs (lease_expires_at)
  where state = 'running';

-- the enqueue wake throttle looks for a row announced in the same slot; listings by queue
create index jobs_queue_created_idx
  on jobs.jobs (queue, created_at, id);

create table jobs.steps (
  run_id uuid not null,
  name text not null,
  status text not null,
  output jsonb,
  error text,
  attempts integer not null default 1,
  started_at timestamptz not null,
  updated_at timestamptz not null,
  finished_at timestamptz,
  wake_at timestamptz,
  primary key (run_id, name)
);

create table jobs.queue_pauses (
  queue text primary key,
  paused_at timestamptz not null,
  paused_by text
);

create table jobs.error_codes (
  code text primary key,
  sqlstate char(5) not null unique,
  fix text not null
);
