-- 050_steps: record_step_v1 and steps_v1: durable step checkpoints keyed by run, fenced on the
-- claim (R39), never overwriting a completed step, and refusing unknown statuses (R22).
begin;
\ir fixtures/factory.sql
select plan(44);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- a step is stored for the job's run and read back by steps_v1

select * from jobs.enqueue(name => 'st', input => '{}', idempotency_key => 'k-st', queue => 'q-st') \gset st_
select * from jobs_test.claim_one(queue => 'q-st', worker_id => 'w1') \gset c1_
select * from jobs.record_step_v1(id => :'st_id', worker_id => 'w1', claim => :'c1_claim', name => 'fetch',
                                  status => 'completed', output => '{"rows": 3}') \gset rec_
select is(:'rec_name'::text, 'fetch', 'record_step_v1 answers the stored step''s name');
select is(:'rec_status'::text, 'completed', 'record_step_v1 answers the stored status');
select is(:'rec_attempts'::integer, 1, 'a first record has attempts 1');
select results_eq(
  format($$select name, status, output, error, attempts, started_at, finished_at, wake_at
             from jobs.steps_v1(run_id => %L)$$, :'st_run_id'),
  $$values ('fetch', 'completed', '{"rows": 3}'::jsonb, null::text, 1,
            '2026-01-01 00:00:00+00'::timestamptz, '2026-01-01 00:00:00+00'::timestamptz, null::timestamptz)$$,
  'steps_v1(run_id) reads the completed step back: status, output, attempts, started and finished now');
select is((select count(*) from jobs.steps where run_id = :'st_run_id'), 1::bigint,
          'the step is stored under the job''s run_id');

-- a sleeping step keeps its wake_at and is not finished
set local durajobs.now = '2026-01-01 00:00:01+00';
select jobs.record_step_v1(id => :'st_id', worker_id => 'w1', claim => :'c1_claim', name => 'nap',
                           status => 'sleeping', wake_at => '2026-01-01 01:00:00+00') \g /dev/null
select results_eq(
  format($$select status, finished_at, wake_at from jobs.steps_v1(run_id => %L) where name = 'nap'$$, :'st_run_id'),
  $$values ('sleeping', null::timestamptz, '2026-01-01 01:00:00+00'::timestamptz)$$,
  'a sleeping step stores wake_at and is not finished');
-- steps_v1 answers the steps in the order they started
select results_eq(
  format($$select name from jobs.steps_v1(run_id => %L)$$, :'st_run_id'),
  $$values ('fetch'), ('nap')$$,
  'steps_v1 answers steps in the order they started');
-- a sleeping step that wakes and completes keeps its start and attempts
set local durajobs.now = '2026-01-01 00:00:02+00';
select jobs.record_step_v1(id => :'st_id', worker_id => 'w1', claim => :'c1_claim', name => 'nap',
                           status => 'completed', output => '{"slept": true}') \g /dev/null
select results_eq(
  format($$select status, output, attempts, started_at, finished_at, wake_at
             from jobs.steps_v1(run_id => %L) where name = 'nap'$$, :'st_run_id'),
  $$values ('completed', '{"slept": true}'::jsonb, 1, '2026-01-01 00:00:01+00'::timestamptz,
            '2026-01-01 00:00:02+00'::timestamptz, null::timestamptz)$$,
  'a sleeping step completes in place: its start kept, attempts still 1');

-- ---------------------------------------------------------------------------------------------
-- a completed step is never overwritten: JQ009, and its output is unchanged

select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => 'fetch',
                                      status => 'completed', output => '{"rows": 99}')$$, :'st_id', :'c1_claim'),
  'JQ009', null, 'recording a completed step again raises JQ009');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => 'fetch',
                                      status => 'failed', error => 'late failure')$$, :'st_id', :'c1_claim'),
  'JQ009', null, 'recording a completed step as failed raises JQ009');
select results_eq(
  format($$select status, output, error, attempts from jobs.steps_v1(run_id => %L) where name = 'fetch'$$, :'st_run_id'),
  $$values ('completed', '{"rows": 3}'::jsonb, null::text, 1)$$,
  'the completed step''s status, output and attempts are unchanged');

-- a failed step can be recorded again, and counts one more attempt
select jobs.record_step_v1(id => :'st_id', worker_id => 'w1', claim => :'c1_claim', name => 'charge',
                           status => 'failed', error => 'card declined') \g /dev/null
select results_eq(
  format($$select status, error, attempts from jobs.steps_v1(run_id => %L) where name = 'charge'$$, :'st_run_id'),
  $$values ('failed', 'card declined', 1)$$,
  'a failed step is stored with its error');
select * from jobs.record_step_v1(id => :'st_id', worker_id => 'w1', claim => :'c1_claim', name => 'charge',
                                  status => 'completed', output => '{"charged": 10}') \gset rec2_
select is(:'rec2_attempts'::integer, 2, 'a failed step re-recorded answers attempts 2');
select results_eq(
  format($$select status, output, error, attempts from jobs.steps_v1(run_id => %L) where name = 'charge'$$, :'st_run_id'),
  $$values ('completed', '{"charged": 10}'::jsonb, null::text, 2)$$,
  'the re-recorded step is completed with its output and attempts 2');

-- ---------------------------------------------------------------------------------------------
-- bad arguments raise X_ARGUMENT_INVALID (R22: the writer refuses an unknown status)

select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => 'x',
                                      status => 'archived')$$, :'st_id', :'c1_claim'),
  'JQ001', null, 'R22: status ''archived'' raises JQ001');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => 'x',
                                      status => null)$$, :'st_id', :'c1_claim'),
  'JQ001', null, 'a NULL status raises JQ001');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => '',
                                      status => 'completed')$$, :'st_id', :'c1_claim'),
  'JQ001', null, 'an empty step name raises JQ001');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => null, name => 'x',
                                      status => 'completed')$$, :'st_id'),
  'JQ001', null, 'a missing claim token raises JQ001');
select is((select count(*) from jobs.steps where run_id = :'st_run_id' and name = 'x'), 0::bigint,
          'R22: no refused step was stored');
select throws_ok($$select * from jobs.steps_v1(run_id => null)$$, 'JQ001', null,
                 'steps_v1 of a NULL run raises JQ001');
select is_empty($$select * from jobs.steps_v1(run_id => gen_random_uuid())$$,
                'steps_v1 of a run with no steps answers no rows');

-- ---------------------------------------------------------------------------------------------
-- R39: a write with a stale token raises X_JOB_LEASE_LOST and changes no step

set local durajobs.now = '2026-01-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-st-stale') as ss_id \gset
select (jobs_test.job(:'ss_id')).run_id as ss_run_id \gset
select * from jobs_test.claim_one(queue => 'q-st-stale', worker_id => 'w1') \gset ss1_
select jobs.record_step_v1(id => :'ss_id', worker_id => 'w1', claim => :'ss1_claim', name => 'wait',
                           status => 'waiting') \g /dev/null
select jobs_test.lapse(:'ss_id') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-st-stale', worker_id => 'w1') \gset ss2_
select array_agg(s order by s.name)::text as ss_steps_before from jobs.steps s where run_id = :'ss_run_id' \gset
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => 'wait',
                                      status => 'completed', output => '{"stale": true}')$$, :'ss_id', :'ss1_claim'),
  'JQ007', null, 'R39: a step write with the stale token raises JQ007');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => 'new-step',
                                      status => 'completed')$$, :'ss_id', :'ss1_claim'),
  'JQ007', null, 'R39: a new step with the stale token raises JQ007');
select is((select array_agg(s order by s.name)::text from jobs.steps s where run_id = :'ss_run_id'),
          :'ss_steps_before', 'R39: the stale writes changed no step row');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w2', claim => %s, name => 'wait',
                                      status => 'completed')$$, :'ss_id', :'ss2_claim'),
  'JQ007', null, 'a step write by another worker id raises JQ007');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => 1, name => 'wait',
                                      status => 'completed')$$, gen_random_uuid()),
  'JQ007', null, 'a step write for an unknown job raises JQ007');
-- the current attempt writes
select is(
  (jobs.record_step_v1(id => :'ss_id', worker_id => 'w1', claim => :'ss2_claim', name => 'wait',
                       status => 'completed', output => '{"current": true}')).output,
  '{"current": true}'::jsonb, 'the current token''s write lands');
-- once the attempt is acked, its token writes no more
select ok(jobs.ack_v1(id => :'ss_id', worker_id => 'w1', claim => :'ss2_claim'), 'the attempt is acked');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => 'after-ack',
                                      status => 'completed')$$, :'ss_id', :'ss2_claim'),
  'JQ007', null, 'a step write after the ack raises JQ007');

-- ---------------------------------------------------------------------------------------------
-- a write after a cancel raises X_JOB_CANCELLED and stores nothing

select jobs_test.enqueue(queue => 'q-st-cancel') as sc_id \gset
select (jobs_test.job(:'sc_id')).run_id as sc_run_id \gset
select * from jobs_test.claim_one(queue => 'q-st-cancel', worker_id => 'w1') \gset sc_
select jobs_test.cancel(:'sc_id') \g /dev/null
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => 's',
                                      status => 'completed')$$, :'sc_id', :'sc_claim'),
  'JQ008', null, 'a step write after a cancel raises JQ008');
select is((select count(*) from jobs.steps where run_id = :'sc_run_id'), 0::bigint,
          'the cancelled attempt stored no step');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => 's',
                                      status => 'completed')$$, :'sc_id', :'sc_claim'::bigint - 1),
  'JQ007', null, 'an older attempt of a cancelled job hears JQ007, not JQ008');

-- ---------------------------------------------------------------------------------------------
-- steps are keyed by run: they survive a requeue (same run_id) and replay

select jobs_test.enqueue(queue => 'q-st-requeue') as sr_id \gset
select (jobs_test.job(:'sr_id')).run_id as sr_run_id \gset
select * from jobs_test.claim_one(queue => 'q-st-requeue', worker_id => 'w1') \gset sr1_
select jobs.record_step_v1(id => :'sr_id', worker_id => 'w1', claim => :'sr1_claim', name => 'one',
                           status => 'completed', output => '{"n": 1}') \g /dev/null
select ok(jobs.ack_v1(id => :'sr_id', worker_id => 'w1', claim => :'sr1_claim'), 'the job runs to done');
select ok(jobs.requeue(id => :'sr_id'), 'the done job is requeued');
select is((jobs_test.job(:'sr_id')).run_id, :'sr_run_id'::uuid, 'the requeue keeps the run_id');
select results_eq(
  format($$select name, status, output from jobs.steps_v1(run_id => %L)$$, :'sr_run_id'),
  $$values ('one', 'completed', '{"n": 1}'::jsonb)$$,
  'the step survives the requeue');
select * from jobs_test.claim_one(queue => 'q-st-requeue', worker_id => 'w2') \gset sr2_
select is(:'sr2_run_id'::uuid, :'sr_run_id'::uuid, 'the new attempt is answered the same run_id');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w2', claim => %s, name => 'one',
                                      status => 'completed')$$, :'sr_id', :'sr2_claim'),
  'JQ009', null, 'the new attempt cannot run the completed step again');
select is(
  (jobs.record_step_v1(id => :'sr_id', worker_id => 'w2', claim => :'sr2_claim', name => 'two',
                       status => 'completed')).attempts,
  1, 'the new attempt records its next step');

-- a run's steps are its own: another job's run sees none of them, a resumed run sees them all
select jobs_test.enqueue() as other_id \gset
select is_empty(
  format($$select * from jobs.steps_v1(run_id => %L)$$, (jobs_test.job(:'other_id')).run_id),
  'another run has no steps');
select jobs_test.enqueue(name => 'resumed', run_id => :'sr_run_id') as resumed_id \gset
select is((jobs_test.job(:'resumed_id')).run_id, :'sr_run_id'::uuid, 'a job enqueued with a run_id resumes that run');
select results_eq(
  format($$select name from jobs.steps_v1(run_id => %L)$$, (jobs_test.job(:'resumed_id')).run_id),
  $$values ('one'), ('two')$$,
  'a resumed run reads the run''s steps');


-- after a cancel, only the attempt that held the row hears X_JOB_CANCELLED; another worker id
-- presenting the same token is not the holder and hears X_JOB_LEASE_LOST
select jobs_test.enqueue(name => 'st-cancel', queue => 'q-st-cancel') as st_cancel \gset
select (jobs_test.claim_one(queue => 'q-st-cancel', worker_id => 'w-st')).claim as st_claim \gset
select jobs.cancel(id => :'st_cancel') \g /dev/null
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w-st', claim => %s, name => 'x',
                                      status => 'completed')$$, :'st_cancel', :st_claim),
  'JQ008', null, 'the holding attempt hears X_JOB_CANCELLED');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w-intruder', claim => %s,
                                      name => 'x', status => 'completed')$$, :'st_cancel', :st_claim),
  'JQ007', null, 'another worker id hears X_JOB_LEASE_LOST');

select * from finish();
rollback;
