-- 011_bounds: every limit on an argument at its boundary: one under passes, one over is refused
-- with X_ARGUMENT_INVALID (or the argument's own code) naming the argument and the limit, and
-- nothing is written. Before the limits, an over-long name failed deep in an index (raw 54000),
-- a queue name past 8,000 bytes in pg_notify (22023), a huge interval in timestamp arithmetic
-- (22008), a 2-D array in unnest (0A000); a 10 MB input was stored and sent back by every claim.
begin;
\ir fixtures/factory.sql
select plan(103);
set local durajobs.now = '2026-03-01 00:00:00+00';

create temporary table n on commit drop as
  select repeat('n', 200) as ok, repeat('n', 201) as over,
         -- 200 four-byte characters: the widest name there is, in each dedupe column at once
         repeat(U&'\+01F600', 200) as wide,
         E' \t\n\r ' as blank;

-- ---------------------------------------------------------------------------------------------
-- names: job, key, queue, tenant, concurrency key, enqueued_by

select lives_ok(
  $$ select jobs.enqueue(name => (select ok from n), input => '{}',
                         idempotency_key => (select ok from n), queue => (select ok from n),
                         tenant_id => (select ok from n), enqueued_by => (select ok from n),
                         concurrency_key => (select ok from n)) $$,
  'enqueue takes 200-character names in every name argument');
select lives_ok(
  $$ select jobs.enqueue(name => (select wide from n), input => '{}',
                         idempotency_key => (select wide from n),
                         tenant_id => (select wide from n), queue => (select wide from n)) $$,
  '200 four-byte characters in name, key, tenant and queue at once fit the dedupe index');
select is(jobs_test.job_count(), 2::bigint, 'both rows stand');

select throws_ok(
  $$ select jobs.enqueue(name => (select over from n), input => '{}', idempotency_key => 'k') $$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.enqueue: name must be at most 200 characters, got 201',
  'a 201-character name is refused, naming the argument and the limit');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => (select over from n)) $$,
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.enqueue: idempotency_key must be at most 200 characters, got 201',
  'a 201-character idempotency key is refused');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k',
                         queue => (select over from n)) $$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.enqueue: queue must be at most 200 characters, got 201',
  'a 201-character queue is refused');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k',
                         tenant_id => (select over from n)) $$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.enqueue: tenant_id must be at most 200 characters, got 201',
  'a 201-character tenant is refused');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k',
                         concurrency_key => (select over from n)) $$,
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.enqueue: concurrency_key must be at most 200 characters, got 201',
  'a 201-character concurrency key is refused');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k',
                         enqueued_by => (select over from n)) $$,
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.enqueue: enqueued_by must be at most 200 characters, got 201',
  'a 201-character enqueued_by is refused');

-- blank is any whitespace, not only spaces
select throws_ok(
  $$ select jobs.enqueue(name => (select blank from n), input => '{}', idempotency_key => 'k') $$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.enqueue: name must not be blank (empty or only whitespace)',
  'a name of tabs and newlines is blank');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => E'\t\n') $$,
  'JQ003', null, 'an idempotency key of tabs and newlines is missing (X_IDEMPOTENCY_REQUIRED)');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k',
                         queue => E'\n') $$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.enqueue: queue must not be blank (empty or only whitespace)',
  'a queue of a newline is blank');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k',
                         tenant_id => E'\t') $$,
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.enqueue: tenant_id must not be blank (empty or only whitespace)',
  'a tenant of a tab is blank');
select is(jobs_test.job_count(), 2::bigint, 'no refused enqueue wrote a row');

-- ---------------------------------------------------------------------------------------------
-- numbers and instants

select lives_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k-edges',
                         max_attempts => 1000, priority => -1000,
                         run_at => jobs._now() + interval '100 years') $$,
  'max_attempts 1000, priority -1000 and run_at 100 years ahead are taken');
select lives_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k-edges-2',
                         priority => 1000, run_at => jobs._now() - interval '100 years') $$,
  'priority 1000 and run_at 100 years back are taken');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k', max_attempts => 1001) $$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.enqueue: max_attempts must be an integer from 1 to 1000',
  'max_attempts 1001 is refused');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k', priority => 1001) $$,
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.enqueue: priority must be an integer from -1000 to 1000 (0 is the default)',
  'priority 1001 is refused');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k', priority => -1001) $$,
  'JQ001', null, 'priority -1001 is refused');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k',
                         run_at => jobs._now() + interval '100 years 1 second') $$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.enqueue: run_at must be an instant within 100 years of now',
  'run_at a second past 100 years ahead is refused');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k',
                         run_at => '294276-01-01 00:00:00+00') $$,
  'JQ001', null, 'run_at in the year 294276 is refused');
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k',
                         run_at => '-infinity') $$,
  'JQ001', null, 'run_at -infinity is refused');
select is(jobs_test.job_count(), 4::bigint, 'only the two edge enqueues wrote rows');

-- ---------------------------------------------------------------------------------------------
-- traceparent: the W3C trace context header, lower-case hex, no all-zero ids, version not ff

select lives_ok(
  $$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k-tp',
                         traceparent => '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01') $$,
  'a W3C traceparent is taken');
select throws_ok(
  format($$ select jobs.enqueue(name => 'j', input => '{}', idempotency_key => 'k',
                                traceparent => %L) $$, t.value),
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.enqueue: traceparent must be a W3C traceparent: 00-<32 hex trace id>-'
    || '<16 hex parent id>-<2 hex flags>, ids not all zero',
  'traceparent refused: ' || t.why)
  from (values
    ('tp', 'not the format'),
    ('00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01', 'upper-case hex'),
    ('ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01', 'version ff'),
    ('00-00000000000000000000000000000000-00f067aa0ba902b7-01', 'an all-zero trace id'),
    ('00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01', 'an all-zero parent id'),
    ('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' || repeat('x', 8000), 'a long tail')
  ) as t(value, why);

-- ---------------------------------------------------------------------------------------------
-- input size: the limit is in jobs.size_limits (1 MiB on install); the owner changes it

select is((select max_bytes from jobs.size_limits where name = 'input'), 1048576,
          'the input limit is 1 MiB on install');
create temporary table big on commit drop as
  select jsonb_build_object('s', repeat('x', 5000)) as input;
select is(jobs.set_size_limit('input', (select jobs._json_bytes(input) from big)), 1048576,
          'set_size_limit answers the previous limit');
select lives_ok(
  $$ select jobs.enqueue(name => 'j', input => (select input from big), idempotency_key => 'k-big') $$,
  'an input exactly at the limit is taken');
select jobs.set_size_limit('input', (select jobs._json_bytes(input) - 1 from big));
select throws_ok(
  $$ select jobs.enqueue(name => 'j', input => (select input from big), idempotency_key => 'k-big2') $$,
  'JQ001',
  format('X_ARGUMENT_INVALID: jobs.enqueue: input is %s bytes, over the input limit of %s bytes',
         (select jobs._json_bytes(input) from big), (select jobs._json_bytes(input) - 1 from big)),
  'an input a byte over the limit is refused, naming its size and the limit');
select alike(
  jobs_test.error_hint($$ select jobs.enqueue(name => 'j', input => (select input from big),
                                              idempotency_key => 'k-big2') $$),
  '%jobs.set_size_limit(''input'', <bytes>)%', 'the refusal says how the owner raises the limit');
select throws_ok(
  $$ select jobs.enqueue_many(jsonb_build_array(
       jsonb_build_object('name', 'j', 'input', '{}'::jsonb, 'idempotency_key', 'k-m1'),
       jsonb_build_object('name', 'j', 'input', (select input from big),
                          'idempotency_key', 'k-m2'))) $$,
  'JQ001', null, 'enqueue_many refuses an input over the limit');
select throws_ok(
  $$ select jobs.publish_event('e', (select input from big)) $$,
  'JQ001', null, 'an event payload over the input limit is refused');
select throws_ok($$ select jobs.set_size_limit('input', 1023) $$, 'JQ001',
                 'X_ARGUMENT_INVALID: jobs.set_size_limit: max_bytes must be from 1024 (1 KiB) to 104857600 (100 MiB)',
                 'a limit under 1 KiB is refused');
select throws_ok($$ select jobs.set_size_limit('nope', 2048) $$, 'JQ001', null,
                 'an unknown limit is refused');
create role jobs_test_bounds_stranger;
grant usage on schema jobs to jobs_test_bounds_stranger;
grant execute on function jobs.set_size_limit(text, integer) to jobs_test_bounds_stranger;
set local role jobs_test_bounds_stranger;
select throws_ok($$ select jobs.set_size_limit('input', 4096) $$, 'JQ018',
                 'X_PERMISSION_DENIED: jobs.set_size_limit: only the owner of schema jobs (postgres) may change a size limit, not jobs_test_bounds_stranger',
                 'a role that is not the owner cannot change a limit');
reset role;
select jobs.set_size_limit('input', 1048576);

-- ---------------------------------------------------------------------------------------------
-- enqueue_many names the request; nothing of the batch is written

select throws_ok(
  $$ select jobs.enqueue_many(jsonb_build_array(
       jsonb_build_object('name', 'j', 'input', '{}'::jsonb, 'idempotency_key', 'k-m3'),
       jsonb_build_object('name', repeat('n', 201), 'input', '{}'::jsonb,
                          'idempotency_key', 'k-m4'))) $$,
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.enqueue_many: requests[2].name must be at most 200 characters, got 201',
  'enqueue_many names the request with the over-long name');
select throws_ok(
  $$ select jobs.enqueue_many(jsonb_build_array(
       jsonb_build_object('name', 'j', 'input', '{}'::jsonb, 'idempotency_key', E'\t'))) $$,
  'JQ003', null, 'enqueue_many: a key of a tab is missing');
select throws_ok(
  $$ select jobs.enqueue_many(jsonb_build_array(
       jsonb_build_object('name', 'j', 'input', '{}'::jsonb, 'idempotency_key', 'k-m5',
                          'traceparent', 'tp'))) $$,
  'JQ001', null, 'enqueue_many: a malformed traceparent is refused');
select throws_ok(
  $$ select jobs.enqueue_many(jsonb_build_array(
       jsonb_build_object('name', 'j', 'input', '{}'::jsonb, 'idempotency_key', 'k-m6',
                          'max_attempts', 1001))) $$,
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.enqueue_many: requests[1].max_attempts must be an integer from 1 to 1000',
  'enqueue_many: max_attempts 1001 is refused');
select is(jobs_test.job_count(), 6::bigint, 'no refused batch wrote a row');

-- ---------------------------------------------------------------------------------------------
-- the outbox: a stage refuses what the publish would, so no poison row holds the relay up

select lives_ok($$ select jobs.outbox_stage(name => 'ob', input => '{}', idempotency_key => 'ob-1') $$,
                'a good row is staged');
select throws_ok(
  $$ select jobs.outbox_stage(name => repeat('n', 3200), input => '{}', idempotency_key => 'ob-2') $$,
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.outbox_stage: name must be at most 200 characters, got 3200',
  'a 3,200-character name is refused at the stage, not at the publish');
select throws_ok(
  $$ select jobs.outbox_stage(name => 'ob', input => '{}', idempotency_key => 'ob-3',
                              traceparent => 'tp') $$,
  'JQ001', null, 'a malformed traceparent is refused at the stage');
select lives_ok($$ select jobs.outbox_stage(name => 'ob', input => '{}', idempotency_key => 'ob-4') $$,
                'a later good row is staged');
select is((select count(*) from jobs.outbox_relay('relay-1')), 2::bigint,
          'the relay publishes both good rows: nothing held back');

-- ---------------------------------------------------------------------------------------------
-- pause and resume: no unliftable pause, no raw 22023 from the wake

select throws_ok($$ select jobs.pause_queue(repeat('q', 9000)) $$, 'JQ001',
                 'X_ARGUMENT_INVALID: jobs.pause_queue: queue must be at most 200 characters, got 9000',
                 'a 9,000-character queue is not paused');
select is((select count(*) from jobs.queue_pauses), 0::bigint, 'and no pause row was written');
select throws_ok($$ select jobs.pause_queue('q', paused_by => repeat('b', 201)) $$, 'JQ001',
                 null, 'a 201-character paused_by is refused');
-- a pause written before the limit (an older release took any length)
insert into jobs.queue_pauses (queue, paused_at) values (repeat('q', 9000), jobs._now());
select is(jobs.resume_queue(repeat('q', 9000)), true,
          'resume_queue lifts a pause of an over-long name, without a raw 22023 from the wake');
select is((select count(*) from jobs.queue_pauses), 0::bigint, 'the pause is gone');
select throws_ok($$ select jobs.resume_queue(E' \t') $$, 'JQ001', null,
                 'resume_queue refuses a blank queue');

-- ---------------------------------------------------------------------------------------------
-- the worker protocol: claim, settle, heartbeat, steps

select throws_ok(
  $$ select jobs.claim_v1(array['a', repeat('q', 201)], 'w1') $$, 'JQ001',
  'X_ARGUMENT_INVALID: jobs.claim_v1: queues[2] must be at most 200 characters, got 201',
  'claim names the over-long queue');
select throws_ok(
  $$ select jobs.claim_v1(array[E'\t'], 'w1') $$, 'JQ001',
  'X_ARGUMENT_INVALID: jobs.claim_v1: queues[1] must not be blank (empty or only whitespace)',
  'claim refuses a queue of a tab');
select throws_ok(
  $$ select jobs.claim_v1(array[['a'], ['b']], 'w1') $$, 'JQ006', null,
  'claim refuses a 2-D queues array');
select throws_ok(
  $$ select jobs.claim_v1(array['default'], repeat('w', 201)) $$, 'JQ001',
  'X_ARGUMENT_INVALID: jobs.claim_v1: worker_id must be at most 200 characters, got 201',
  'claim refuses a 201-character worker id');
select throws_ok(
  $$ select jobs.claim_v1(array['default'], 'w1', visibility => interval '1 day 1 second') $$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.claim_v1: visibility must be a positive interval of at most 1 day',
  'claim refuses a lease over a day');
select throws_ok(
  $$ select jobs.claim_v1(array['default'], 'w1', batch_size => 1001) $$, 'JQ001', null,
  'claim refuses a batch over 1000');

select jobs_test.enqueue(queue => 'qb', idempotency_key => 'k-settle') as settle_id \gset
create temporary table held on commit drop as
  select * from jobs_test.claim_one(queue => 'qb', worker_id => 'w-b');
select throws_ok(
  format($$ select jobs.ack_many_v1('w-b', array[[%L::uuid]], array[[%s::bigint]]) $$,
         :'settle_id', (select claim from held)),
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.ack_many_v1: ids, claims must be one-dimensional arrays of equal length',
  'ack_many_v1 refuses 2-D arrays (no raw 0A000)');
select throws_ok(
  format($$ select jobs.heartbeat_many_v1('w-b', array[[%L::uuid]], array[[%s::bigint]]) $$,
         :'settle_id', (select claim from held)),
  'JQ001', null, 'heartbeat_many_v1 refuses 2-D arrays');
select throws_ok(
  format($$ select jobs.heartbeat_v1(%L, 'w-b', %s, visibility => interval '2 days') $$,
         :'settle_id', (select claim from held)),
  'JQ001', 'X_ARGUMENT_INVALID: jobs.heartbeat_v1: visibility must be a positive interval of at most 1 day',
  'a heartbeat cannot park a lease past a day');
select throws_ok(
  format($$ select jobs.ack_v1(%L, repeat('w', 201), %s) $$, :'settle_id', (select claim from held)),
  'JQ001', null, 'ack refuses a 201-character worker id');

-- steps: name, output size, error cut, wake_at
select lives_ok(
  format($$ select jobs.record_step_v1(%L, 'w-b', %s, repeat('s', 200), 'completed') $$,
         :'settle_id', (select claim from held)),
  'a 200-character step name is taken');
select throws_ok(
  format($$ select jobs.record_step_v1(%L, 'w-b', %s, repeat('s', 201), 'completed') $$,
         :'settle_id', (select claim from held)),
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.record_step_v1: name must be at most 200 characters, got 201',
  'a 201-character step name is refused');
select throws_ok(
  format($$ select jobs.record_step_v1(%L, 'w-b', %s, E'\n', 'completed') $$,
         :'settle_id', (select claim from held)),
  'JQ001', null, 'a step name of a newline is refused');
select jobs.set_size_limit('step_output', 2048);
select throws_ok(
  format($$ select jobs.record_step_v1(%L, 'w-b', %s, 'big', 'completed',
                                       output => jsonb_build_object('s', repeat('x', 3000))) $$,
         :'settle_id', (select claim from held)),
  'JQ001', null, 'a step output over the limit is refused');
select lives_ok(
  format($$ select jobs.record_step_v1(%L, 'w-b', %s, 'fits', 'completed',
                                       output => jsonb_build_object('s', repeat('x', 1900))) $$,
         :'settle_id', (select claim from held)),
  'a step output under the limit is taken');
select is((select count(*) from jobs.steps s where s.name = 'big'), 0::bigint,
          'the refused output wrote no step');
select jobs.set_size_limit('step_output', 1048576);
select throws_ok(
  format($$ select jobs.record_step_v1(%L, 'w-b', %s, 'late', 'sleeping',
                                       wake_at => '294276-01-01 00:00:00+00') $$,
         :'settle_id', (select claim from held)),
  'JQ001', null, 'a wake_at past 100 years is refused');
select lives_ok(
  format($$ select jobs.record_step_v1(%L, 'w-b', %s, 'failing', 'failed',
                                       error => repeat('e', 100000)) $$,
         :'settle_id', (select claim from held)),
  'a step failure of 100,000 bytes is taken, cut');
select ok((select octet_length(s.error) <= 65536 and s.error like '%[cut: 100000 bytes in all]'
             from jobs.steps s where s.name = 'failing'),
          'the step error is cut to the 64 KiB limit, saying how long it was');

-- a failure report is cut, never refused: the attempt still ends
select is(jobs.nack_v1(:'settle_id', 'w-b', (select claim from held), 'dead',
                       error => repeat(U&'\00E9', 60000), error_code => repeat('c', 300),
                       error_stack => repeat('s', 200000)),
          true, 'a nack with 120,000 bytes of error and 200,000 of stack lands');
select ok((select octet_length(j.last_error) <= 65536
                  and octet_length(j.last_error_stack) <= 65536
                  and j.last_error like '%[cut: 120000 bytes in all]'
                  and length(j.last_error_code) = 200
             from jobs.jobs j where j.id = :'settle_id'),
          'error and stack are cut to the limit, the code to 200 characters');
select is((select left(j.last_error, 1) from jobs.jobs j where j.id = :'settle_id'), U&'\00E9',
          'the cut keeps whole characters');
select is(jobs._cut(repeat(U&'\+01F600', 2000), 1024),
          repeat(U&'\+01F600', (1024 - octet_length(' [cut: 8000 bytes in all]')) / 4) || ' [cut: 8000 bytes in all]',
          'jobs._cut fits the most whole 4-byte characters before its note');
select is(jobs._cut('short', 1024), 'short', 'jobs._cut leaves a text within the limit');

-- ---------------------------------------------------------------------------------------------
-- intervals that overflowed timestamp arithmetic (raw 22008 before)

select throws_ok(
  $$ select jobs.worker_announce('w-x', 'h', 1, array['q'], 1, ttl => interval '1000000 years') $$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.worker_announce: ttl must be a positive interval of at most 1 day',
  'worker_announce refuses a million-year ttl');
select throws_ok(
  $$ select jobs.worker_heartbeat('w-x', ttl => interval '1000000 years') $$,
  'JQ001', null, 'worker_heartbeat refuses a million-year ttl');
select throws_ok(
  $$ select jobs.purge(done_after => interval '1000000 years') $$, 'JQ001',
  'X_ARGUMENT_INVALID: jobs.purge: done_after must be an interval from 00:00:00 to 100 years, got 1000000 years',
  'purge refuses a million-year window');
select lives_ok($$ select jobs.purge(done_after => interval '100 years') $$,
                'purge takes a 100-year window');
select throws_ok(
  $$ select jobs.worker_announce(repeat('w', 201), 'h', 1, array['q'], 1) $$, 'JQ001',
  'X_ARGUMENT_INVALID: jobs.worker_announce: worker_id must be at most 200 characters, got 201',
  'worker_announce refuses a 201-character worker id');
select throws_ok(
  $$ select jobs.worker_announce('w-x', repeat('h', 201), 1, array['q'], 1) $$, 'JQ001', null,
  'worker_announce refuses a 201-character host');
select throws_ok(
  $$ select jobs.worker_announce('w-x', 'h', 1, array[repeat('q', 201)], 1) $$, 'JQ001',
  'X_ARGUMENT_INVALID: jobs.worker_announce: queues[1] must be at most 200 characters, got 201',
  'worker_announce names the over-long queue');
select is((select count(*) from jobs.workers), 0::bigint, 'no refused announce wrote a row');

-- ---------------------------------------------------------------------------------------------
-- the rest of the names: declarations, limits, events, the scheduler, operators

select throws_ok(
  $$ select jobs.declare_job(repeat('n', 201), 'q', 3, 0, false, 'deploy') $$, 'JQ001',
  'X_ARGUMENT_INVALID: jobs.declare_job: name must be at most 200 characters, got 201',
  'declare_job refuses a 201-character name');
select throws_ok(
  $$ select jobs.declare_job('d', 'q', 1001, 0, false, 'deploy') $$, 'JQ001', null,
  'declare_job refuses max_attempts 1001');
select throws_ok(
  $$ select jobs.declare_job('d', 'q', 3, 0, false, E'\t') $$, 'JQ001', null,
  'declare_job refuses a blank declared_by');
select throws_ok(
  $$ select jobs.declare_job('d', 'q', 3, 0, false, 'deploy', timeout => interval '8 days') $$,
  'JQ001', null, 'declare_job refuses a timeout over 7 days');
select is((select count(*) from jobs.declarations), 0::bigint, 'no refused declaration wrote a row');
select throws_ok(
  $$ select jobs.set_limit(queue => repeat('q', 201), concurrency => 1) $$, 'JQ001',
  'X_ARGUMENT_INVALID: jobs.set_limit: queue must be at most 200 characters, got 201',
  'set_limit refuses a 201-character queue');
select throws_ok(
  $$ select jobs.set_limit(queue => 'q', concurrency => 1, set_by => repeat('b', 201)) $$,
  'JQ001', null, 'set_limit refuses a 201-character set_by');
select throws_ok(
  $$ select jobs.publish_event(repeat('e', 201)) $$, 'JQ001',
  'X_ARGUMENT_INVALID: jobs.publish_event: name must be at most 200 characters, got 201',
  'publish_event refuses a 201-character name');
select throws_ok(
  $$ select jobs.publish_event('e', correlation_key => repeat('c', 201)) $$, 'JQ001', null,
  'publish_event refuses a 201-character correlation key');
select is((select count(*) from jobs.events), 0::bigint, 'no refused event was written');
select throws_ok(
  $$ select jobs.scheduler_arm(repeat('t', 201), jobs._now()) $$, 'JQ001', null,
  'scheduler_arm refuses a 201-character task');
select throws_ok(
  $$ select jobs.scheduler_lead(repeat('h', 201)) $$, 'JQ001', null,
  'scheduler_lead refuses a 201-character holder');
select throws_ok(
  $$ select jobs.outbox_claim(repeat('r', 201)) $$, 'JQ001',
  'X_ARGUMENT_INVALID: jobs.outbox_claim: relay_id must be at most 200 characters, got 201',
  'outbox_claim refuses a 201-character relay id');
select throws_ok(
  format($$ select jobs.cancel(%L, reason => repeat('r', 1001)) $$,
         jobs_test.enqueue(idempotency_key => 'k-cancel')),
  'JQ001', 'X_ARGUMENT_INVALID: jobs.cancel: reason must be at most 1000 characters, got 1001',
  'cancel refuses a reason over 1,000 characters');
select throws_ok(
  format($$ select jobs.requeue(%L, from_step => repeat('s', 201)) $$, :'settle_id'),
  'JQ001', null, 'requeue refuses a 201-character from_step');

select * from finish();
rollback;
