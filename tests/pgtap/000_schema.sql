-- 000_schema: the jobs schema, its tables, constraints and indexes.
begin;
\ir fixtures/factory.sql
select plan(57);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- the schema and its tables
select has_schema('jobs', 'schema jobs exists');
-- the runner installs with alembic, whose version table lives in the schema too
select tables_are('jobs', array['jobs_live', 'jobs_history', 'jobs_history_done',
                                'jobs_history_done_default', 'jobs_history_ended', 'steps', 'queue_pauses', 'error_codes', 'outbox',
                                'events', 'scheduler_tasks', 'scheduler_leases', 'workers',
                                'counter_buckets', 'declarations', 'limit_rules', 'limit_starts', 'limits_standing', 'size_limits', 'roles', 'wake_secret', 'tenant_bindings', 'redacted_keys', 'purge_cursor',
                                'backfills', 'webhook_endpoints', 'webhook_attempts', 'result_waits',
                                'alembic_version'],
                  'schema jobs holds exactly the tables the functions need, and alembic_version');

-- jobs.jobs: the columns every function reads, with their types
select columns_are('jobs', 'jobs', array[
  'id', 'name', 'queue', 'input', 'idempotency_key', 'tenant_id', 'run_id', 'state', 'priority',
  'attempt', 'max_attempts', 'run_at', 'created_at', 'updated_at', 'finished_at', 'claimed_by',
  'claimed_at', 'lease_expires_at', 'claims', 'last_error', 'last_error_code', 'last_error_stack',
  'progress', 'traceparent', 'enqueued_by', 'concurrency_key', 'capped', 'result', 'parent_id'],
  'jobs.jobs has the documented columns');
select columns_are('jobs', 'jobs_history',
                   array(select c.column_name::text
                           from information_schema.columns c
                          where c.table_schema = 'jobs' and c.table_name = 'jobs_live'),
                   'jobs.jobs_history has the columns of jobs.jobs_live');
select is(array(select c.column_name::text
                  from information_schema.columns c
                 where c.table_schema = 'jobs' and c.table_name = 'jobs_history'
                 order by c.ordinal_position),
          array(select c.column_name::text
                  from information_schema.columns c
                 where c.table_schema = 'jobs' and c.table_name = 'jobs_live'
                 order by c.ordinal_position),
          'and in the same order, so a row moves between them whole');
select col_is_pk('jobs', 'jobs_live', 'id', 'jobs.jobs_live is keyed by id');
select col_type_is('jobs', 'jobs', 'id', 'uuid', 'jobs.id is a uuid');
select col_type_is('jobs', 'jobs', 'input', 'jsonb', 'jobs.input is jsonb');
select col_type_is('jobs', 'jobs', 'claims', 'bigint', 'jobs.claims (the claim token) is a bigint');
select col_type_is('jobs', 'jobs', 'run_at', 'timestamp with time zone', 'jobs.run_at is a timestamptz');
select col_type_is('jobs', 'jobs', 'lease_expires_at', 'timestamp with time zone',
                   'jobs.lease_expires_at is a timestamptz');
select col_not_null('jobs', 'jobs_live', 'idempotency_key', 'every job has an idempotency key');
select col_is_null('jobs', 'jobs', 'tenant_id', 'tenant_id is nullable (NULL: no tenant)');
select col_not_null('jobs', 'jobs_live', 'run_id', 'every job has a run id');
select col_not_null('jobs', 'jobs_history', 'finished_at', 'every finished job has finished_at');
select col_default_is('jobs', 'jobs', 'claims', '0', 'claims starts at 0');
select col_default_is('jobs', 'jobs', 'attempt', '0', 'attempt starts at 0');

-- the check constraints refuse impossible rows even from a raw insert (R87: input is an object)
select throws_ok(
  $$insert into jobs.jobs (id, name, queue, input, idempotency_key, run_id, state, max_attempts,
                           run_at, created_at, updated_at)
    values (gen_random_uuid(), 'j', 'q', '[1]', 'k-raw-1', gen_random_uuid(), 'ready', 1,
            jobs._now(), jobs._now(), jobs._now())$$,
  '23514', null, 'a row whose input is not a JSON object is refused (R87)');
select throws_ok(
  $$insert into jobs.jobs (id, name, queue, input, idempotency_key, run_id, state, max_attempts,
                           run_at, created_at, updated_at)
    values (gen_random_uuid(), 'j', 'q', '"{}"', 'k-raw-2', gen_random_uuid(), 'ready', 1,
            jobs._now(), jobs._now(), jobs._now())$$,
  '23514', null, 'a row whose input is a JSON string is refused (R87)');
select throws_ok(
  $$insert into jobs.jobs (id, name, queue, input, idempotency_key, run_id, state, max_attempts,
                           run_at, created_at, updated_at)
    values (gen_random_uuid(), 'j', 'q', '{}', 'k-raw-3', gen_random_uuid(), 'ready', 0,
            jobs._now(), jobs._now(), jobs._now())$$,
  '23514', null, 'max_attempts below 1 is refused');
select throws_ok(
  $$insert into jobs.jobs (id, name, queue, input, idempotency_key, run_id, state, attempt,
                           max_attempts, run_at, created_at, updated_at)
    values (gen_random_uuid(), 'j', 'q', '{}', 'k-raw-4', gen_random_uuid(), 'ready', -1, 1,
            jobs._now(), jobs._now(), jobs._now())$$,
  '23514', null, 'a negative attempt is refused');

-- R5: the only unique indexes on jobs.jobs_live are the primary key and the live dedupe index
select is(
  array(select c.relname::text
          from pg_index x
          join pg_class c on c.oid = x.indexrelid
         where x.indrelid = 'jobs.jobs_live'::regclass and x.indisunique
         order by 1),
  array['jobs_live_pkey', 'jobs_name_tenant_idempotency_live_idx'],
  'R5: jobs.jobs_live has no unique index but jobs_live_pkey and the live dedupe index');
select throws_ok(
  $$insert into jobs.jobs_live (id, name, queue, input, idempotency_key, run_id, state,
                                max_attempts, run_at, created_at, updated_at)
    values (gen_random_uuid(), 'j', 'q', '{}', 'k-raw-5', gen_random_uuid(), 'done', 1,
            jobs._now(), jobs._now(), jobs._now())$$,
  '23514', null, 'a finished row is refused by the live table');
select throws_ok(
  $$insert into jobs.jobs_history (id, name, queue, input, idempotency_key, run_id, state,
                                   max_attempts, run_at, created_at, updated_at, finished_at)
    values (gen_random_uuid(), 'j', 'q', '{}', 'k-raw-6', gen_random_uuid(), 'ready', 1,
            jobs._now(), jobs._now(), jobs._now(), jobs._now())$$,
  '23514', null, 'a live row is refused by the history (no partition holds its state)');

-- R3: the dedupe index spans name, coalesced tenant and key, over live rows only
select matches(
  (select indexdef from pg_indexes
    where schemaname = 'jobs' and indexname = 'jobs_name_tenant_idempotency_live_idx'),
  '^CREATE UNIQUE INDEX .* \(name, COALESCE\(tenant_id, ''''::text\), idempotency_key\)',
  'R3: the dedupe index is unique on (name, COALESCE(tenant_id, ''''::text), idempotency_key)');
select ok(
  position('COALESCE(tenant_id, ''''::text)' in
    (select indexdef from pg_indexes
      where schemaname = 'jobs' and indexname = 'jobs_name_tenant_idempotency_live_idx')) > 0,
  'R3: the dedupe index definition contains COALESCE(tenant_id, ''''::text)');
-- live rows only: the index is on jobs.jobs_live, whose rows are the live states alone; not
-- partial, so no statement that names a state can read it whole (032_plan_stability)
select ok(
  (select indexdef from pg_indexes
    where schemaname = 'jobs' and indexname = 'jobs_name_tenant_idempotency_live_idx')
  like 'CREATE UNIQUE INDEX % ON jobs.jobs_live %' and
  (select indexdef from pg_indexes
    where schemaname = 'jobs' and indexname = 'jobs_name_tenant_idempotency_live_idx')
  not like '% WHERE %',
  'R3: the dedupe index is on jobs.jobs_live, whole');

-- the claim, lease and listing indexes
select has_index('jobs', 'jobs_live', 'jobs_claim_idx', array['queue', 'capped', 'priority', 'run_at', 'id'],
                 'the claim index is (queue, capped, priority, run_at, id): capped rows apart');
select ok(
  (select indexdef from pg_indexes where schemaname = 'jobs' and indexname = 'jobs_claim_idx')
  like $$%WHERE (state = ANY (ARRAY['ready'::text, 'delayed'::text, 'suspended'::text]))$$,
  'the claim index holds only waiting rows');
select has_index('jobs', 'jobs_live', 'jobs_lease_idx', array['lease_expires_at'],
                 'the lease index is on lease_expires_at');
select ok(
  (select indexdef from pg_indexes where schemaname = 'jobs' and indexname = 'jobs_lease_idx')
  like $$%WHERE ((state = 'running'::text) AND (lease_expires_at IS NOT NULL))$$,
  'the lease index holds only running rows, read only by a statement that names the lease');
select has_index('jobs', 'jobs_live', 'jobs_queue_created_idx', array['queue', 'created_at', 'id'],
                 'the queue listing index is (queue, created_at, id)');
select ok(
  (select indexdef from pg_indexes where schemaname = 'jobs' and indexname = 'jobs_queue_created_idx')
  like $$%WHERE ((queue IS NOT NULL) AND (state <> 'running'::text))$$,
  'the queue listing index is read only by a statement that names a queue, and holds no '
  'running row (a claim writes no entry in it)');
select indexes_are('jobs', 'jobs_live',
                   array['jobs_live_pkey', 'jobs_name_tenant_idempotency_live_idx',
                         'jobs_claim_idx', 'jobs_lease_idx', 'jobs_queue_created_idx',
                         'jobs_run_shared_idx', 'jobs_capped_running_idx', 'jobs_live_parent_idx'],
                   'jobs.jobs_live carries no index the functions do not use (each costs every '
                   'insert and, as no claim is HOT, every claim it covers): none on (created_at, '
                   'id) alone, none of finished rows; the one of jobs continuing another''s run, '
                   'the running rows of capped jobs that the claim counts against limits, and '
                   'the children of a parent');
select indexes_are('jobs', 'jobs_history',
                   array['jobs_history_id_idx', 'jobs_history_queue_created_idx',
                         'jobs_history_run_shared_idx', 'jobs_history_parent_idx'],
                   'jobs.jobs_history is indexed by id, for listings, by shared run and by parent');
select indexes_are('jobs', 'jobs_history_done_default',
                   array['jobs_history_done_default_id_idx',
                         'jobs_history_done_default_queue_created_at_id_idx',
                         'jobs_history_done_default_run_id_idx', 'jobs_done_idx',
                         'jobs_history_done_default_parent_id_idx'],
                   'the default partition of done rows is also indexed by age: the purge deletes '
                   'its rows one by one; a day partition goes whole and needs no such index');
select ok(
  (select indexdef from pg_indexes where schemaname = 'jobs' and indexname = 'jobs_capped_running_idx')
  like $$%(name, concurrency_key) WHERE ((state = 'running'::text) AND capped)$$,
  'the capped running index holds only the running rows of capped jobs');
select has_index('jobs', 'jobs_history_ended', 'jobs_dead_idx', array['queue'],
                 'the dead-rows index is on queue');
select ok(
  (select indexdef from pg_indexes where schemaname = 'jobs' and indexname = 'jobs_dead_idx')
  like $$%WHERE (state = 'dead'::text)$$,
  'the dead-rows index holds only dead rows, so no claim or settle of a live job writes to it');

-- jobs.steps: keyed by (run_id, name)
select col_is_pk('jobs', 'steps', array['run_id', 'name'], 'jobs.steps is keyed by (run_id, name)');
select col_default_is('jobs', 'steps', 'attempts', '1', 'a step starts at 1 attempt');

-- jobs.queue_pauses: one row per paused queue
select col_is_pk('jobs', 'queue_pauses', 'queue', 'jobs.queue_pauses is keyed by queue');

-- jobs.error_codes: code is the key, sqlstate is unique
select col_is_pk('jobs', 'error_codes', 'code', 'jobs.error_codes is keyed by code');
select col_is_unique('jobs', 'error_codes', 'sqlstate', 'no two codes share a sqlstate');

-- the composite types the functions answer
select types_are('jobs', array['enqueue_result', '_enqueue_request', 'claimed_job', 'settle_result',
                               'step_record', 'queue_stat', 'outbox_record', 'event_lookup',
                               'task_state', 'job_summary', 'bulk_result', 'counter_row',
                               'queue_depth_row', 'purge_result', 'job_type', 'declare_result',
                               'limit_row', 'limit_rule', 'heartbeat_answer', 'horizon_holder',
                               'job_outcome', 'children_wait'],
                 'schema jobs declares the answer types');
select has_composite('jobs', 'enqueue_result', 'jobs.enqueue_result exists');
select ok(
  (select indexdef from pg_indexes where schemaname = 'jobs' and indexname = 'jobs_live_parent_idx')
  like $$%(parent_id) WHERE (parent_id IS NOT NULL)$$,
  'the parent index holds only children: a job without a parent writes no entry');
select ok(
  (select 'security_invoker=true' = any(c.reloptions)
     from pg_class c where c.oid = 'jobs.jobs'::regclass),
  'jobs.jobs reads its tables as its reader, so the tenant policies hold through it');

-- the hot table is vacuumed early: two dead tuples a job, no HOT update possible; and it is
-- analyzed after a fixed count of changes, like the steps and the outbox
-- (compared as sets: `alter table ... set` moves a changed option to the end)
select is((select array_agg(o order by o)
             from pg_class c, unnest(c.reloptions) o where c.oid = 'jobs.jobs_live'::regclass),
          array['autovacuum_analyze_scale_factor=0', 'autovacuum_analyze_threshold=2000',
                'autovacuum_vacuum_cost_delay=0', 'autovacuum_vacuum_insert_scale_factor=0.02',
                'autovacuum_vacuum_scale_factor=0.02', 'autovacuum_vacuum_threshold=1000',
                'vacuum_truncate=false'],
          'jobs.jobs_live carries its autovacuum settings, and is never truncated by a vacuum');
select is((select array_agg(o order by o)
             from pg_class c, unnest(c.reloptions) o where c.oid = 'jobs.steps'::regclass),
          array['autovacuum_analyze_scale_factor=0', 'autovacuum_analyze_threshold=2000'],
          'jobs.steps is analyzed after 2,000 changes');
select is((select array_agg(o order by o)
             from pg_class c, unnest(c.reloptions) o where c.oid = 'jobs.outbox'::regclass),
          array['autovacuum_analyze_scale_factor=0', 'autovacuum_analyze_threshold=2000'],
          'jobs.outbox is analyzed after 2,000 changes');

-- the view: both tables as one, and a write through it lands in the table of the row's state
select has_view('jobs', 'jobs', 'jobs.jobs is a view of both job tables');
select lives_ok(
  $$insert into jobs.jobs (id, name, queue, input, idempotency_key, run_id, state, max_attempts,
                           run_at, created_at, updated_at)
    values ('00000000-0000-0000-0000-0000000000a1', 'j', 'q', '{}', 'k-view-1',
            '00000000-0000-0000-0000-0000000000a1', 'ready', 1, jobs._now(), jobs._now(),
            jobs._now())$$,
  'an insert through the view is taken');
select is((select count(*)::integer from jobs.jobs_live
            where id = '00000000-0000-0000-0000-0000000000a1'),
          1, 'a waiting row written through the view is in jobs.jobs_live');
update jobs.jobs set state = 'dead' where id = '00000000-0000-0000-0000-0000000000a1';
select is((select (count(*), min(finished_at))::text from jobs.jobs_history
            where id = '00000000-0000-0000-0000-0000000000a1'),
          (1, jobs._now())::text,
          'a row updated to a finished state through the view moves to the history, finished now');
select is((select count(*)::integer from jobs.jobs_live
            where id = '00000000-0000-0000-0000-0000000000a1'),
          0, 'and leaves jobs.jobs_live');
delete from jobs.jobs where id = '00000000-0000-0000-0000-0000000000a1';
select is((select count(*)::integer from jobs.jobs
            where id = '00000000-0000-0000-0000-0000000000a1'),
          0, 'a delete through the view removes the row from whichever table holds it');

select * from finish();
rollback;
