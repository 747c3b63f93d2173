-- 020_enqueue: jobs.enqueue and jobs.enqueue_many: answers, defaults, validation, and the
-- dedupe on the live (name, tenant, idempotency key), with the regression cases R1-R7, R16, R87.
begin;
\ir fixtures/factory.sql
select plan(170);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- enqueue answers (id, run_id, deduped) and stores the row as asked

select * from jobs.enqueue(name => 'e1', input => '{"user_id": 1}', idempotency_key => 'k-e1') \gset e1_
select is(:'e1_deduped'::boolean, false, 'a new job answers deduped = false');
select is((jobs_test.job(:'e1_id')).id, :'e1_id'::uuid, 'the answered id is the row''s id');
select is((jobs_test.job(:'e1_id')).run_id, :'e1_run_id'::uuid, 'the answered run_id is the row''s run_id');
select is(substr(replace(:'e1_id', '-', ''), 13, 1), '7', 'a generated id is a uuid v7');

-- a run_at of now (the default) gives 'ready', due now
select is((jobs_test.job(:'e1_id')).state, 'ready', 'no run_at: state ready');
select is((jobs_test.job(:'e1_id')).run_at, jobs._now(), 'no run_at: run_at is now');
select is((jobs_test.job(:'e1_id')).created_at, jobs._now(), 'created_at is now');

-- defaults: queue 'default', max_attempts 20, priority 0, attempt 0, no tenant, no claim
select is((jobs_test.job(:'e1_id')).queue, 'default', 'queue defaults to ''default''');
select is((jobs_test.job(:'e1_id')).max_attempts, 20, 'max_attempts defaults to 20');
select is((jobs_test.job(:'e1_id')).priority, 0, 'priority defaults to 0');
select is((jobs_test.job(:'e1_id')).attempt, 0, 'a new job has attempt 0');
select is((jobs_test.job(:'e1_id')).claims, 0::bigint, 'a new job has claim token 0');
select is((jobs_test.job(:'e1_id')).tenant_id, null, 'tenant_id defaults to NULL');

-- R87: input is stored as a JSON object, not as a string holding one
select is(jsonb_typeof((jobs_test.job(:'e1_id')).input), 'object', 'R87: input is stored as a JSON object');
select is((jobs_test.job(:'e1_id')).input, '{"user_id": 1}'::jsonb, 'R87: input is stored unchanged');

-- a future run_at gives 'delayed'; run_at exactly now, or past, gives 'ready'
select jobs_test.enqueue(run_at => '2026-01-01 00:00:01+00') as at_future,
       jobs_test.enqueue(run_at => '2026-01-01 00:00:00+00') as at_now,
       jobs_test.enqueue(run_at => '2025-12-31 00:00:00+00') as at_past,
       jobs_test.enqueue(run_at => '2026-01-02 00:00:00+00') as at_tomorrow \gset
select is((jobs_test.job(:'at_future')).state, 'delayed', 'a run_at one second ahead gives state delayed');
select is((jobs_test.job(:'at_now')).state, 'ready', 'a run_at of exactly now gives state ready');
select is((jobs_test.job(:'at_past')).state, 'ready', 'a past run_at gives state ready');
select is((jobs_test.job(:'at_tomorrow')).run_at, '2026-01-02 00:00:00+00'::timestamptz,
          'the run_at given is stored');

-- supplied id and run_id are kept; traceparent, enqueued_by, tenant, queue, priority and
-- max_attempts are stamped as given
select * from jobs.enqueue(
  name => 'e2', input => '{}', idempotency_key => 'k-e2', queue => 'mail', tenant_id => 'acme',
  max_attempts => 3, priority => -5, id => '01950000-0000-7000-8000-000000000001',
  run_id => '11111111-1111-4111-8111-111111111111',
  traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
  enqueued_by => 'api@host-1') \gset e2_
select is(:'e2_id'::uuid, '01950000-0000-7000-8000-000000000001'::uuid, 'a supplied id is kept');
select is(:'e2_run_id'::uuid, '11111111-1111-4111-8111-111111111111'::uuid, 'a supplied run_id is answered');
select is((jobs_test.job(:'e2_id')).run_id, '11111111-1111-4111-8111-111111111111'::uuid,
          'a supplied run_id is stored');
select is((jobs_test.job(:'e2_id')).traceparent,
          '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'traceparent is stamped');
select is((jobs_test.job(:'e2_id')).enqueued_by, 'api@host-1', 'enqueued_by is stamped');
select is((jobs_test.job(:'e2_id')).tenant_id, 'acme', 'tenant_id is stamped');
select is((jobs_test.job(:'e2_id')).queue, 'mail', 'queue is stamped');
select is((jobs_test.job(:'e2_id')).priority, -5, 'priority is stamped');
select is((jobs_test.job(:'e2_id')).max_attempts, 3, 'max_attempts is stamped');

-- ---------------------------------------------------------------------------------------------
-- validation: every refusal raises its code, and a refused enqueue leaves the table unchanged

select jobs_test.job_count() as refusals_before \gset
select throws_ok($$select jobs.enqueue(name => null, input => '{}', idempotency_key => 'k-bad')$$,
                 'JQ001', null, 'NULL name raises JQ001');
select throws_ok($$select jobs.enqueue(name => '', input => '{}', idempotency_key => 'k-bad')$$,
                 'JQ001', null, 'empty name raises JQ001');
select throws_ok($$select jobs.enqueue(name => '   ', input => '{}', idempotency_key => 'k-bad')$$,
                 'JQ001', null, 'blank name raises JQ001');
select throws_ok($$select jobs.enqueue(name => 'x', input => null, idempotency_key => 'k-bad')$$,
                 'JQ002', null, 'NULL input raises JQ002');
select throws_ok($$select jobs.enqueue(name => 'x', input => '"str"', idempotency_key => 'k-bad')$$,
                 'JQ002', null, 'a JSON string input raises JQ002 (R87)');
select throws_ok($$select jobs.enqueue(name => 'x', input => '"{\"a\": 1}"', idempotency_key => 'k-bad')$$,
                 'JQ002', null, 'a JSON string holding an object raises JQ002 (R87)');
select throws_ok($$select jobs.enqueue(name => 'x', input => '[1]', idempotency_key => 'k-bad')$$,
                 'JQ002', null, 'a JSON array input raises JQ002');
select throws_ok($$select jobs.enqueue(name => 'x', input => 'null', idempotency_key => 'k-bad')$$,
                 'JQ002', null, 'a JSON null input raises JQ002');
select throws_ok($$select jobs.enqueue(name => 'x', input => '{}', idempotency_key => null)$$,
                 'JQ003', null, 'NULL idempotency_key raises JQ003');
select throws_ok($$select jobs.enqueue(name => 'x', input => '{}', idempotency_key => '')$$,
                 'JQ003', null, 'empty idempotency_key raises JQ003');
select throws_ok($$select jobs.enqueue(name => 'x', input => '{}', idempotency_key => 'k-bad', queue => '')$$,
                 'JQ001', null, 'empty queue raises JQ001');
select throws_ok($$select jobs.enqueue(name => 'x', input => '{}', idempotency_key => 'k-bad', tenant_id => '')$$,
                 'JQ001', null, 'tenant_id '''' raises JQ001');
select throws_ok($$select jobs.enqueue(name => 'x', input => '{}', idempotency_key => 'k-bad', max_attempts => 0)$$,
                 'JQ001', null, 'max_attempts 0 raises JQ001');
select throws_ok($$select jobs.enqueue(name => 'x', input => '{}', idempotency_key => 'k-bad', on_conflict => 'bogus')$$,
                 'JQ001', null, 'on_conflict ''bogus'' raises JQ001');
select throws_ok($$select jobs.enqueue(name => 'x', input => '{}', idempotency_key => 'k-bad', on_conflict => null)$$,
                 'JQ001', null, 'NULL on_conflict raises JQ001');
select throws_ok($$select jobs.enqueue(name => 'x', input => '{}', idempotency_key => 'k-bad', run_at => 'infinity')$$,
                 'JQ001', null, 'run_at ''infinity'' raises JQ001');
select throws_ok($$select jobs.enqueue(name => 'x', input => '{}', idempotency_key => 'k-bad', run_at => '-infinity')$$,
                 'JQ001', null, 'run_at ''-infinity'' raises JQ001');
select is(jobs_test.job_count(), :'refusals_before'::bigint, 'a refused enqueue leaves the table unchanged');
select is(
  (jobs.enqueue(name => 'x', input => '{}', idempotency_key => 'k-bad')).deduped, false,
  'a refused enqueue holds no key: the same request, valid, inserts a new row');

-- ---------------------------------------------------------------------------------------------
-- R1: two different job names with the same key and tenant are two jobs

select * from jobs.enqueue(name => 'r1-a', input => '{}', idempotency_key => 'k-r1', tenant_id => 't1') \gset r1a_
select * from jobs.enqueue(name => 'r1-b', input => '{}', idempotency_key => 'k-r1', tenant_id => 't1') \gset r1b_
select is(:'r1b_deduped'::boolean, false, 'R1: another job name with the same key is not deduped');
select isnt(:'r1b_id'::uuid, :'r1a_id'::uuid, 'R1: it gets its own id');
select is((jobs_test.job(:'r1a_id')).name, 'r1-a', 'R1: the first id holds the first name');
select is((jobs_test.job(:'r1b_id')).name, 'r1-b', 'R1: the second id holds the second name');
select is((select count(*) from jobs.jobs where idempotency_key = 'k-r1'), 2::bigint, 'R1: two rows');

-- R2: the same name and key under tenants A and B are two jobs, each in its tenant
select * from jobs.enqueue(name => 'r2', input => '{}', idempotency_key => 'k-r2', tenant_id => 'A') \gset r2a_
select * from jobs.enqueue(name => 'r2', input => '{}', idempotency_key => 'k-r2', tenant_id => 'B') \gset r2b_
select is(:'r2b_deduped'::boolean, false, 'R2: tenant B is not deduped against tenant A');
select isnt(:'r2b_id'::uuid, :'r2a_id'::uuid, 'R2: tenant B gets its own id');
select is((jobs_test.job(:'r2b_id')).tenant_id, 'B', 'R2: the id answered to B has tenant_id B');
select is((jobs_test.job(:'r2a_id')).tenant_id, 'A', 'R2: the id answered to A has tenant_id A');
select is((select count(*) from jobs.jobs where idempotency_key = 'k-r2'), 2::bigint, 'R2: two rows');

-- R3/R4: two tenantless enqueues of the same name and key are one job; the second is a dedupe,
-- never an error
select * from jobs.enqueue(name => 'r3', input => '{}', idempotency_key => 'k-r3') \gset r3a_
select lives_ok($$select jobs.enqueue(name => 'r3', input => '{}', idempotency_key => 'k-r3')$$,
                'R4: a tenantless duplicate does not raise');
select * from jobs.enqueue(name => 'r3', input => '{"other": true}', idempotency_key => 'k-r3') \gset r3b_
select is(:'r3b_deduped'::boolean, true, 'R3: the tenantless duplicate answers deduped = true');
select is(:'r3b_id'::uuid, :'r3a_id'::uuid, 'R3: the duplicate answers the first id');
select is(:'r3b_run_id'::uuid, :'r3a_run_id'::uuid, 'R3: the duplicate answers the first run_id');
select is((select count(*) from jobs.jobs where idempotency_key = 'k-r3'), 1::bigint, 'R3: one row');
select is((jobs_test.job(:'r3a_id')).input, '{}'::jsonb, 'R3: the holder''s input is not overwritten');
select ok(
  position('COALESCE(tenant_id, ''''::text)' in
    (select indexdef from pg_indexes where indexname = 'jobs_name_tenant_idempotency_live_idx')) > 0
  and position('ON jobs.jobs_live ' in
    (select indexdef from pg_indexes where indexname = 'jobs_name_tenant_idempotency_live_idx')) > 0,
  'R3: the unique index coalesces tenant_id and covers the live rows only (jobs.jobs_live)');
-- a tenantless job and a tenant's job never share a namespace
select is(
  (jobs.enqueue(name => 'r3', input => '{}', idempotency_key => 'k-r3', tenant_id => 'A')).deduped,
  false, 'R3: a tenant''s job is not deduped against a tenantless one');

-- R5: no narrower unique index exists to turn a dedupe into an error
select is(
  array(select c.relname::text from pg_index x join pg_class c on c.oid = x.indexrelid
         where x.indrelid = 'jobs.jobs_live'::regclass and x.indisunique order by 1),
  array['jobs_live_pkey', 'jobs_name_tenant_idempotency_live_idx'],
  'R5: the only unique indexes are jobs_live_pkey and jobs_name_tenant_idempotency_live_idx');

-- ---------------------------------------------------------------------------------------------
-- R6: a finished job never blocks its key: enqueue -> claim -> ack -> enqueue again is new

select jobs_test.done_job(name => 'r6', idempotency_key => 'k-r6') as r6_done \gset
select * from jobs.enqueue(name => 'r6', input => '{}', idempotency_key => 'k-r6') \gset r6_
select is(:'r6_deduped'::boolean, false, 'R6: after done, the same key inserts a new row');
select isnt(:'r6_id'::uuid, :'r6_done'::uuid, 'R6: the new row has a new id');
select is((jobs_test.job(:'r6_id')).state, 'ready', 'R6: the new row is ready');

-- R6: dead, failed and cancelled rows never block either
select jobs_test.enqueue(name => 'r6-dead', idempotency_key => 'k-r6-end') as r6_dead \gset
select jobs_test.enqueue(name => 'r6-failed', idempotency_key => 'k-r6-end') as r6_failed \gset
select jobs_test.enqueue(name => 'r6-cancelled', idempotency_key => 'k-r6-end') as r6_cancelled \gset
update jobs.jobs set state = 'dead' where id = :'r6_dead';
update jobs.jobs set state = 'failed' where id = :'r6_failed';
update jobs.jobs set state = 'cancelled' where id = :'r6_cancelled';
select is((jobs.enqueue(name => 'r6-dead', input => '{}', idempotency_key => 'k-r6-end')).deduped,
          false, 'R6: a dead row does not hold its key');
select is((jobs.enqueue(name => 'r6-failed', input => '{}', idempotency_key => 'k-r6-end')).deduped,
          false, 'R6: a failed row does not hold its key');
select is((jobs.enqueue(name => 'r6-cancelled', input => '{}', idempotency_key => 'k-r6-end')).deduped,
          false, 'R6: a cancelled row does not hold its key');

-- every live state holds the key: delayed, running and suspended rows dedupe too
select jobs_test.enqueue(name => 'live-delayed', idempotency_key => 'k-live',
                         run_at => '2026-02-01 00:00:00+00') as live_delayed \gset
select is((jobs.enqueue(name => 'live-delayed', input => '{}', idempotency_key => 'k-live')).id,
          :'live_delayed'::uuid, 'a delayed row holds its key');
select jobs_test.enqueue(name => 'live-running', idempotency_key => 'k-live', queue => 'q-live-running') as live_running \gset
select jobs_test.claim_one(queue => 'q-live-running') \g /dev/null
select is((jobs.enqueue(name => 'live-running', input => '{}', idempotency_key => 'k-live')).id,
          :'live_running'::uuid, 'a running row holds its key');
select jobs_test.enqueue(name => 'live-suspended', idempotency_key => 'k-live') as live_suspended \gset
update jobs.jobs set state = 'suspended' where id = :'live_suspended';
select is((jobs.enqueue(name => 'live-suspended', input => '{}', idempotency_key => 'k-live')).id,
          :'live_suspended'::uuid, 'a suspended row holds its key');

-- on_conflict => 'error' on a live duplicate raises JQ004 and inserts nothing
select jobs_test.enqueue(name => 'oc', idempotency_key => 'k-oc') as oc_holder \gset
select jobs_test.job_count() as oc_before \gset
select throws_ok(
  $$select jobs.enqueue(name => 'oc', input => '{}', idempotency_key => 'k-oc', on_conflict => 'error')$$,
  'JQ004', null, 'on_conflict error: a live duplicate raises JQ004');
select is(jobs_test.job_count(), :'oc_before'::bigint, 'on_conflict error: nothing is inserted');
select is(
  (jobs.enqueue(name => 'oc', input => '{}', idempotency_key => 'k-oc-new', on_conflict => 'error')).deduped,
  false, 'on_conflict error: a free key inserts as usual');

-- ---------------------------------------------------------------------------------------------
-- R16: a caller-supplied id that exists answers that row, live or finished, and inserts nothing;
-- an id that names a different job (another name, tenant or key) is refused, never reused

select jobs_test.done_job(name => 'r16', idempotency_key => 'k-r16',
                          id => '01950000-0000-7000-8000-000000000016') \g /dev/null
select (jobs_test.job('01950000-0000-7000-8000-000000000016')).run_id as r16_done_run_id \gset
select jobs_test.job_count() as r16_before \gset
select * from jobs.enqueue(name => 'r16', input => '{}', idempotency_key => 'k-r16',
                           id => '01950000-0000-7000-8000-000000000016') \gset r16_
select is(:'r16_deduped'::boolean, true, 'R16: a done job''s id answers deduped = true');
select is(:'r16_id'::uuid, '01950000-0000-7000-8000-000000000016'::uuid, 'R16: the same id is answered');
select is(:'r16_run_id'::uuid, :'r16_done_run_id'::uuid, 'R16: the same run_id is answered');
select is((select count(*) from jobs.jobs where id = '01950000-0000-7000-8000-000000000016'),
          1::bigint, 'R16: one row has the id');
select is(jobs_test.job_count(), :'r16_before'::bigint, 'R16: no row was inserted');
select is((jobs_test.job('01950000-0000-7000-8000-000000000016')).state, 'done',
          'R16: the done row is left done');
select is(
  (jobs.enqueue(name => 'r16', input => '{}', idempotency_key => 'k-r16',
                id => '01950000-0000-7000-8000-000000000016')).deduped,
  true, 'R16: the same id and the same key, after done, answers deduped = true');
select is(jobs_test.job_count(), :'r16_before'::bigint, 'R16: still no row was inserted');

-- R16 while live
select jobs_test.enqueue(name => 'r16-live', idempotency_key => 'k-r16-live',
                         id => '01950000-0000-7000-8000-000000000017') \g /dev/null
select * from jobs.enqueue(name => 'r16-live', input => '{}', idempotency_key => 'k-r16-live',
                           id => '01950000-0000-7000-8000-000000000017') \gset r16l_
select is(:'r16l_deduped'::boolean, true, 'R16: a live job''s id answers deduped = true');
select is(:'r16l_id'::uuid, '01950000-0000-7000-8000-000000000017'::uuid, 'R16: the live id is answered');
select throws_ok(
  $$select jobs.enqueue(name => 'r16-live', input => '{}', idempotency_key => 'k-r16-live-other',
                        id => '01950000-0000-7000-8000-000000000017')$$,
  'JQ004', null, 'an id naming a different job raises JQ004 even under dedupe');
-- under on_conflict => 'error' an existing id raises JQ004
select throws_ok(
  $$select jobs.enqueue(name => 'r16', input => '{}', idempotency_key => 'k-r16',
                        id => '01950000-0000-7000-8000-000000000016', on_conflict => 'error')$$,
  'JQ004', null, 'R16: on_conflict error: an existing id raises JQ004');
-- a new supplied id whose key a live job holds dedupes to the holder
select is(
  (jobs.enqueue(name => 'r16-live', input => '{}', idempotency_key => 'k-r16-live',
                id => '01950000-0000-7000-8000-000000000018')).id,
  '01950000-0000-7000-8000-000000000017'::uuid, 'a fresh id with a held key dedupes to the holder');

-- ---------------------------------------------------------------------------------------------
-- enqueue_many: one answer per request, in input order

create temporary table many_1 on commit drop as
  select r.ord, r.id, r.run_id, r.deduped
    from jobs.enqueue_many(requests => $$[
      {"name": "m-a", "input": {"n": 1}, "idempotency_key": "k-m1"},
      {"name": "m-b", "input": {"n": 2}, "idempotency_key": "k-m2", "queue": "mail",
       "run_at": "2026-01-01 01:00:00+00", "priority": 3, "max_attempts": 5, "tenant_id": "acme",
       "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "enqueued_by": "me"},
      {"name": "m-c", "input": {"n": 3}, "idempotency_key": "k-m3"}
    ]$$) with ordinality as r(id, run_id, deduped, ord);
select results_eq(
  $$select m.ord, j.name, m.deduped from many_1 m join jobs.jobs j on j.id = m.id order by m.ord$$,
  $$values (1::bigint, 'm-a', false), (2, 'm-b', false), (3, 'm-c', false)$$,
  'enqueue_many answers one row per request, in input order');
select is(
  (select count(*) from many_1 m join jobs.jobs j on j.id = m.id and j.run_id = m.run_id),
  3::bigint, 'enqueue_many answers each row''s run_id');
select results_eq(
  $$select j.queue, j.state, j.priority, j.max_attempts, j.tenant_id, j.traceparent, j.enqueued_by,
           jsonb_typeof(j.input)
      from many_1 m join jobs.jobs j on j.id = m.id where m.ord = 2$$,
  $$values ('mail', 'delayed', 3, 5, 'acme', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'me', 'object')$$,
  'enqueue_many stores every field given, and a future run_at gives delayed');
select results_eq(
  $$select j.queue, j.state, j.priority, j.max_attempts, j.tenant_id, j.run_at
      from many_1 m join jobs.jobs j on j.id = m.id where m.ord = 1$$,
  $$values ('default', 'ready', 0, 20, null::text, '2026-01-01 00:00:00+00'::timestamptz)$$,
  'enqueue_many defaults: queue default, ready now, priority 0, max_attempts 20, no tenant');

-- a key repeated inside the batch dedupes to its first occurrence
create temporary table many_2 on commit drop as
  select r.ord, r.id, r.run_id, r.deduped
    from jobs.enqueue_many(requests => $$[
      {"name": "m-rep", "input": {}, "idempotency_key": "k-rep"},
      {"name": "m-rep", "input": {}, "idempotency_key": "k-rep-other"},
      {"name": "m-rep", "input": {}, "idempotency_key": "k-rep"}
    ]$$) with ordinality as r(id, run_id, deduped, ord);
select results_eq(
  $$select ord, deduped from many_2 order by ord$$,
  $$values (1::bigint, false), (2, false), (3, true)$$,
  'a key repeated in the batch: the repeat is deduped');
select is((select id from many_2 where ord = 3), (select id from many_2 where ord = 1),
          'a key repeated in the batch dedupes to its first occurrence');
select is((select count(*) from jobs.jobs where name = 'm-rep'), 2::bigint,
          'a key repeated in the batch inserts one row');

-- a key held by an existing live job dedupes to it; a supplied id is respected; an existing id
-- (even of a done job) dedupes to that row (R16)
create temporary table many_3 on commit drop as
  select r.ord, r.id, r.run_id, r.deduped
    from jobs.enqueue_many(requests => format($$[
      {"name": "oc", "input": {}, "idempotency_key": "k-oc"},
      {"name": "m-id", "input": {}, "idempotency_key": "k-m-id", "id": "01950000-0000-7000-8000-0000000000a1",
       "run_id": "22222222-2222-4222-8222-222222222222"},
      {"name": "r16", "input": {}, "idempotency_key": "k-r16", "id": "01950000-0000-7000-8000-000000000016"}
    ]$$)::jsonb) with ordinality as r(id, run_id, deduped, ord);
select results_eq(
  $$select ord, id, deduped from many_3 order by ord$$,
  format($$values (1::bigint, %L::uuid, true),
                  (2, '01950000-0000-7000-8000-0000000000a1'::uuid, false),
                  (3, '01950000-0000-7000-8000-000000000016'::uuid, true)$$, :'oc_holder'),
  'enqueue_many: a live key dedupes to its holder, a supplied id is kept, an existing id dedupes');
select is((select run_id from many_3 where ord = 2), '22222222-2222-4222-8222-222222222222'::uuid,
          'enqueue_many: a supplied run_id is kept');
select is((select run_id from many_3 where ord = 3), :'r16_done_run_id'::uuid,
          'enqueue_many: an existing id answers that row''s run_id (R16)');
select is((select count(*) from jobs.jobs where id = '01950000-0000-7000-8000-000000000016'
                                             or idempotency_key = 'k-r16-many'),
          1::bigint, 'enqueue_many: an existing id inserts no row (R16)');

-- a request may give every argument of jobs.enqueue, and an explicit null where NULL is allowed
select results_eq(
  $$select r.id, r.run_id, r.deduped
      from jobs.enqueue_many($j$[{"name": "m-all", "input": {"a": 1}, "idempotency_key": "k-m-all",
                                 "queue": "q-all", "tenant_id": "t-all", "run_at": "2026-01-01T00:00:00Z",
                                 "max_attempts": 3, "priority": 2,
                                 "id": "01950000-0000-7000-8000-0000000000c1",
                                 "run_id": "33333333-3333-4333-8333-333333333333",
                                 "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                                 "enqueued_by": "pgtap"},
                                {"name": "m-all", "input": {}, "idempotency_key": "k-m-all-2",
                                 "tenant_id": null, "run_at": null, "traceparent": null}]$j$) r
     limit 1$$,
  $$values ('01950000-0000-7000-8000-0000000000c1'::uuid,
            '33333333-3333-4333-8333-333333333333'::uuid, false)$$,
  'enqueue_many: a request with every argument is taken');
select is((select tenant_id from jobs.jobs where idempotency_key = 'k-m-all-2'), null,
          'enqueue_many: an explicit null tenant_id is no tenant');
-- a number where a text argument goes is read as its text
select id as mb_num from jobs.enqueue_many($j$[{"name": "mb-num", "input": {}, "idempotency_key": 42}]$j$) \gset
select is((jobs_test.job(:'mb_num')).idempotency_key, '42',
          'enqueue_many: a number as idempotency_key is read as its text');

-- every check of a request, found in one pass, names the first request it refuses
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "ok", "input": {}, "idempotency_key": "c1"},
                                       {"name": " ", "input": {}, "idempotency_key": "c2"}]$j$)$$,
  '%requests[2].name%', 'enqueue_many: a blank name names requests[2]');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "ok", "input": {}, "idempotency_key": "c1"},
                                       {"name": "ok", "input": {}, "idempotency_key": " "}]$j$)$$,
  '%requests[2].idempotency_key%', 'enqueue_many: a blank idempotency_key names requests[2]');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "ok", "input": {}, "idempotency_key": "c1", "queue": " "}]$j$)$$,
  '%requests[1].queue%', 'enqueue_many: a blank queue names requests[1]');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "ok", "input": {}, "idempotency_key": "c1", "tenant_id": ""}]$j$)$$,
  '%requests[1].tenant_id%', 'enqueue_many: an empty tenant_id names requests[1]');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "ok", "input": {}, "idempotency_key": "c1", "run_at": "infinity"}]$j$)$$,
  '%requests[1].run_at%', 'enqueue_many: an infinite run_at names requests[1]');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "ok", "input": {}, "idempotency_key": "c1"},
                                       {"name": "ok", "input": {}, "idempotency_key": "c2"},
                                       {"name": "ok", "input": {}, "idempotency_key": "c3", "max_attempts": 0}]$j$)$$,
  '%requests[3].max_attempts%', 'enqueue_many: max_attempts 0 names requests[3]');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "ok", "input": [], "idempotency_key": "c1"}]$j$)$$,
  '%requests[1].input%', 'enqueue_many: an input that is not an object names requests[1]');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "ok", "input": null, "idempotency_key": "c1"}]$j$)$$,
  '%requests[1].input must be a JSON object, got null', 'enqueue_many: a JSON null input says so');
-- two bad requests: the first is named, with the first check it fails
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "ok", "input": {}, "idempotency_key": "c1"},
                                       {"name": "ok", "input": {}, "idempotency_key": "c2", "max_attempts": 0, "queue": " "},
                                       {"name": " ", "input": {}, "idempotency_key": "c3"}]$j$)$$,
  '%requests[2].queue%', 'enqueue_many: of two bad requests the first is named, by its first failed check');
select is(
  (select count(*) from jobs.enqueue_many(
     (select jsonb_agg(jsonb_build_object('name', 'ids', 'input', '{}'::jsonb,
                                          'idempotency_key', 'ids-' || g))
        from generate_series(1, 50) g))
   where id is not null and not deduped),
  50::bigint, 'enqueue_many gives each of 50 requests an id of its own');

-- a bad element raises with its code, and nothing of the batch is inserted
select jobs_test.job_count() as many_bad_before \gset
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1"},
                                       {"name": "mb", "input": {}}]$j$)$$,
  'JQ003', null, 'enqueue_many: a missing idempotency_key raises JQ003');
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1"},
                                       {"name": "mb", "input": {}, "idempotencyKey": "k-mb-2"}]$j$)$$,
  'JQ001', null, 'enqueue_many: an unknown key (idempotencyKey) raises JQ001');
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1"},
                                       {"name": "mb", "input": {}, "idempotency_key": "k-mb-2", "run_at": "tomorrow-ish"}]$j$)$$,
  'JQ001', null, 'enqueue_many: a run_at that is not a timestamp raises JQ001');
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1", "priority": "high"}]$j$)$$,
  'JQ001', null, 'enqueue_many: a priority that is not an integer raises JQ001');
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1", "id": "not-a-uuid"}]$j$)$$,
  'JQ001', null, 'enqueue_many: an id that is not a uuid raises JQ001');
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": [1], "idempotency_key": "k-mb-1"}]$j$)$$,
  'JQ002', null, 'enqueue_many: an input that is not an object raises JQ002');
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1", "max_attempts": 0}]$j$)$$,
  'JQ001', null, 'enqueue_many: max_attempts 0 raises JQ001');
select throws_ok(
  $$select * from jobs.enqueue_many($j${"name": "mb", "input": {}, "idempotency_key": "k-mb-1"}$j$)$$,
  'JQ001', null, 'enqueue_many: requests that are not an array raise JQ001');
select throws_ok(
  $$select * from jobs.enqueue_many(null)$$,
  'JQ001', null, 'enqueue_many: NULL requests raise JQ001');
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1"}, "mb"]$j$)$$,
  'JQ001', null, 'enqueue_many: an element that is not an object raises JQ001');
-- the shape checks run only when one pass over the array finds something wrong; they still
-- name the first culprit, checking in their order: an element that is not an object, an
-- unknown key, an explicit null, a JSON object or array where a text argument goes
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1"}, 7]$j$)$$,
  '%requests must hold JSON objects only', 'enqueue_many: a number among the requests is named');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1", "queue": null}, 7]$j$)$$,
  '%requests must hold JSON objects only',
  'enqueue_many: an element that is not an object is refused before an explicit null');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1", "priority": null},
                                       {"name": "mb", "input": {}, "idempotency_key": "k-mb-2", "delay": 5}]$j$)$$,
  '%requests[2].delay is not an argument of jobs.enqueue',
  'enqueue_many: an unknown key is named, and refused before an explicit null');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1"},
                                       {"name": "mb", "input": {}, "idempotency_key": "k-mb-2", "queue": null}]$j$)$$,
  '%requests[2].queue must not be null%', 'enqueue_many: an explicit null queue is named');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1", "max_attempts": null}]$j$)$$,
  '%requests[1].max_attempts must not be null%', 'enqueue_many: an explicit null max_attempts is named');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1"},
                                       {"name": "mb", "input": {}, "idempotency_key": "k-mb-2"},
                                       {"name": "mb", "input": {}, "idempotency_key": "k-mb-3", "priority": null}]$j$)$$,
  '%requests[3].priority must not be null%', 'enqueue_many: an explicit null priority is named');
-- a JSON object or array where a text argument goes is refused, not stored as its JSON text
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1"},
                                       {"name": "mb", "input": {}, "idempotency_key": "k-mb-2", "queue": {"q": 1}}]$j$)$$,
  '%requests[2].queue must be a string, not a JSON object or array',
  'enqueue_many: an object as queue is named');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": ["k"]}]$j$)$$,
  '%requests[1].idempotency_key must be a string%', 'enqueue_many: an array as idempotency_key is named');
select throws_like(
  $$select * from jobs.enqueue_many($j$[{"name": ["mb"], "input": {}, "idempotency_key": "k-mb-1", "priority": null}]$j$)$$,
  '%requests[1].priority must not be null%', 'enqueue_many: an explicit null is named before a JSON array name');
select throws_ok(
  $$select * from jobs.enqueue_many($j$[
      {"name": "mb", "input": {}, "idempotency_key": "k-mb-1", "id": "01950000-0000-7000-8000-0000000000b1"},
      {"name": "mb", "input": {}, "idempotency_key": "k-mb-2", "id": "01950000-0000-7000-8000-0000000000b1"}]$j$)$$,
  'JQ001', null, 'enqueue_many: a supplied id repeated in the batch raises JQ001');
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-1"}]$j$,
                                    on_conflict => 'bogus')$$,
  'JQ001', null, 'enqueue_many: on_conflict ''bogus'' raises JQ001');
select is(jobs_test.job_count(), :'many_bad_before'::bigint,
          'enqueue_many: a refused batch inserts nothing');

-- on_conflict => 'error' with one duplicate raises JQ004 and inserts nothing of the batch
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-ok"},
                                       {"name": "oc", "input": {}, "idempotency_key": "k-oc"}]$j$,
                                    on_conflict => 'error')$$,
  'JQ004', null, 'enqueue_many: on_conflict error with one live duplicate raises JQ004');
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "mb", "input": {}, "idempotency_key": "k-mb-dup"},
                                       {"name": "mb", "input": {}, "idempotency_key": "k-mb-dup"}]$j$,
                                    on_conflict => 'error')$$,
  'JQ004', null, 'enqueue_many: on_conflict error with a key repeated in the batch raises JQ004');
select is(jobs_test.job_count(), :'many_bad_before'::bigint,
          'enqueue_many: a batch refused for a duplicate inserts nothing');
select is((select count(*) from jobs.jobs where idempotency_key = 'k-mb-ok'), 0::bigint,
          'enqueue_many: the valid request of a refused batch is not inserted');

-- an empty array answers zero rows
select is_empty($$select * from jobs.enqueue_many('[]')$$, 'enqueue_many: an empty array answers no rows');

-- under on_conflict => 'error' an existing supplied id raises JQ004 too (R16)
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "r16", "input": {}, "idempotency_key": "k-r16",
                                        "id": "01950000-0000-7000-8000-000000000016"}]$j$,
                                    on_conflict => 'error')$$,
  'JQ004', null, 'enqueue_many: on_conflict error with an existing id raises JQ004 (R16)');

-- an id that names a different job is refused under any policy, and nothing is inserted
select jobs_test.job_count() as many_taken_before \gset
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "fresh", "input": {}, "idempotency_key": "k-fresh"},
                                       {"name": "other", "input": {}, "idempotency_key": "k-other",
                                        "id": "01950000-0000-7000-8000-000000000016"}]$j$)$$,
  'JQ004', null, 'enqueue_many: an id naming a different job raises JQ004 even under dedupe');
select is(jobs_test.job_count(), :'many_taken_before'::bigint,
          'enqueue_many: a refused id leaves the batch uninserted');
-- under 'error' a key repeated inside the batch raises too
select throws_ok(
  $$select * from jobs.enqueue_many($j$[{"name": "rep", "input": {}, "idempotency_key": "k-rep-err"},
                                       {"name": "rep", "input": {}, "idempotency_key": "k-rep-err"}]$j$,
                                    on_conflict => 'error')$$,
  'JQ004', null, 'enqueue_many: on_conflict error with a key repeated in the batch raises JQ004');
-- a blank key is no key
select throws_ok(
  $$select jobs.enqueue(name => 'blank', input => '{}', idempotency_key => '   ')$$,
  'JQ003', null, 'a whitespace-only idempotency_key raises JQ003');

-- ---------------------------------------------------------------------------------------------
-- the wake throttle: jobs._announce notifies at most once per queue per 250 ms slot, for rows
-- due at once; the calling transaction's own rows (same created_at) never suppress it

select is(jobs._announce('q-wake', '2026-01-01 00:00:00+00'), true,
          '_announce: a queue with no rows in the slot is woken');
set local durajobs.now = '2026-01-01 00:00:00.05+00';
select jobs_test.enqueue(queue => 'q-wake') \g /dev/null
select jobs_test.enqueue(queue => 'q-wake-delayed', run_at => '2026-01-01 01:00:00+00') \g /dev/null
set local durajobs.now = '2026-01-01 00:00:00+00';
select is(jobs._announce('q-wake', '2026-01-01 00:00:00.05+00'), true,
          '_announce: the caller''s own rows (same created_at) do not suppress the wake');
select is(jobs._announce('q-wake', '2026-01-01 00:00:00.1+00'), false,
          '_announce: a due row created earlier in the same slot already woke the queue');
select is(jobs._announce('q-wake', '2026-01-01 00:00:00.01+00'), false,
          '_announce: a due row created later in the same slot already woke the queue');
select is(jobs._announce('q-wake', '2026-01-01 00:00:00.25+00'), true,
          '_announce: the next slot wakes the queue again');
select is(jobs._announce('q-wake-delayed', '2026-01-01 00:00:00.1+00'), true,
          '_announce: a delayed row in the slot did not wake the queue, so it does not suppress');
select is(jobs._announce('q-wake-other', '2026-01-01 00:00:00.1+00'), true,
          '_announce: another queue''s row does not suppress the wake');
-- once the earlier row was claimed, its worker may be idle again: the next row must wake it
set local durajobs.now = '2026-01-01 00:00:00.06+00';
select jobs_test.claim_one(queue => 'q-wake') \g /dev/null
set local durajobs.now = '2026-01-01 00:00:00+00';
select is(jobs._announce('q-wake', '2026-01-01 00:00:00.1+00'), true,
          '_announce: a row of the slot already claimed does not suppress the wake');

-- ---------------------------------------------------------------------------------------------
-- R7: the live holder finishes between the conflict and the lookup. jobs._find_live is replaced
-- (inside this transaction) by a version that finishes the holder and answers NULL: the second
-- try must insert a fresh row.

select * from jobs.enqueue(name => 'r7', input => '{}', idempotency_key => 'k-r7') \gset r7h_
create sequence jobs_test.find_live_calls;
create or replace function jobs._find_live(name text, tenant_id text, idempotency_key text)
returns jobs.enqueue_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform nextval('jobs_test.find_live_calls');
  update jobs.jobs j
     set state = 'done', finished_at = jobs._now()
   where j.name = _find_live.name
     and coalesce(j.tenant_id, '') = coalesce(_find_live.tenant_id, '')
     and j.idempotency_key = _find_live.idempotency_key
     and j.state in ('ready', 'delayed', 'running', 'suspended');
  return null;
end;
$$;
select * from jobs.enqueue(name => 'r7', input => '{}', idempotency_key => 'k-r7') \gset r7f_
select is(:'r7f_deduped'::boolean, false, 'R7: the holder finished mid-enqueue: a fresh row, deduped = false');
select isnt(:'r7f_id'::uuid, :'r7h_id'::uuid, 'R7: the fresh row''s id is not the holder''s');
select is((jobs_test.job(:'r7h_id')).state, 'done', 'R7: the holder is done');
select is((jobs_test.job(:'r7f_id')).state, 'ready', 'R7: the fresh row is ready');

-- the same race in enqueue_many, which finds the holder in a join: a trigger after each insert
-- statement finishes the listed holder once the insert has met it, before the lookup; the second
-- pass inserts
create table jobs_test.finish_after_insert (id uuid primary key);
create sequence jobs_test.insert_statements;
create function jobs_test.count_insert_and_finish_listed()
returns trigger
language plpgsql
as $$
begin
  perform nextval('jobs_test.insert_statements');
  update jobs.jobs j
     set state = 'done', finished_at = jobs._now()
   where j.id in (select f.id from jobs_test.finish_after_insert f)
     and j.state in ('ready', 'delayed', 'running', 'suspended');
  return null;
end;
$$;
create trigger count_insert_and_finish_listed
  after insert on jobs.jobs_live
  for each statement execute function jobs_test.count_insert_and_finish_listed();
select jobs_test.enqueue(name => 'r7m', idempotency_key => 'k-r7m') as r7m_holder \gset
insert into jobs_test.finish_after_insert values (:'r7m_holder');
select setval('jobs_test.insert_statements', 1, false) \g /dev/null
select results_eq(
  format($$select id <> %L::uuid, deduped
             from jobs.enqueue_many('[{"name": "r7m", "input": {}, "idempotency_key": "k-r7m"}]')$$,
         :'r7m_holder'),
  $$values (true, false)$$,
  'R7: enqueue_many inserts a fresh row when the holder finished mid-batch');
select is((select last_value from jobs_test.insert_statements), 2::bigint,
          'R7: enqueue_many met the holder, then inserted on its second pass');

-- R7: a lookup that never finds the holder (the unique index is missing or lies): JQ005 after
-- exactly two tries, never a loop
create or replace function jobs._find_live(name text, tenant_id text, idempotency_key text)
returns jobs.enqueue_result
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  perform nextval('jobs_test.find_live_calls');
  return null;
end;
$$;
select setval('jobs_test.find_live_calls', 1, false) \g /dev/null
select jobs_test.job_count() as r7_before \gset
select throws_ok(
  $$select jobs.enqueue(name => 'r7', input => '{}', idempotency_key => 'k-r7')$$,
  'JQ005', null, 'R7: a conflict no lookup explains raises JQ005');
select is((select last_value from jobs_test.find_live_calls), 2::bigint,
          'R7: enqueue tried exactly twice');
-- in enqueue_many, a unique index that is not the live key's makes the conflict that no
-- lookup explains
create unique index jobs_test_r7_lies on jobs.jobs_live (name) where name = 'r7-lies';
select jobs_test.enqueue(name => 'r7-lies', idempotency_key => 'k-r7-lies-1') \g /dev/null
select jobs_test.job_count() as r7_before \gset
select setval('jobs_test.insert_statements', 1, false) \g /dev/null
select throws_ok(
  $$select * from jobs.enqueue_many('[{"name": "r7-lies", "input": {}, "idempotency_key": "k-r7-lies-2"}]')$$,
  'JQ005', null, 'R7: enqueue_many raises JQ005 too');
select is((select last_value from jobs_test.insert_statements), 2::bigint,
          'R7: enqueue_many tried exactly twice');
drop trigger count_insert_and_finish_listed on jobs.jobs_live;
drop index jobs.jobs_test_r7_lies;
select is(jobs_test.job_count(), :'r7_before'::bigint, 'R7: JQ005 inserts nothing');


-- an explicit null is refused as jobs.enqueue refuses it, never read as the default
select throws_ok(
  $$select * from jobs.enqueue_many('[{"name": "nul", "input": {}, "idempotency_key": "k-nul", "queue": null}]')$$,
  'JQ001', null, 'enqueue_many: an explicit null queue raises JQ001, as jobs.enqueue does');
select throws_ok(
  $$select * from jobs.enqueue_many('[{"name": "nul", "input": {}, "idempotency_key": "k-nul", "priority": null}]')$$,
  'JQ001', null, 'enqueue_many: an explicit null priority raises JQ001');
select throws_ok(
  $$select * from jobs.enqueue_many('[{"name": "nul", "input": {}, "idempotency_key": "k-nul", "max_attempts": null}]')$$,
  'JQ001', null, 'enqueue_many: an explicit null max_attempts raises JQ001');
select is((select deduped from jobs.enqueue_many('[{"name": "nul", "input": {}, "idempotency_key": "k-nul-ok", "run_at": null, "tenant_id": null}]')),
          false, 'enqueue_many: a null run_at (now) or tenant_id (none) is what jobs.enqueue accepts too');

select * from finish();
rollback;
