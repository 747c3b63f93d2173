-- 080_requeue: jobs.requeue (R8): only a finished job runs again, keeping its run and its claim
-- token; from_step drops that step and every later one.
begin;
\ir fixtures/factory.sql
select plan(36);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- R8: a live row (running, ready, delayed, suspended) is not requeueable, and is left untouched

select jobs_test.enqueue(queue => 'q-rq-running') as rq_running \gset
select jobs_test.claim_one(queue => 'q-rq-running') \g /dev/null
select jobs_test.enqueue(queue => 'q-rq-ready') as rq_ready \gset
select jobs_test.enqueue(queue => 'q-rq-delayed', run_at => '2026-02-01 00:00:00+00') as rq_delayed \gset
select jobs_test.enqueue(queue => 'q-rq-susp') as rq_susp \gset
select * from jobs_test.claim_one(queue => 'q-rq-susp') \gset rqs_
select jobs.nack_v1(id => :'rq_susp', worker_id => 'w1', claim => :'rqs_claim', next_state => 'suspended',
                    delay => '1 hour') \g /dev/null
select string_agg(j::text, ';' order by j.id) as live_before
  from jobs.jobs j where j.id in (:'rq_running', :'rq_ready', :'rq_delayed', :'rq_susp') \gset

select throws_ok(format('select jobs.requeue(id => %L)', :'rq_running'), 'JQ012', null,
                 'R8: requeue of a running row raises JQ012');
select throws_ok(format('select jobs.requeue(id => %L)', :'rq_ready'), 'JQ012', null,
                 'R8: requeue of a ready row raises JQ012');
select throws_ok(format('select jobs.requeue(id => %L)', :'rq_delayed'), 'JQ012', null,
                 'R8: requeue of a delayed row raises JQ012');
select throws_ok(format('select jobs.requeue(id => %L)', :'rq_susp'), 'JQ012', null,
                 'R8: requeue of a suspended row raises JQ012');
select is(
  (select string_agg(j::text, ';' order by j.id)
     from jobs.jobs j where j.id in (:'rq_running', :'rq_ready', :'rq_delayed', :'rq_susp')),
  :'live_before', 'R8: the refused requeues left every live row untouched');

-- an unknown id raises X_JOB_NOT_FOUND; a NULL id X_ARGUMENT_INVALID
select throws_ok(format('select jobs.requeue(id => %L)', gen_random_uuid()), 'JQ011', null,
                 'R8: requeue of an unknown uuid raises JQ011');
select throws_ok($$select jobs.requeue(id => null)$$, 'JQ001', null, 'requeue of a NULL id raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- R8: a done row goes back to ready, due now, attempt 0, no last error, its token kept

select jobs_test.enqueue(queue => 'q-rq-done') as rd_id \gset
select (jobs_test.job(:'rd_id')).run_id as rd_run_id \gset
select * from jobs_test.claim_one(queue => 'q-rq-done') \gset rd1_
select jobs.nack_v1(id => :'rd_id', worker_id => 'w1', claim => :'rd1_claim', error => 'flaky',
                    error_code => 'E_FLAKY', error_stack => 'trace') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-rq-done') \gset rd2_
select jobs.ack_v1(id => :'rd_id', worker_id => 'w1', claim => :'rd2_claim') \g /dev/null
select results_eq(
  format($$select state, attempt, last_error, claims from jobs.jobs where id = %L$$, :'rd_id'),
  format($$values ('done', 2, 'flaky', %s::bigint)$$, :'rd2_claim'),
  'the fixture: a done row, attempt 2, with a last error');

set local durajobs.now = '2026-01-01 01:00:00+00';
select is(jobs.requeue(id => :'rd_id'), true, 'R8: requeue of a done row answers true');
select results_eq(
  format($$select state, attempt, last_error, last_error_code, last_error_stack, run_at, finished_at,
                  lease_expires_at, updated_at, claims, run_id
             from jobs.jobs where id = %L$$, :'rd_id'),
  format($$values ('ready', 0, null::text, null::text, null::text, '2026-01-01 01:00:00+00'::timestamptz,
                   null::timestamptz, null::timestamptz, '2026-01-01 01:00:00+00'::timestamptz, %s::bigint,
                   %L::uuid)$$, :'rd2_claim', :'rd_run_id'),
  'R8: the row is ready, attempt 0, no last error, due now, unfinished, claims and run_id unchanged');

-- the old token cannot settle the new attempt; the next claim gets a larger token
select is(jobs.ack_v1(id => :'rd_id', worker_id => 'w1', claim => :'rd2_claim'), false,
          'R8/R39: the token from before the requeue cannot ack the requeued row');
select * from jobs_test.claim_one(queue => 'q-rq-done') \gset rd3_
select is(:'rd3_id'::uuid, :'rd_id'::uuid, 'R8: the requeued row is handed out again');
select cmp_ok(:'rd3_claim'::bigint, '>', :'rd2_claim'::bigint, 'R8/R39: the new claim''s token is larger');
select is(:'rd3_attempt'::integer, 1, 'R8: the new claim is attempt 1');
select is(jobs.ack_v1(id => :'rd_id', worker_id => 'w1', claim => :'rd2_claim'), false,
          'R8/R39: the old token still cannot ack the new attempt');
select is(jobs.ack_v1(id => :'rd_id', worker_id => 'w1', claim => :'rd3_claim'), true,
          'R8: the new token acks it');

-- failed, dead and cancelled rows requeue too
set local durajobs.now = '2026-01-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-rq-failed') as rf_id \gset
select * from jobs_test.claim_one(queue => 'q-rq-failed') \gset rf_
select jobs.nack_v1(id => :'rf_id', worker_id => 'w1', claim => :'rf_claim', next_state => 'failed') \g /dev/null
select is(jobs.requeue(id => :'rf_id'), true, 'R8: a failed row requeues');
select is((jobs_test.job(:'rf_id')).state, 'ready', 'R8: the failed row is ready again');
select jobs_test.enqueue(queue => 'q-rq-dead') as rx_id \gset
select * from jobs_test.claim_one(queue => 'q-rq-dead') \gset rx_
select jobs.nack_v1(id => :'rx_id', worker_id => 'w1', claim => :'rx_claim', next_state => 'dead') \g /dev/null
select is(jobs.requeue(id => :'rx_id'), true, 'R8: a dead row requeues');
select is((jobs_test.job(:'rx_id')).state, 'ready', 'R8: the dead row is ready again');
select jobs_test.enqueue(queue => 'q-rq-cancelled') as rc_id \gset
select jobs_test.claim_one(queue => 'q-rq-cancelled') \g /dev/null
select jobs_test.cancel(:'rc_id') \g /dev/null
select is(jobs.requeue(id => :'rc_id'), true, 'R8: a cancelled row requeues');
select is((jobs_test.job(:'rc_id')).state, 'ready', 'R8: the cancelled row is ready again');

-- ---------------------------------------------------------------------------------------------
-- R8: a dead row whose key a live row holds raises X_JOB_DUPLICATE and stays dead

select jobs_test.enqueue(name => 'rk', idempotency_key => 'k-rq-key', queue => 'q-rq-key') as rk_old \gset
select * from jobs_test.claim_one(queue => 'q-rq-key') \gset rk_
select jobs.nack_v1(id => :'rk_old', worker_id => 'w1', claim => :'rk_claim', next_state => 'dead') \g /dev/null
select jobs_test.enqueue(name => 'rk', idempotency_key => 'k-rq-key', queue => 'q-rq-key') as rk_live \gset
select isnt(:'rk_live'::uuid, :'rk_old'::uuid, 'the fixture: a new live row holds the dead row''s key');
select throws_ok(format('select jobs.requeue(id => %L)', :'rk_old'), 'JQ004', null,
                 'R8: requeue of a dead row whose key a live row holds raises JQ004');
select is((jobs_test.job(:'rk_old')).state, 'dead', 'R8: the refused row stays dead');
select is((select count(*) from jobs.jobs where idempotency_key = 'k-rq-key' and state = 'ready'), 1::bigint,
          'R8: only the live holder is ready');
-- the same key under another tenant does not block
select jobs_test.enqueue(name => 'rk', idempotency_key => 'k-rq-key', queue => 'q-rq-key-t',
                         tenant_id => 't1') as rkt_id \gset
select * from jobs_test.claim_one(queue => 'q-rq-key-t') \gset rkt_
select jobs.ack_v1(id => :'rkt_id', worker_id => 'w1', claim => :'rkt_claim') \g /dev/null
select is(jobs.requeue(id => :'rkt_id'), true, 'a tenant''s row is not blocked by the tenantless holder');

-- ---------------------------------------------------------------------------------------------
-- R8: from_step drops that step and every step that started after it, keeping earlier ones

set local durajobs.now = '2026-01-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-rq-steps') as rs_id \gset
select (jobs_test.job(:'rs_id')).run_id as rs_run_id \gset
select * from jobs_test.claim_one(queue => 'q-rq-steps') \gset rs_
select jobs_test.record_step(:'rs_id', :'rs_claim', name => 'a') \g /dev/null
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.record_step(:'rs_id', :'rs_claim', name => 'b') \g /dev/null
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.record_step(:'rs_id', :'rs_claim', name => 'c') \g /dev/null
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.record_step(:'rs_id', :'rs_claim', name => 'd', status => 'failed', error => 'broke') \g /dev/null
select jobs.nack_v1(id => :'rs_id', worker_id => 'w1', claim => :'rs_claim', next_state => 'dead',
                    error => 'broke') \g /dev/null

-- from_step naming no step of the run raises X_ARGUMENT_INVALID and changes nothing
select throws_ok(format($$select jobs.requeue(id => %L, from_step => 'nope')$$, :'rs_id'), 'JQ001', null,
                 'R8: from_step naming no step raises JQ001');
select is((jobs_test.job(:'rs_id')).state, 'dead', 'R8: the refused requeue left the row dead');
select results_eq(
  format($$select name from jobs.steps_v1(run_id => %L)$$, :'rs_run_id'),
  $$values ('a'), ('b'), ('c'), ('d')$$,
  'R8: the refused requeue dropped no step');

select is(jobs.requeue(id => :'rs_id', from_step => 'b'), true, 'R8: requeue from_step b answers true');
select results_eq(
  format($$select name, status from jobs.steps_v1(run_id => %L)$$, :'rs_run_id'),
  $$values ('a', 'completed')$$,
  'R8: from_step b drops b and every later-started step (c, d), keeping a');
select is((jobs_test.job(:'rs_id')).state, 'ready', 'R8: the row is ready again');

-- a plain requeue keeps every step
select jobs_test.advance(interval '1 second') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-rq-steps') \gset rs2_
select jobs_test.record_step(:'rs_id', :'rs2_claim', name => 'b') \g /dev/null
select jobs.ack_v1(id => :'rs_id', worker_id => 'w1', claim => :'rs2_claim') \g /dev/null
select is(jobs.requeue(id => :'rs_id'), true, 'a plain requeue answers true');
select results_eq(
  format($$select name from jobs.steps_v1(run_id => %L)$$, :'rs_run_id'),
  $$values ('a'), ('b')$$,
  'a plain requeue keeps every step');


-- a step that started in the same instant as from_step is dropped too: rerun rather than skip
set local durajobs.now = '2026-07-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-rq-ties') as rt_id \gset
select (jobs_test.job(:'rt_id')).run_id as rt_run_id \gset
select * from jobs_test.claim_one(queue => 'q-rq-ties') \gset rt_
select jobs_test.record_step(:'rt_id', :'rt_claim', name => 'first') \g /dev/null
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.record_step(:'rt_id', :'rt_claim', name => 'zz-twin') \g /dev/null
select jobs_test.record_step(:'rt_id', :'rt_claim', name => 'aa-twin') \g /dev/null
select jobs.ack_v1(id => :'rt_id', worker_id => 'w1', claim => :'rt_claim') \g /dev/null
select jobs.requeue(id => :'rt_id', from_step => 'zz-twin') \g /dev/null
select results_eq(
  format($$select name from jobs.steps_v1(run_id => %L)$$, :'rt_run_id'),
  $$values ('first')$$,
  'from_step drops a step that started in the same instant, whatever its name');

select * from finish();
rollback;
