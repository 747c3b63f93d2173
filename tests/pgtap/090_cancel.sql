-- 090_cancel: jobs.cancel stops a live job at once (a running one at its next heartbeat, its
-- settles then match nothing), and refuses a finished or unknown job, leaving it as it ended
-- (R45: done, dead, failed or cancelled, to the byte).
begin;
\ir fixtures/factory.sql
select plan(22);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- a waiting job is cancelled at once and is never claimed
select jobs_test.enqueue(name => 'c-ready', queue => 'q-cancel') as c_ready \gset
select is(jobs.cancel(id => :'c_ready', reason => 'customer left'), true, 'cancel answers true');
select is((jobs_test.job(:'c_ready')).state, 'cancelled', 'a ready job is cancelled at once');
select is((jobs_test.job(:'c_ready')).last_error, 'cancelled: customer left',
          'the reason is kept in last_error');
select is((jobs_test.job(:'c_ready')).finished_at, jobs._now(), 'finished_at is stamped');
select is((jobs_test.claim_one(queue => 'q-cancel')).id, null, 'a cancelled job is never claimed');

-- a delayed and a suspended job cancel too
select jobs_test.enqueue(name => 'c-delayed', run_at => jobs._now() + interval '1 hour') as c_delayed \gset
select is(jobs.cancel(id => :'c_delayed'), true, 'a delayed job cancels');

-- a running job: the row is cancelled, its worker learns it at the next heartbeat, and its
-- late ack matches nothing (R38: cancelled, not lost; R44: the fence on state = 'running')
select jobs_test.enqueue(name => 'c-running', queue => 'q-cancel-run') as c_running \gset
select (jobs_test.claim_one(queue => 'q-cancel-run', worker_id => 'w-c')).claim as c_claim \gset
select is(jobs.cancel(id => :'c_running'), true, 'a running job cancels');
select is(jobs.heartbeat_v1(id => :'c_running', worker_id => 'w-c', claim => :c_claim),
          'cancelled', 'its worker''s next heartbeat answers cancelled');
select is(jobs.heartbeat_v1(id => :'c_running', worker_id => 'w-other', claim => :c_claim),
          'lost', 'another worker id presenting the token hears lost, not cancelled');
select is(jobs.ack_v1(id => :'c_running', worker_id => 'w-c', claim => :c_claim), false,
          'its late ack does not land');
select is((jobs_test.job(:'c_running')).state, 'cancelled', 'the row stays cancelled');
select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w-c', claim => %s, name => 'late',
                                      status => 'completed')$$, :'c_running', :c_claim),
  'JQ008', null, 'a step write after the cancel raises X_JOB_CANCELLED');

-- a finished job is not cancellable and stays exactly as it ended
select jobs_test.done_job(name => 'c-done') as c_done \gset
select jobs_test.job(:'c_done') as c_done_before \gset
select throws_ok(format($$select jobs.cancel(id => %L)$$, :'c_done'), 'JQ013', null,
                 'cancelling a done job raises X_JOB_NOT_CANCELLABLE');
select is(jobs_test.job(:'c_done')::text, :'c_done_before', 'the done row is untouched');

-- R45: so does a dead, a failed and an already cancelled one, to the byte
select jobs_test.enqueue(name => 'c-dead', queue => 'q-cancel-end') as c_dead \gset
select (jobs_test.claim_one(queue => 'q-cancel-end', worker_id => 'w-e')).claim as c_dead_claim \gset
select jobs.nack_v1(id => :'c_dead', worker_id => 'w-e', claim => :c_dead_claim,
                    next_state => 'dead', error => 'boom') \g /dev/null
select jobs_test.enqueue(name => 'c-failed', queue => 'q-cancel-end') as c_failed \gset
select (jobs_test.claim_one(queue => 'q-cancel-end', worker_id => 'w-e')).claim as c_failed_claim \gset
select jobs.nack_v1(id => :'c_failed', worker_id => 'w-e', claim => :c_failed_claim,
                    next_state => 'failed', error => 'no') \g /dev/null
select jobs_test.job(:'c_dead') as c_dead_before \gset
select jobs_test.job(:'c_failed') as c_failed_before \gset
select jobs_test.job(:'c_ready') as c_cancelled_before \gset
select throws_ok(format($$select jobs.cancel(id => %L)$$, :'c_dead'), 'JQ013', null,
                 'R45: cancelling a dead job raises X_JOB_NOT_CANCELLABLE');
select is(jobs_test.job(:'c_dead')::text, :'c_dead_before', 'R45: the dead row is untouched');
select throws_ok(format($$select jobs.cancel(id => %L)$$, :'c_failed'), 'JQ013', null,
                 'R45: cancelling a failed job raises X_JOB_NOT_CANCELLABLE');
select is(jobs_test.job(:'c_failed')::text, :'c_failed_before', 'R45: the failed row is untouched');
select throws_ok(format($$select jobs.cancel(id => %L)$$, :'c_ready'), 'JQ013', null,
                 'R45: cancelling a cancelled job again raises X_JOB_NOT_CANCELLABLE');
select is(jobs_test.job(:'c_ready')::text, :'c_cancelled_before',
          'R45: the cancelled row keeps its reason and its finish, to the byte');
select throws_ok($$select jobs.cancel(id => gen_random_uuid())$$, 'JQ013', null,
                 'cancelling an unknown id raises X_JOB_NOT_CANCELLABLE');
select throws_ok($$select jobs.cancel(id => null)$$, 'JQ001', null, 'a NULL id raises JQ001');

select * from finish();
rollback;
