-- 030_claim: jobs.claim_v1: arguments, batch size, hand-out order, due times, queues, pauses,
-- the lease and claim token, re-taking a dead worker's rows, and burying exhausted ones (R40).
begin;
\ir fixtures/factory.sql
select plan(92);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- R105: an empty or NULL queues array raises X_JOB_CLAIM_QUEUES_EMPTY

select throws_ok($$select * from jobs.claim_v1(queues => '{}', worker_id => 'w1')$$,
                 'JQ006', null, 'R105: an empty queues array raises JQ006');
select throws_ok($$select * from jobs.claim_v1(queues => null, worker_id => 'w1')$$,
                 'JQ006', null, 'R105: NULL queues raises JQ006');

-- every other bad argument raises X_ARGUMENT_INVALID
select throws_ok($$select * from jobs.claim_v1(queues => array['q', null], worker_id => 'w1')$$,
                 'JQ001', null, 'a NULL queue name raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array[''], worker_id => 'w1')$$,
                 'JQ001', null, 'an empty queue name raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array['q'], worker_id => 'w1', batch_size => 0)$$,
                 'JQ001', null, 'batch_size 0 raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array['q'], worker_id => 'w1', batch_size => -1)$$,
                 'JQ001', null, 'a negative batch_size raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array['q'], worker_id => 'w1', batch_size => null)$$,
                 'JQ001', null, 'NULL batch_size raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array['q'], worker_id => null)$$,
                 'JQ001', null, 'NULL worker_id raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array['q'], worker_id => '')$$,
                 'JQ001', null, 'empty worker_id raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array['q'], worker_id => 'w1', visibility => '0')$$,
                 'JQ001', null, 'visibility 0 raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array['q'], worker_id => 'w1', visibility => '-5 seconds')$$,
                 'JQ001', null, 'a negative visibility raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array['q'], worker_id => 'w1', visibility => null)$$,
                 'JQ001', null, 'NULL visibility raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array['q'], worker_id => 'w1', drop_exhausted => null)$$,
                 'JQ001', null, 'NULL drop_exhausted raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- never more rows than batch_size: enqueue 10, claim a batch of 3, get exactly 3

select count(jobs_test.enqueue(queue => 'q-batch')) from generate_series(1, 10) \g /dev/null
select is(
  (select count(*) from jobs.claim_v1(queues => array['q-batch'], worker_id => 'w1', batch_size => 3)),
  3::bigint, 'a batch of 3 out of 10 ready rows claims exactly 3');
select is((select count(*) from jobs.jobs where queue = 'q-batch' and state = 'running'), 3::bigint,
          'exactly 3 rows are running');
select is((select count(*) from jobs.jobs where queue = 'q-batch' and state = 'ready'), 7::bigint,
          'the other 7 are still ready');
-- re-taken rows count against the batch: 3 lapsed + 7 ready, a batch of 4 claims 4 in all
update jobs.jobs set lease_expires_at = jobs._now() - interval '1 second'
 where queue = 'q-batch' and state = 'running';
select is(
  (select count(*) from jobs.claim_v1(queues => array['q-batch'], worker_id => 'w2', batch_size => 4)),
  4::bigint, 'lapsed and waiting rows together never exceed batch_size');
select is((select count(*) from jobs.jobs where queue = 'q-batch' and state = 'running'), 4::bigint,
          'the 3 re-taken rows and 1 waiting row are running');
select is((select count(*) from jobs.jobs where queue = 'q-batch' and claimed_by = 'w2'), 4::bigint,
          'all 4 are held by the second worker');
-- more lapsed rows than the batch: the batch still caps the claim
update jobs.jobs set lease_expires_at = jobs._now() - interval '1 second'
 where queue = 'q-batch' and state = 'running';
select is(
  (select count(*) from jobs.claim_v1(queues => array['q-batch'], worker_id => 'w3', batch_size => 2)),
  2::bigint, 'four lapsed rows, a batch of 2: exactly 2 re-taken');

-- ---------------------------------------------------------------------------------------------
-- hand-out order: priority (lower first), then run_at, then id

select jobs_test.enqueue(name => 'o-a', queue => 'q-order', priority => 5, run_at => '2025-12-31 22:00:00+00'),
       jobs_test.enqueue(name => 'o-b', queue => 'q-order', priority => 0, run_at => '2025-12-31 23:59:00+00'),
       jobs_test.enqueue(name => 'o-c', queue => 'q-order', priority => 0, run_at => '2025-12-31 23:00:00+00',
                         id => '01950000-0000-7000-8000-0000000000c2'),
       jobs_test.enqueue(name => 'o-d', queue => 'q-order', priority => 0, run_at => '2025-12-31 23:00:00+00',
                         id => '01950000-0000-7000-8000-0000000000c1'),
       jobs_test.enqueue(name => 'o-e', queue => 'q-order', priority => -1, run_at => '2026-01-01 00:00:00+00')
  \g /dev/null
select is(
  array[(jobs_test.claim_one(queue => 'q-order')).name, (jobs_test.claim_one(queue => 'q-order')).name,
        (jobs_test.claim_one(queue => 'q-order')).name, (jobs_test.claim_one(queue => 'q-order')).name,
        (jobs_test.claim_one(queue => 'q-order')).name],
  array['o-e', 'o-d', 'o-c', 'o-b', 'o-a'],
  'one at a time, rows are handed out by priority, then run_at, then id');
-- the same rows in one batch are answered in that order
select jobs_test.enqueue(name => 'o-a', queue => 'q-order2', priority => 5, run_at => '2025-12-31 22:00:00+00'),
       jobs_test.enqueue(name => 'o-b', queue => 'q-order2', priority => 0, run_at => '2025-12-31 23:59:00+00'),
       jobs_test.enqueue(name => 'o-c', queue => 'q-order2', priority => 0, run_at => '2025-12-31 23:00:00+00',
                         id => '01950000-0000-7000-8000-0000000000d2'),
       jobs_test.enqueue(name => 'o-d', queue => 'q-order2', priority => 0, run_at => '2025-12-31 23:00:00+00',
                         id => '01950000-0000-7000-8000-0000000000d1'),
       jobs_test.enqueue(name => 'o-e', queue => 'q-order2', priority => -1, run_at => '2026-01-01 00:00:00+00')
  \g /dev/null
select results_eq(
  $$select name from jobs.claim_v1(queues => array['q-order2'], worker_id => 'w1', batch_size => 10)$$,
  $$values ('o-e'), ('o-d'), ('o-c'), ('o-b'), ('o-a')$$,
  'a batch is answered in hand-out order');
-- a limited batch takes the first rows of that order
select jobs_test.enqueue(name => 'o-low', queue => 'q-order3', priority => 9),
       jobs_test.enqueue(name => 'o-high', queue => 'q-order3', priority => 1) \g /dev/null
select results_eq(
  $$select name from jobs.claim_v1(queues => array['q-order3'], worker_id => 'w1', batch_size => 1)$$,
  $$values ('o-high')$$, 'a batch of 1 takes the lowest priority number');

-- ---------------------------------------------------------------------------------------------
-- delayed rows are not claimed until due, then they are

select jobs_test.enqueue(queue => 'q-delay', run_at => '2026-01-01 00:01:00+00') as delayed_id \gset
select is_empty($$select * from jobs.claim_v1(queues => array['q-delay'], worker_id => 'w1')$$,
                'a delayed row is not claimed before its run_at');
set local durajobs.now = '2026-01-01 00:00:59+00';
select is_empty($$select * from jobs.claim_v1(queues => array['q-delay'], worker_id => 'w1')$$,
                'a delayed row is not claimed a second before its run_at');
set local durajobs.now = '2026-01-01 00:01:00+00';
select * from jobs_test.claim_one(queue => 'q-delay') \gset dl_
select is(:'dl_id'::uuid, :'delayed_id'::uuid, 'a delayed row is claimed once due');
select is(:'dl_state'::text, 'running', 'the claimed delayed row is running');

-- suspended rows are claimed when due
set local durajobs.now = '2026-01-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-susp') as susp_id \gset
select * from jobs_test.claim_one(queue => 'q-susp') \gset sp_
select ok(jobs.nack_v1(id => :'sp_id', worker_id => 'w1', claim => :'sp_claim', next_state => 'suspended',
                       delay => '10 seconds', counts_as_attempt => false),
          'the row is parked (suspended for 10 s)');
select is_empty($$select * from jobs.claim_v1(queues => array['q-susp'], worker_id => 'w1')$$,
                'a suspended row is not claimed before it is due');
set local durajobs.now = '2026-01-01 00:00:10+00';
select * from jobs_test.claim_one(queue => 'q-susp') \gset sp2_
select is(:'sp2_id'::uuid, :'susp_id'::uuid, 'a suspended row is claimed once due');
select is(:'sp2_state'::text, 'running', 'the claimed suspended row is running');
select is(:'sp2_attempt'::integer, 1, 'the park gave its attempt back, so this is attempt 1');

-- ---------------------------------------------------------------------------------------------
-- only the named queues are claimed from

set local durajobs.now = '2026-01-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-other') as other_id \gset
select is_empty($$select * from jobs.claim_v1(queues => array['q-mine'], worker_id => 'w1')$$,
                'a claim of q-mine does not take a row of q-other');
select results_eq(
  $$select id from jobs.claim_v1(queues => array['q-mine', 'q-other'], worker_id => 'w1')$$,
  format('values (%L::uuid)', :'other_id'),
  'a claim naming both queues takes it');

-- a paused queue hands out nothing; resume restores it
select jobs_test.enqueue(queue => 'q-paused') as paused_id \gset
select ok(jobs.pause_queue(queue => 'q-paused'), 'the queue is paused');
select is_empty($$select * from jobs.claim_v1(queues => array['q-paused'], worker_id => 'w1')$$,
                'a paused queue hands out nothing');
select is((jobs_test.job(:'paused_id')).state, 'ready', 'the paused queue''s row stays ready');
select jobs_test.enqueue(queue => 'q-unpaused') as unpaused_id \gset
select results_eq(
  $$select id from jobs.claim_v1(queues => array['q-paused', 'q-unpaused'], worker_id => 'w1', batch_size => 5)$$,
  format('values (%L::uuid)', :'unpaused_id'),
  'a claim of a paused and an unpaused queue takes only the unpaused one''s row');
select ok(jobs.resume_queue(queue => 'q-paused'), 'the queue is resumed');
select results_eq(
  $$select id from jobs.claim_v1(queues => array['q-paused'], worker_id => 'w1')$$,
  format('values (%L::uuid)', :'paused_id'),
  'after resume the row is handed out');
-- a paused queue's lapsed rows are not re-taken either
select jobs_test.lapse(:'paused_id') \g /dev/null
select jobs.pause_queue(queue => 'q-paused') \g /dev/null
select is_empty($$select * from jobs.claim_v1(queues => array['q-paused'], worker_id => 'w2')$$,
                'a paused queue''s lapsed row is not re-taken');
select jobs.resume_queue(queue => 'q-paused') \g /dev/null

-- ---------------------------------------------------------------------------------------------
-- a claim sets state running, attempt + 1, claimed_by, claimed_at, the lease and the token

select jobs_test.enqueue(queue => 'q-lease', input => '{"x": 1}') as lease_id \gset
select * from jobs_test.claim_one(queue => 'q-lease', worker_id => 'w-lease',
                                  visibility => '45 seconds') \gset ls_
select is(:'ls_id'::uuid, :'lease_id'::uuid, 'the claim answers the row');
select is(:'ls_state'::text, 'running', 'the claim answers state running');
select is(:'ls_attempt'::integer, 1, 'the claim answers attempt 1');
select is(:'ls_claim'::bigint, 1::bigint, 'the first claim answers token 1');
select is(:'ls_lease_expires_at'::timestamptz, '2026-01-01 00:00:45+00'::timestamptz,
          'the claim answers lease_expires_at = now + visibility');
select is(:'ls_input'::jsonb, '{"x": 1}'::jsonb, 'the claim answers the input');
select results_eq(
  format($$select state, attempt, claimed_by, claimed_at, lease_expires_at, claims
             from jobs.jobs where id = %L$$, :'lease_id'),
  $$values ('running', 1, 'w-lease', '2026-01-01 00:00:00+00'::timestamptz,
            '2026-01-01 00:00:45+00'::timestamptz, 1::bigint)$$,
  'the row is running, attempt 1, held by the worker, leased for 45 s, token 1');

-- a row running under a live lease is never re-taken
set local durajobs.now = '2026-01-01 00:00:44+00';
select is_empty($$select * from jobs.claim_v1(queues => array['q-lease'], worker_id => 'w-other')$$,
                'a row under a live lease is not re-taken');
select is((jobs_test.job(:'lease_id')).claimed_by, 'w-lease', 'the live lease''s holder is unchanged');

-- a lapsed lease with attempts left is re-taken by another worker as a new counted attempt
set local durajobs.now = '2026-01-01 00:00:45+00';
select * from jobs_test.claim_one(queue => 'q-lease', worker_id => 'w-other') \gset rt_
select is(:'rt_id'::uuid, :'lease_id'::uuid, 'a lapsed lease is re-taken');
select is(:'rt_state'::text, 'running', 'the re-taken row is running');
select is(:'rt_attempt'::integer, 2, 'the re-take is a new counted attempt (attempt 2)');
select cmp_ok(:'rt_claim'::bigint, '>', :'ls_claim'::bigint, 'the re-take gets a larger token');
select is((jobs_test.job(:'lease_id')).claimed_by, 'w-other', 'the re-taken row is held by the new worker');
select is((jobs_test.job(:'lease_id')).lease_expires_at, '2026-01-01 00:01:15+00'::timestamptz,
          'the re-take leases the row from now');

-- the token is never reset: after an ack and a requeue, the next claim's token is larger still
select ok(jobs.ack_v1(id => :'lease_id', worker_id => 'w-other', claim => :'rt_claim'), 'the attempt is acked');
select ok(jobs.requeue(id => :'lease_id'), 'the done row is requeued');
select is((jobs_test.job(:'lease_id')).claims, :'rt_claim'::bigint, 'the requeue keeps the token');
select * from jobs_test.claim_one(queue => 'q-lease', worker_id => 'w-lease') \gset rq_
select cmp_ok(:'rq_claim'::bigint, '>', :'rt_claim'::bigint, 'the claim after a requeue gets a larger token');
select is(:'rq_attempt'::integer, 1, 'the claim after a requeue is attempt 1');

-- ---------------------------------------------------------------------------------------------
-- R40: a row whose lease lapses on its final attempt is buried, answered once, never handed out

set local durajobs.now = '2026-01-01 00:00:00+00';
select jobs_test.enqueue(name => 'r40', queue => 'q-r40', max_attempts => 3) as r40_id \gset
select * from jobs_test.claim_one(queue => 'q-r40', worker_id => 'w-a') \gset r40c1_
select jobs_test.lapse(:'r40_id') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-r40', worker_id => 'w-b') \gset r40c2_
select jobs_test.lapse(:'r40_id') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-r40', worker_id => 'w-c') \gset r40c3_
select is(array[:'r40c1_attempt'::integer, :'r40c2_attempt'::integer, :'r40c3_attempt'::integer],
          array[1, 2, 3], 'R40: three claims are attempts 1, 2 and 3');
select is(array[:'r40c1_state', :'r40c2_state', :'r40c3_state']::text[], array['running', 'running', 'running'],
          'R40: each of the three is handed out running');
select jobs_test.lapse(:'r40_id') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-r40', worker_id => 'w-d') \gset r40c4_
select is(:'r40c4_id'::uuid, :'r40_id'::uuid, 'R40: the fourth claim answers the exhausted row');
select is(:'r40c4_state'::text, 'dead', 'R40: it is answered with state dead, not running');
select is(:'r40c4_last_error'::text, 'LEASE_LAPSED_FINAL_ATTEMPT', 'R40: it is answered with its last_error');
select results_eq(
  format($$select state, last_error, attempt, finished_at, lease_expires_at, claimed_by, claims
             from jobs.jobs where id = %L$$, :'r40_id'),
  format($$values ('dead', 'LEASE_LAPSED_FINAL_ATTEMPT', 3, '2026-01-01 00:00:00+00'::timestamptz,
                   null::timestamptz, 'w-c', %s::bigint)$$, :'r40c3_claim'),
  'R40: the row is dead, LEASE_LAPSED_FINAL_ATTEMPT, finished now, no lease, not handed to w-d');
select is_empty($$select * from jobs.claim_v1(queues => array['q-r40'], worker_id => 'w-e')$$,
                'R40: a further claim does not answer the buried row again');

-- R40: a job named in drop_exhausted ends 'failed' instead of 'dead'
select jobs_test.enqueue(name => 'r40-drop', queue => 'q-r40-drop', max_attempts => 1) as r40d_id \gset
select jobs_test.claim_one(queue => 'q-r40-drop', drop_exhausted => array['r40-drop']) \g /dev/null
select jobs_test.lapse(:'r40d_id') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-r40-drop', drop_exhausted => array['r40-drop']) \gset r40d_
select is(:'r40d_state'::text, 'failed', 'R40: with its name in drop_exhausted it is answered failed');
select is((jobs_test.job(:'r40d_id')).state, 'failed', 'R40: with its name in drop_exhausted the row ends failed');
select is((jobs_test.job(:'r40d_id')).last_error, 'LEASE_LAPSED_FINAL_ATTEMPT',
          'R40: the failed row carries LEASE_LAPSED_FINAL_ATTEMPT');

-- a buried row does not take a claimed row's place: the batch still hands out a waiting row
select jobs_test.enqueue(name => 'r40-b', queue => 'q-r40-b', max_attempts => 1) as r40b_id \gset
select jobs_test.claim_one(queue => 'q-r40-b') \g /dev/null
select jobs_test.lapse(:'r40b_id') \g /dev/null
select jobs_test.enqueue(name => 'r40-b-next', queue => 'q-r40-b') as r40b_next \gset
select results_eq(
  $$select name, state from jobs.claim_v1(queues => array['q-r40-b'], worker_id => 'w1') order by state$$,
  $$values ('r40-b', 'dead'), ('r40-b-next', 'running')$$,
  'R40: the buried row is answered dead beside the waiting row handed out');


-- blank names are refused like empty ones
select throws_ok($$select * from jobs.claim_v1(queues => array['  '], worker_id => 'w')$$,
                 'JQ001', null, 'a whitespace-only queue name raises JQ001');
select throws_ok($$select * from jobs.claim_v1(queues => array['default'], worker_id => '   ')$$,
                 'JQ001', null, 'a whitespace-only worker_id raises JQ001');

-- has_steps: whether each run may have stored steps
select jobs_test.enqueue(name => 'v2-fresh', queue => 'q-v2') as v2_fresh \gset
select results_eq(
  $$select name, state, has_steps
      from jobs.claim_v1(queues => array['q-v2'], worker_id => 'w1')$$,
  $$values ('v2-fresh', 'running', false)$$,
  'claim_v1 answers a first attempt with has_steps false');
select jobs_test.enqueue(name => 'v2-stepped', queue => 'q-v2s') as v2_stepped \gset
select * from jobs_test.claim_one(queue => 'q-v2s') \gset v2s_
select jobs_test.record_step(:'v2_stepped', :v2s_claim) \g /dev/null
select jobs_test.lapse(:'v2_stepped') \g /dev/null
select results_eq(
  $$select id, has_steps, claim
      from jobs.claim_v1(queues => array['q-v2s'], worker_id => 'w2')$$,
  format($$values (%L::uuid, true, %s::bigint)$$, :'v2_stepped', :v2s_claim + 1),
  'claim_v1 answers a re-taken run that stored a step with has_steps true and a new claim');
-- past the first attempt the history is always read: a lapsed body may write a step after the
-- claim's snapshot, so has_steps cannot trust what it sees
select jobs_test.enqueue(name => 'v2-retake', queue => 'q-v2r') as v2_retake \gset
select jobs_test.claim_one(queue => 'q-v2r') \g /dev/null
select jobs_test.lapse(:'v2_retake') \g /dev/null
select results_eq(
  $$select attempt, has_steps from jobs.claim_v1(queues => array['q-v2r'], worker_id => 'w2')$$,
  $$values (2, true)$$,
  'claim_v1 answers has_steps true for a second attempt even with no step stored');

-- recover_lapsed says whether the call also looks for lapsed leases
select jobs_test.enqueue(name => 'v3-lapsed', queue => 'q-v3') as v3_lapsed \gset
select jobs_test.enqueue(name => 'v3-final', queue => 'q-v3', max_attempts => 1) as v3_final \gset
select jobs_test.claim_one(queue => 'q-v3') \g /dev/null
select jobs_test.claim_one(queue => 'q-v3') \g /dev/null
select jobs_test.lapse(:'v3_lapsed') \g /dev/null
select jobs_test.lapse(:'v3_final') \g /dev/null
select jobs_test.enqueue(name => 'v3-waiting', queue => 'q-v3') as v3_waiting \gset
select results_eq(
  $$select name, state, attempt, has_steps
      from jobs.claim_v1(queues => array['q-v3'], worker_id => 'w3', batch_size => 5,
                         recover_lapsed => false)$$,
  $$values ('v3-waiting', 'running', 1, false)$$,
  'claim_v1 without recover_lapsed hands out the waiting row and leaves the lapsed ones');
select results_eq(
  format($$select state from jobs.jobs where id in (%L, %L) order by name$$,
         :'v3_lapsed', :'v3_final'),
  $$values ('running'), ('running')$$,
  'the lapsed rows are untouched: neither re-taken nor buried');
select results_eq(
  $$select name, state, attempt, has_steps
      from jobs.claim_v1(queues => array['q-v3'], worker_id => 'w3', batch_size => 5)
     order by name$$,
  $$values ('v3-final', 'dead', 1, false), ('v3-lapsed', 'running', 2, true)$$,
  'claim_v1 recovers by default: the final attempt is buried, the other re-taken');
select results_eq(
  $$select claimed_by from jobs.jobs where name = 'v3-lapsed'$$,
  $$values ('w3')$$,
  'the re-taken row now belongs to the claiming worker');
select throws_like(
  $$select * from jobs.claim_v1(queues => array[]::text[], worker_id => 'w')$$,
  'X_JOB_CLAIM_QUEUES_EMPTY: jobs.claim_v1:%', 'the refusal names jobs.claim_v1');
select throws_ok(
  $$select * from jobs.claim_v1(queues => array['q'], worker_id => 'w', recover_lapsed => null)$$,
  'JQ001', null, 'claim_v1 refuses a NULL recover_lapsed');

-- jobs.worker_running_v1: the rows a worker holds running, with their claim tokens
select jobs_test.enqueue(queue => 'q-held') as held_a \gset
select jobs_test.enqueue(queue => 'q-held') as held_b \gset
select jobs_test.enqueue(queue => 'q-held') as held_other \gset
create temporary table held_claims as
  select c.id, c.claim from jobs.claim_v1(array['q-held'], 'w-held', batch_size => 2) c;
select jobs_test.claim_one(queue => 'q-held', worker_id => 'w-else') \g /dev/null
select set_eq(
  $$select id, claim from jobs.worker_running_v1('w-held')$$,
  $$select id, claim from held_claims$$,
  'worker_running_v1 answers the rows the worker holds, with their claim tokens');
select jobs.ack_v1(id => c.id, worker_id => 'w-held', claim => c.claim)
  from held_claims c order by c.id limit 1 \g /dev/null
select is((select count(*) from jobs.worker_running_v1('w-held')), 1::bigint,
          'a settled row is no longer held');
select is((select count(*) from jobs.worker_running_v1('nobody')), 0::bigint,
          'a worker holding nothing gets no row');
select throws_ok($$select * from jobs.worker_running_v1(' ')$$, 'JQ001',
                 'X_ARGUMENT_INVALID: jobs.worker_running_v1: worker_id must not be blank (empty or only whitespace)',
                 'a blank worker_id is refused');

-- ---------------------------------------------------------------------------------------------
-- the claim of one queue without the scan for lapsed leases (an idle worker's pickup, and a busy
-- worker's claims between scans) is one statement: it honours a pause, the hand-out order, the
-- batch size and has_steps exactly as the general claim does
select jobs_test.enqueue(name => 'one', queue => 'q-one', idempotency_key => 'one-' || n,
                         priority => 3 - n)
  from generate_series(1, 3) n \g /dev/null
select jobs.pause_queue(queue => 'q-one') \g /dev/null
select is((select count(*) from jobs.claim_v1(array['q-one'], 'w-one', 10, recover_lapsed => false)),
          0::bigint, 'the one-statement claim hands out nothing of a paused queue');
select jobs.resume_queue(queue => 'q-one') \g /dev/null
select results_eq(
  $$select j.idempotency_key, c.state, c.attempt, c.claim, c.has_steps
      from jobs.claim_v1(array['q-one'], 'w-one', 2, recover_lapsed => false)
           with ordinality as c
      join jobs.jobs j on j.id = c.id
     order by c.ordinality$$,
  $$values ('one-3', 'running', 1, 1::bigint, false), ('one-2', 'running', 1, 1::bigint, false)$$,
  'once resumed, it hands out the batch in priority order, counted, with has_steps false');
select is((select claimed_by from jobs.jobs where idempotency_key = 'one-3'), 'w-one',
          'and the rows it hands out are held by the claiming worker');
-- a fresh row of a run that stored a step (a requeued run) reads its history
select jobs_test.enqueue(name => 'one', queue => 'q-one-steps',
                         run_id => (select run_id from jobs.jobs where id = :'v2_stepped'))
  as one_stepped \gset
select results_eq(
  $$select id, attempt, has_steps
      from jobs.claim_v1(array['q-one-steps'], 'w-one', 5, recover_lapsed => false)$$,
  format($$values (%L::uuid, 1, true)$$, :'one_stepped'),
  'a first attempt of a run with a stored step is answered with has_steps true');
select is((select count(*) from jobs.claim_v1(array['q-one'], 'w-one', 10, recover_lapsed => false)),
          1::bigint, 'and the last waiting row of the queue goes to the next claim');

select * from finish();
rollback;
