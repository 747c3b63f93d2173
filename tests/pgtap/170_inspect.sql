-- 170_inspect: jobs.inspect_job answers one job in full (the row, its run's steps in start
-- order, whether its queue is paused); jobs.queue_depth answers what an autoscaler scales on:
-- running + due - running rows held by a live draining worker, paused queues left out.
begin;
\ir fixtures/factory.sql
select plan(43);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- =============================================================================================
-- inspect_job: the job row, input and progress included

select jobs_test.enqueue(name => 'insp', queue => 'q-insp', input => '{"user_id": 42}')
  as iid \gset
select * from jobs_test.claim_one(queue => 'q-insp', worker_id => 'w1') \gset i_

-- steps: started in an order their names do not follow; two start in the same instant
select jobs_test.record_step(:'iid', :i_claim, name => 'b-first', status => 'sleeping',
                             output => null) \g /dev/null
set local durajobs.now = '2026-01-01 00:00:01.5+00';
select jobs_test.record_step(:'iid', :i_claim, name => 'a-second', status => 'completed',
                             output => '{"n": "é"}') \g /dev/null
set local durajobs.now = '2026-01-01 00:00:03+00';
select jobs_test.record_step(:'iid', :i_claim, name => 'b-first', status => 'completed',
                             output => '{"ok": true}') \g /dev/null
select jobs_test.record_step(:'iid', :i_claim, name => 'c-failed', status => 'failed',
                             output => null, error => 'first failure') \g /dev/null
set local durajobs.now = '2026-01-01 00:00:04+00';
select jobs_test.record_step(:'iid', :i_claim, name => 'c-failed', status => 'failed',
                             output => null, error => 'second failure') \g /dev/null
set local durajobs.now = '2026-01-01 00:00:05+00';
select jobs.record_step_v1(id => :'iid', worker_id => 'w1', claim => :i_claim, name => 'e-tie2',
                           status => 'waiting', wake_at => '2026-01-02 00:00:00+00')
  \g /dev/null
select jobs.record_step_v1(id => :'iid', worker_id => 'w1', claim => :i_claim, name => 'e-tie1',
                           status => 'completed', output => '[]') \g /dev/null
select jobs.progress_v1(id => :'iid', worker_id => 'w1', claim => :i_claim, done => 2,
                        total => 5, note => 'two of five') \g /dev/null

-- another job's steps are not this job's
select jobs_test.enqueue(name => 'insp-other', queue => 'q-insp-other') as oid \gset
select * from jobs_test.claim_one(queue => 'q-insp-other', worker_id => 'w1') \gset o_
select jobs_test.record_step(:'oid', :o_claim, name => 'a-other') \g /dev/null

select jobs.inspect_job(id => :'iid') as doc \gset

select is((select array_agg(k order by k) from jsonb_object_keys(:'doc'::jsonb) k),
          array['children', 'job', 'limit', 'queue_paused', 'rules', 'steps'],
          'inspect_job answers job, steps, queue_paused, limit, rules, children');
select is(:'doc'::jsonb -> 'job', to_jsonb(jobs_test.job(:'iid')),
          'job is the whole row, every column');
select is(:'doc'::jsonb -> 'job' -> 'input', '{"user_id": 42}'::jsonb, 'job carries the input');
select is((:'doc'::jsonb -> 'job' -> 'progress') - 'at',
          '{"done": 2, "total": 5, "note": "two of five"}'::jsonb, 'job carries the progress');
select is(:'doc'::jsonb -> 'job' ->> 'state', 'running', 'job carries the state');
select is(:'doc'::jsonb -> 'queue_paused', 'false'::jsonb,
          'queue_paused is false for a queue not paused');

select is((select array_agg(s ->> 'name' order by o)
             from jsonb_array_elements(:'doc'::jsonb -> 'steps') with ordinality e(s, o)),
          array['b-first', 'a-second', 'c-failed', 'e-tie1', 'e-tie2'],
          'steps come in start order (a tie by name), only this run''s');
select is((select array_agg(k order by k)
             from jsonb_object_keys(:'doc'::jsonb -> 'steps' -> 0) k),
          array['attempts', 'duration_ms', 'error', 'finished_at', 'name', 'output_bytes',
                'started_at', 'status', 'updated_at', 'wake_at'],
          'a step has name, status, attempts, the times, duration_ms, output_bytes, error');
select is(:'doc'::jsonb -> 'steps' -> 0,
          jsonb_build_object('name', 'b-first', 'status', 'completed', 'attempts', 1,
                             'started_at', '2026-01-01 00:00:00+00'::timestamptz,
                             'updated_at', '2026-01-01 00:00:03+00'::timestamptz,
                             'finished_at', '2026-01-01 00:00:03+00'::timestamptz,
                             'wake_at', null, 'duration_ms', 3000,
                             'output_bytes', octet_length('{"ok": true}'), 'error', null),
          'a step slept then completed: duration_ms runs from its start to its finish');
select is((:'doc'::jsonb -> 'steps' -> 0 -> 'output_bytes')::int, 12,
          'output_bytes of {"ok": true} is 12');
select is(:'doc'::jsonb -> 'steps' -> 1 -> 'duration_ms', '0'::jsonb,
          'a step completed at its first record lasts 0 ms');
select is((:'doc'::jsonb -> 'steps' -> 1 -> 'output_bytes')::int, 11,
          'output_bytes counts bytes, not characters ({"n": "é"} is 11 bytes)');
select is(:'doc'::jsonb -> 'steps' -> 2,
          jsonb_build_object('name', 'c-failed', 'status', 'failed', 'attempts', 2,
                             'started_at', '2026-01-01 00:00:03+00'::timestamptz,
                             'updated_at', '2026-01-01 00:00:04+00'::timestamptz,
                             'finished_at', '2026-01-01 00:00:04+00'::timestamptz,
                             'wake_at', null, 'duration_ms', 1000, 'output_bytes', null,
                             'error', 'second failure'),
          'a step that failed twice: attempts 2, the last error, no output');
select is(:'doc'::jsonb -> 'steps' -> 4,
          jsonb_build_object('name', 'e-tie2', 'status', 'waiting', 'attempts', 1,
                             'started_at', '2026-01-01 00:00:05+00'::timestamptz,
                             'updated_at', '2026-01-01 00:00:05+00'::timestamptz,
                             'finished_at', null,
                             'wake_at', '2026-01-02 00:00:00+00'::timestamptz,
                             'duration_ms', null, 'output_bytes', null, 'error', null),
          'a waiting step: no finish, so duration_ms null; its wake_at');
select is((:'doc'::jsonb -> 'steps' -> 3 -> 'output_bytes')::int, 2,
          'output_bytes of [] is 2');

-- a paused queue; a job with no steps
select jobs.pause_queue(queue => 'q-insp') \g /dev/null
select is(jobs.inspect_job(id => :'iid') -> 'queue_paused', 'true'::jsonb,
          'queue_paused is true after pause_queue');
select is(jobs.inspect_job(id => :'oid') -> 'queue_paused', 'false'::jsonb,
          'another queue''s pause does not show');
select jobs_test.enqueue(name => 'insp-bare', queue => 'q-insp-bare') as bid \gset
select is(jobs.inspect_job(id => :'bid') -> 'steps', '[]'::jsonb,
          'a job with no steps answers steps []');
select is(jobs.inspect_job(id => :'bid') -> 'job' -> 'progress', 'null'::jsonb,
          'a job with no progress answers progress null');

-- a finished job is inspected the same way, its steps kept
select jobs.ack_v1(id => :'oid', worker_id => 'w1', claim => :o_claim) \g /dev/null
select is(jobs.inspect_job(id => :'oid') -> 'job' ->> 'state', 'done',
          'inspect_job answers a finished job');
select is(jsonb_array_length(jobs.inspect_job(id => :'oid') -> 'steps'), 1,
          'a finished job keeps its step trace');

-- errors
select throws_ok(format($$select jobs.inspect_job(id => %L)$$, gen_random_uuid()),
                 'JQ011', null, 'inspect_job of an unknown id raises X_JOB_NOT_FOUND (JQ011)');
select throws_ok($$select jobs.inspect_job(id => null)$$, 'JQ001',
                 'X_ARGUMENT_INVALID: jobs.inspect_job: id must be a job id',
                 'inspect_job of a NULL id raises JQ001');

-- =============================================================================================
-- queue_depth

delete from jobs.queue_pauses;
delete from jobs.steps;
delete from jobs.jobs;
set local durajobs.now = '2026-02-01 00:00:00+00';

-- the workers: a normal one, a draining one live for an hour, a draining one live for 10 s
select jobs.worker_announce(worker_id => 'w-normal', host => 'h', pid => 1,
                            queues => array['qd-a'], slots => 4, ttl => '1 hour') \g /dev/null
select jobs.worker_announce(worker_id => 'w-drain', host => 'h', pid => 2,
                            queues => array['qd-a'], slots => 4, ttl => '1 hour') \g /dev/null
select jobs.worker_announce(worker_id => 'w-drain-old', host => 'h', pid => 3,
                            queues => array['qd-a'], slots => 4, ttl => '10 seconds') \g /dev/null
select jobs.worker_draining(worker_id => 'w-drain') \g /dev/null
select jobs.worker_draining(worker_id => 'w-drain-old') \g /dev/null

-- qd-a: each row is enqueued and claimed alone, so the claim takes the row meant
create function jobs_test.qd_running(worker_id text)
returns jobs.claimed_job
language plpgsql
volatile
as $$
declare
  v_id uuid;
  v_claimed jobs.claimed_job;
begin
  v_id := jobs_test.enqueue(queue => 'qd-a');
  v_claimed := jobs_test.claim_one(queue => 'qd-a', worker_id => qd_running.worker_id,
                                   visibility => interval '1 hour');
  if v_claimed.id is distinct from v_id then
    raise exception 'jobs_test.qd_running: claimed % instead of %', v_claimed.id, v_id;
  end if;
  return v_claimed;
end;
$$;

select jobs_test.qd_running('w-normal') \g /dev/null
select jobs_test.qd_running('w-normal') \g /dev/null
select jobs_test.qd_running('w-drain') \g /dev/null
select jobs_test.qd_running('w-drain-old') \g /dev/null
-- a suspended row due in an hour, a ready row backing off an hour
select * from jobs_test.qd_running('w-normal') \gset s2_
select jobs.nack_v1(id => :'s2_id', worker_id => 'w-normal', claim => :s2_claim,
                    next_state => 'suspended', delay => '1 hour') \g /dev/null
select * from jobs_test.qd_running('w-normal') \gset b1_
select jobs.nack_v1(id => :'b1_id', worker_id => 'w-normal', claim => :b1_claim,
                    next_state => 'ready', delay => '1 hour') \g /dev/null
-- finished rows: done, dead, cancelled
select * from jobs_test.qd_running('w-normal') \gset f1_
select jobs.ack_v1(id => :'f1_id', worker_id => 'w-normal', claim => :f1_claim) \g /dev/null
select * from jobs_test.qd_running('w-drain') \gset f2_
select jobs.nack_v1(id => :'f2_id', worker_id => 'w-drain', claim => :f2_claim,
                    next_state => 'dead') \g /dev/null
select * from jobs_test.qd_running('w-drain') \gset f3_
select jobs.cancel(id => :'f3_id') \g /dev/null
-- a suspended row due now (last: once it is due, a claim would take it)
select * from jobs_test.qd_running('w-normal') \gset s1_
select jobs.nack_v1(id => :'s1_id', worker_id => 'w-normal', claim => :s1_claim,
                    next_state => 'suspended') \g /dev/null
-- delayed rows due in 10 s and in an hour; two ready rows due now
select jobs_test.enqueue(queue => 'qd-a', run_at => '2026-02-01 00:00:10+00') \g /dev/null
select jobs_test.enqueue(queue => 'qd-a', run_at => '2026-02-01 01:00:00+00') \g /dev/null
select jobs_test.enqueue(queue => 'qd-a') \g /dev/null
select jobs_test.enqueue(queue => 'qd-a') \g /dev/null

-- qd-b: one ready row; qd-paused: a ready row and a running one, paused; qd-future: only a
-- delayed row not yet due; qd-done: only a finished row
select jobs_test.enqueue(queue => 'qd-b') \g /dev/null
select jobs_test.enqueue(queue => 'qd-paused') \g /dev/null
select jobs_test.claim_one(queue => 'qd-paused', worker_id => 'w-normal') \g /dev/null
select jobs_test.enqueue(queue => 'qd-paused') \g /dev/null
select jobs.pause_queue(queue => 'qd-paused') \g /dev/null
select jobs_test.enqueue(queue => 'qd-future', run_at => '2026-02-02 00:00:00+00') \g /dev/null
select jobs_test.done_job(queue => 'qd-done') \g /dev/null

select is((select count(*) from jobs.jobs where queue = 'qd-a' and state = 'running'), 4::bigint,
          'fixture: qd-a has four running rows');

set local durajobs.now = '2026-02-01 00:00:05+00';
select results_eq(
  $$select * from jobs.queue_depth(queues => array['qd-a'])$$,
  $$values ('qd-a', 4::bigint, 3::bigint, 2::bigint, 5::bigint)$$,
  'qd-a at 00:00:05: running 4, due 3 (two ready, the due suspended), both draining workers'' '
    || 'rows held back: depth 5');

-- at 00:00:10 the 10-second draining worker expired and the first delayed row fell due
set local durajobs.now = '2026-02-01 00:00:10+00';
select results_eq(
  $$select * from jobs.queue_depth(queues => array['qd-a'])$$,
  $$values ('qd-a', 4::bigint, 4::bigint, 1::bigint, 7::bigint)$$,
  'qd-a at 00:00:10: the delayed row is due, the expired draining worker''s row counts as '
    || 'running: depth 7');
select isnt((select id from jobs.workers where id = 'w-drain-old'), null,
            'fixture: the expired draining worker''s row is still in the table (not swept)');

select results_eq(
  $$select * from jobs.queue_depth() where queue like 'qd-%'$$,
  $$values ('qd-a', 4::bigint, 4::bigint, 1::bigint, 7::bigint),
           ('qd-b', 0::bigint, 1::bigint, 0::bigint, 1::bigint),
           ('qd-future', 0::bigint, 0::bigint, 0::bigint, 0::bigint)$$,
  'queue_depth() answers every queue with live work by queue, the paused one and the one with '
    || 'only finished rows left out, a not-yet-due delayed row not counted');
-- the clock is read once a call, not once a row
set local track_functions = 'all';
select coalesce(pg_stat_get_xact_function_calls('jobs._now()'::regprocedure), 0) as now_calls
  \gset
select count(*) from jobs.queue_depth() \g /dev/null
select cmp_ok(coalesce(pg_stat_get_xact_function_calls('jobs._now()'::regprocedure), 0)
                - :now_calls,
              '<=', 2::bigint, 'queue_depth reads the clock once a call, not once per live row');

select results_eq(
  $$select queue from jobs.queue_depth(queues => array['qd-b', 'qd-none'])$$,
  $$values ('qd-b')$$,
  'the queues argument filters (a queue with no rows answers nothing)');
select results_eq(
  $$select queue from jobs.queue_depth(queues => array['qd-b', 'qd-a'])$$,
  $$values ('qd-a'), ('qd-b')$$,
  'the queues argument answers the named queues ordered by queue');
select is_empty($$select * from jobs.queue_depth(queues => array['qd-paused'])$$,
                'a paused queue is left out even when named');
select is_empty($$select * from jobs.queue_depth(queues => array['qd-done'])$$,
                'a queue with only finished rows answers nothing');
select is_empty($$select * from jobs.queue_depth(queues => '{}')$$,
                'an empty queues array answers nothing');

-- resuming the queue brings it back
select jobs.resume_queue(queue => 'qd-paused') \g /dev/null
select results_eq(
  $$select * from jobs.queue_depth(queues => array['qd-paused'])$$,
  $$values ('qd-paused', 1::bigint, 1::bigint, 0::bigint, 2::bigint)$$,
  'a resumed queue is counted again');

-- a draining worker's row is no longer held back once the worker hands it back
select jobs.worker_forget(worker_id => 'w-drain') \g /dev/null
select results_eq(
  $$select running, due, draining_held, depth from jobs.queue_depth(queues => array['qd-a'])$$,
  $$values (4::bigint, 4::bigint, 0::bigint, 8::bigint)$$,
  'a forgotten worker''s running row counts as running');

-- a live draining worker: its running rows are not demand; a non-draining worker's are
select jobs.worker_announce(worker_id => 'w-drain', host => 'h', pid => 2,
                            queues => array['qd-a'], slots => 4, ttl => '1 hour') \g /dev/null
select results_eq(
  $$select draining_held from jobs.queue_depth(queues => array['qd-a'])$$,
  $$values (0::bigint)$$,
  'a live worker that is not draining holds nothing back');
select jobs.worker_draining(worker_id => 'w-drain') \g /dev/null
select results_eq(
  $$select draining_held, depth from jobs.queue_depth(queues => array['qd-a'])$$,
  $$values (1::bigint, 7::bigint)$$,
  'marking the worker draining holds its running row back again');

-- its rows stop counting as running once they are no longer running
select jobs.ack_v1(id => j.id, worker_id => 'w-drain', claim => j.claims)
  from jobs.jobs j
 where j.queue = 'qd-a' and j.state = 'running' and j.claimed_by = 'w-drain' \g /dev/null
select results_eq(
  $$select running, due, draining_held, depth from jobs.queue_depth(queues => array['qd-a'])$$,
  $$values (3::bigint, 4::bigint, 0::bigint, 7::bigint)$$,
  'once the draining worker acks its row, it is neither running nor held back');

-- ---------------------------------------------------------------------------------------------
-- rules: the limits of jobs.set_limit that count the row, and whether they hold it back now

select jobs.set_limit(tenant_id => 'acme', concurrency => 1) \g /dev/null
select jobs.set_limit(queue => 'q-rules', rate => 5, per => '1 minute') \g /dev/null
select jobs.enqueue(name => 'r', input => '{}', idempotency_key => 'r' || n, queue => 'q-rules',
                    tenant_id => 'acme')
  from generate_series(1, 2) n \g /dev/null
select count(*) from jobs.claim_v1(queues => array['q-rules'], worker_id => 'w-rules',
                                   batch_size => 5) \g /dev/null
select id as rid from jobs.jobs where queue = 'q-rules' and state = 'ready' \gset
select is(jsonb_array_length(jobs.inspect_job(:'rid') -> 'rules'), 2,
          'rules lists each limit set in SQL that counts the row');
select is(jobs.inspect_job(:'rid') -> 'rules' -> 0,
          '{"queue": null, "tenant_id": "acme", "concurrency": 1, "running": 1, "rate": null,
            "per_seconds": null, "started": null, "held_back": true}'::jsonb,
          'the tenant''s rule: 1 of 1 running, so it holds the row back');
select is(jobs.inspect_job(:'rid') -> 'rules' -> 1,
          '{"queue": "q-rules", "tenant_id": null, "concurrency": null, "running": 0, "rate": 5,
            "per_seconds": 60, "started": 1, "held_back": false}'::jsonb,
          'the queue''s rate: 1 of 5 started, so it holds nothing back (false, never NULL)');
select is(jobs.inspect_job((select id from jobs.jobs where queue = 'qd-a' limit 1)) -> 'rules',
          '[]'::jsonb, 'a row no rule counts answers an empty list');

select * from finish();
rollback;
