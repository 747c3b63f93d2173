-- 000_schema: the jobs schema, its tables and indexes.
--
-- Tables: jobs.jobs_live (the waiting and running jobs: all the hot path reads and writes),
-- jobs.jobs_history (the finished jobs, moved there by the statement that ends them, in
-- partitions the purge drops whole), jobs.steps (durable step records keyed by run),
-- jobs.queue_pauses (a pause is a row the claim reads), jobs.error_codes (every X_* code with its
-- SQLSTATE and its fix). The view jobs.jobs is both job tables as one, for readers.
-- Lock order everywhere: the job row, then its steps, then anything else.
-- States are plain text, narrowed by list in every reader: a newer schema may add a state, and an
-- older reader must fail loudly on it rather than have the database refuse the newer writer.

create schema if not exists jobs;

-- the live jobs. A row ends by moving: the statement that finishes it deletes it here and
-- inserts it into jobs.jobs_history, so this table holds only what is waiting or running, and
-- the claim's indexes stay the size of the backlog, whatever has run before
create table jobs.jobs_live (
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
  -- what the body returned (set by the ack that ends the row, so NULL on every live row)
  result jsonb,
  -- the job whose step enqueued this one: its settle wakes that parent when it waits for it
  parent_id uuid,
  constraint jobs_attempt_check check (attempt >= 0),
  constraint jobs_max_attempts_check check (max_attempts >= 1),
  constraint jobs_input_object_check check (jsonb_typeof(input) = 'object'),
  constraint jobs_live_state_check check (state in ('ready', 'delayed', 'running', 'suspended'))
);

-- the dedupe namespace: name, tenant (NULL is its own namespace) and key, over live rows only
-- (the only rows of this table), so a finished job never blocks the same work tomorrow. Not
-- partial: a predicate of the live states would let any statement that names a state read the
-- index whole, which is what the planner does when the statistics call the table empty
create unique index jobs_name_tenant_idempotency_live_idx
  on jobs.jobs_live (name, (coalesce(tenant_id, '')), idempotency_key);

-- the claim reads only waiting rows, in hand-out order; finished rows are not in this index.
-- capped second: the rows of capped jobs are read apart, so a backlog of them held back by a
-- limit is never walked past to reach the uncapped rows behind it
create index jobs_claim_idx
  on jobs.jobs_live (queue, capped, priority, run_at, id)
  where state in ('ready', 'delayed', 'suspended');

-- the running rows of capped jobs, by name and key: what the claim counts against a limit
create index jobs_capped_running_idx
  on jobs.jobs_live (name, concurrency_key)
  where state = 'running' and capped;

-- lapsed leases: a dead worker's rows are found without scanning the waiting ones. Every
-- running row has a lease; the second test keeps the index from a statement that finds a
-- running row by id (a heartbeat, an ack): as jobs_queue_created_idx below, only a statement
-- that names the lease reads it
create index jobs_lease_idx
  on jobs.jobs_live (lease_expires_at)
  where state = 'running' and lease_expires_at is not null;

-- the enqueue wake throttle looks for a waiting row announced in the same slot; listings by
-- queue read the waiting rows here and the running ones through jobs_lease_idx
-- (jobs.list_jobs). No running row: as no claim is HOT, an entry for the row a claim takes
-- cost the claim about 5 us a row (bench/results/queue-index-2026-12-04.md).
-- `queue is not null`, a test every row passes, so that only a statement naming a queue can
-- read it: when the statistics say the table is empty (an analyze saw it drained, then a
-- backlog came) the planner prices any index read whole at a page, and a lookup by id read
-- every entry through the third column instead of the primary key (tests/pgtap/032).
-- `state <> 'running'` rather than the waiting states, so that a statement asking for the
-- slot's rows proves this predicate and not jobs_claim_idx's, and cannot read the backlog
create index jobs_queue_created_idx
  on jobs.jobs_live (queue, created_at, id)
  where queue is not null and state <> 'running';

-- a parent's children, live: what a child's settle asks before it wakes a waiting parent, and
-- what a cancel cascades to. Partial: a job without a parent (nearly all) writes no entry
create index jobs_live_parent_idx
  on jobs.jobs_live (parent_id)
  where parent_id is not null;

-- the finished jobs (done, failed, dead, cancelled). Done rows, nearly all of them, are kept by the day they finished, so retention
-- drops a day's partition instead of deleting its rows one by one; the day partitions are made
-- ahead by jobs.prepare_history, and a row with no day partition yet lands in the default one.
-- The rarer ended rows (failed, dead, cancelled) are kept longer and deleted by age.
-- No primary key: a partitioned table's would have to include the state and the day. An id is
-- still one job: it is unique in jobs.jobs_live, a row leaves there in the statement that puts
-- it here, and an enqueue with a given id looks here before its insert commits.
-- Its columns are jobs.jobs_live's, in that order, with their defaults (not the checks: a
-- finished row is past them), and finished_at always set.
create table jobs.jobs_history (
  like jobs.jobs_live including defaults
) partition by list (state);

alter table jobs.jobs_history alter column finished_at set not null;

create table jobs.jobs_history_done
  partition of jobs.jobs_history for values in ('done')
  partition by range (finished_at);

create table jobs.jobs_history_done_default
  partition of jobs.jobs_history_done default;

create table jobs.jobs_history_ended
  partition of jobs.jobs_history for values in ('failed', 'dead', 'cancelled');

-- by id: inspect, requeue, the outbox's re-publish and an enqueue with a given id find a
-- finished job here
create index jobs_history_id_idx
  on jobs.jobs_history (id);

-- listings by queue, in the order of jobs_queue_created_idx
create index jobs_history_queue_created_idx
  on jobs.jobs_history (queue, created_at, id);

-- a parent's finished children: jobs.children and a resumed parent's outcomes
create index jobs_history_parent_idx
  on jobs.jobs_history (parent_id)
  where parent_id is not null;

-- every job, live or finished, as one relation: what a reader (psql, the CLI, another
-- language's client) selects from. The functions write the two tables; a write to the view goes
-- through to them (jobs._write_through), with the tables' defaults
create view jobs.jobs as
  select
    id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
    max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
    lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
    traceparent, enqueued_by, concurrency_key, capped, result, parent_id
    from jobs.jobs_live
  union all
  select
    id, name, queue, input, idempotency_key, tenant_id, run_id, state, priority, attempt,
    max_attempts, run_at, created_at, updated_at, finished_at, claimed_by, claimed_at,
    lease_expires_at, claims, last_error, last_error_code, last_error_stack, progress,
    traceparent, enqueued_by, concurrency_key, capped, result, parent_id
    from jobs.jobs_history;

alter view jobs.jobs alter column priority set default 0;
alter view jobs.jobs alter column attempt set default 0;
alter view jobs.jobs alter column claims set default 0;
alter view jobs.jobs alter column capped set default false;

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
