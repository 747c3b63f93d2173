-- 070_pause: jobs.pause_queue and jobs.resume_queue: a pause is a row the claim reads; enqueues
-- still land while a queue is paused.
begin;
\ir fixtures/factory.sql
select plan(23);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- pause: true when this call paused it, false when already paused; the row records who and when

select is(jobs.pause_queue(queue => 'q-p', paused_by => 'ops@alice'), true, 'pause_queue answers true when it pauses');
select results_eq(
  $$select queue, paused_at, paused_by from jobs.queue_pauses where queue = 'q-p'$$,
  $$values ('q-p', '2026-01-01 00:00:00+00'::timestamptz, 'ops@alice')$$,
  'the pause is a row with paused_at = now and paused_by');
set local durajobs.now = '2026-01-01 00:05:00+00';
select is(jobs.pause_queue(queue => 'q-p', paused_by => 'ops@bob'), false,
          'pause_queue answers false when the queue is already paused');
select results_eq(
  $$select paused_at, paused_by from jobs.queue_pauses where queue = 'q-p'$$,
  $$values ('2026-01-01 00:00:00+00'::timestamptz, 'ops@alice')$$,
  'a second pause keeps the first pause''s record');
select is(jobs.pause_queue(queue => 'q-p-anon'), true, 'paused_by is optional');
select is((select paused_by from jobs.queue_pauses where queue = 'q-p-anon'), null, 'paused_by defaults to NULL');

-- bad queue names raise X_ARGUMENT_INVALID
select throws_ok($$select jobs.pause_queue(queue => null)$$, 'JQ001', null, 'pause_queue(NULL) raises JQ001');
select throws_ok($$select jobs.pause_queue(queue => '')$$, 'JQ001', null, 'pause_queue('''') raises JQ001');
select throws_ok($$select jobs.pause_queue(queue => '  ')$$, 'JQ001', null, 'pause_queue of a blank name raises JQ001');
select throws_ok($$select jobs.resume_queue(queue => null)$$, 'JQ001', null, 'resume_queue(NULL) raises JQ001');
select throws_ok($$select jobs.resume_queue(queue => '')$$, 'JQ001', null, 'resume_queue('''') raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- a paused queue: enqueues land, claims hand out nothing; other queues are unaffected

select jobs_test.enqueue(queue => 'q-p') as p_id \gset
select is((jobs_test.job(:'p_id')).state, 'ready', 'an enqueue lands on a paused queue');
select is_empty($$select * from jobs.claim_v1(queues => array['q-p'], worker_id => 'w1', batch_size => 10)$$,
                'a paused queue hands out nothing');
select jobs_test.enqueue(queue => 'q-free') as free_id \gset
select results_eq(
  $$select id from jobs.claim_v1(queues => array['q-free'], worker_id => 'w1')$$,
  format('values (%L::uuid)', :'free_id'),
  'a queue that is not paused still hands out its rows');

-- ---------------------------------------------------------------------------------------------
-- resume: true when this call resumed it, false when it was not paused; claims hand out again

select is(jobs.resume_queue(queue => 'q-p'), true, 'resume_queue answers true when it resumes');
select is((select count(*) from jobs.queue_pauses where queue = 'q-p'), 0::bigint, 'the pause row is gone');
select is(jobs.resume_queue(queue => 'q-p'), false, 'resume_queue answers false when the queue is not paused');
select is(jobs.resume_queue(queue => 'never-paused'), false, 'resume_queue of a queue never paused answers false');
select results_eq(
  $$select id from jobs.claim_v1(queues => array['q-p'], worker_id => 'w1')$$,
  format('values (%L::uuid)', :'p_id'),
  'after resume the row is handed out');
select is(jobs.pause_queue(queue => 'q-p'), true, 'a resumed queue can be paused again');
select is((select paused from jobs.queue_stats(queues => array['q-p'])), true, 'queue_stats shows the pause');

-- a pause does not touch the rows: the running row stays running and can still settle
select is((jobs_test.job(:'p_id')).state, 'running', 'the row claimed before the pause stays running');
select is(
  jobs.ack_v1(id => :'p_id', worker_id => 'w1', claim => (jobs_test.job(:'p_id')).claims), true,
  'a row of a paused queue can still be acked');

select * from finish();
rollback;
