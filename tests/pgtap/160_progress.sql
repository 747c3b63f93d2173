-- 160_progress: progress_v1 records how far a running attempt has got, as
-- {done, total, note, at}, fenced like a heartbeat (running + worker id + claim token).
begin;
\ir fixtures/factory.sql
select plan(39);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- the progress document without its time, and its time
create function jobs_test.progress(id uuid)
returns jsonb
language sql
stable
as $$
  select j.progress - 'at' from jobs.jobs j where j.id = progress.id
$$;

create function jobs_test.progress_at(id uuid)
returns timestamptz
language sql
stable
as $$
  select (j.progress ->> 'at')::timestamptz from jobs.jobs j where j.id = progress_at.id
$$;

-- =============================================================================================
-- a running row its caller holds: the progress is written

select jobs_test.enqueue(queue => 'q-prog') as pid \gset
select * from jobs_test.claim_one(queue => 'q-prog', worker_id => 'w1') \gset p_
select is((jobs_test.job(:'pid')).progress, null, 'a fresh running row has no progress');

set local durajobs.now = '2026-01-01 00:00:05+00';
select is(jobs.progress_v1(id => :'pid', worker_id => 'w1', claim => :p_claim, done => 3,
                           total => 10, note => 'three of ten'),
          true, 'progress_v1 on the held running row answers true');
select is(jobs_test.progress(:'pid'), '{"done": 3, "total": 10, "note": "three of ten"}'::jsonb,
          'progress holds done, total and note');
select is(jobs_test.progress_at(:'pid'), '2026-01-01 00:00:05+00'::timestamptz,
          'progress.at is the call''s now');
select is((select array_agg(k order by k) from jsonb_object_keys(
             (jobs_test.job(:'pid')).progress) k),
          array['at', 'done', 'note', 'total'],
          'progress has exactly the keys done, total, note, at');

-- the defaults: total and note NULL, written as JSON nulls; a later call replaces the document
set local durajobs.now = '2026-01-01 00:00:06+00';
select is(jobs.progress_v1(id => :'pid', worker_id => 'w1', claim => :p_claim, done => 0),
          true, 'progress_v1 with only done answers true');
select is(jobs_test.progress(:'pid'), '{"done": 0, "total": null, "note": null}'::jsonb,
          'a later progress replaces the document; total and note default to null');
select is(jobs_test.progress_at(:'pid'), '2026-01-01 00:00:06+00'::timestamptz,
          'a later progress moves at');

-- fractions, a total of 0, a note of exactly 1,000 characters (multi-byte ones too)
select ok(jobs.progress_v1(id => :'pid', worker_id => 'w1', claim => :p_claim, done => 2.5,
                           total => 7.25),
          'progress_v1 takes fractional done and total');
select is(jobs_test.progress(:'pid') -> 'done', '2.5'::jsonb, 'a fractional done is kept');
select is(jobs_test.progress(:'pid') -> 'total', '7.25'::jsonb, 'a fractional total is kept');
select ok(jobs.progress_v1(id => :'pid', worker_id => 'w1', claim => :p_claim, done => 0,
                           total => 0), 'progress_v1 takes total 0');
select ok(jobs.progress_v1(id => :'pid', worker_id => 'w1', claim => :p_claim, done => 1,
                           note => repeat('é', 1000)),
          'progress_v1 takes a note of exactly 1,000 characters (2,000 bytes)');
select is(length(jobs_test.progress(:'pid') ->> 'note'), 1000, 'the 1,000-character note is kept');
select is((jobs_test.job(:'pid')).state, 'running', 'progress leaves the row running');

-- =============================================================================================
-- a call that does not hold the row answers false and writes nothing

set local durajobs.now = '2026-01-01 00:00:10+00';
select jobs.progress_v1(id => :'pid', worker_id => 'w1', claim => :p_claim, done => 4,
                        total => 10, note => 'held') \g /dev/null
select (jobs_test.job(:'pid')).progress::text as held_progress \gset

select is(jobs.progress_v1(id => :'pid', worker_id => 'w1', claim => :p_claim + 1, done => 9),
          false, 'progress_v1 with the wrong claim token answers false');
select is((jobs_test.job(:'pid')).progress::text, :'held_progress',
          'a wrong claim token writes nothing');
select is(jobs.progress_v1(id => :'pid', worker_id => 'w2', claim => :p_claim, done => 9),
          false, 'progress_v1 with the wrong worker answers false');
select is((jobs_test.job(:'pid')).progress::text, :'held_progress',
          'a wrong worker writes nothing');
select is(jobs.progress_v1(id => gen_random_uuid(), worker_id => 'w1', claim => 1, done => 1),
          false, 'progress_v1 of an unknown id answers false');

-- a stale attempt: the lease lapsed and the row was re-taken by the same worker id
select jobs_test.lapse(:'pid') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-prog', worker_id => 'w1') \gset p2_
select is(:p2_claim::bigint, :p_claim::bigint + 1, 'the lapsed row is re-taken under a new token');
select is(jobs.progress_v1(id => :'pid', worker_id => 'w1', claim => :p_claim, done => 9),
          false, 'progress_v1 of the superseded attempt answers false');
select is((jobs_test.job(:'pid')).progress::text, :'held_progress',
          'the superseded attempt writes nothing');

-- a row no longer running: cancelled, then one acked
select jobs.cancel(id => :'pid') \g /dev/null
select is(jobs.progress_v1(id => :'pid', worker_id => 'w1', claim => :p2_claim, done => 9),
          false, 'progress_v1 of a cancelled row answers false');
select is((jobs_test.job(:'pid')).progress::text, :'held_progress',
          'progress of a cancelled row writes nothing');

select jobs_test.enqueue(queue => 'q-prog-done') as dpid \gset
select * from jobs_test.claim_one(queue => 'q-prog-done', worker_id => 'w1') \gset d_
select jobs.ack_v1(id => :'dpid', worker_id => 'w1', claim => :d_claim) \g /dev/null
select is(jobs.progress_v1(id => :'dpid', worker_id => 'w1', claim => :d_claim, done => 1),
          false, 'progress_v1 of a done row answers false');
select is((jobs_test.job(:'dpid')).progress, null, 'progress of a done row writes nothing');

-- =============================================================================================
-- argument errors: X_ARGUMENT_INVALID (JQ001), and nothing written

select jobs_test.enqueue(queue => 'q-prog-err') as epid \gset
select * from jobs_test.claim_one(queue => 'q-prog-err', worker_id => 'w1') \gset e_

select throws_ok(
  format($$select jobs.progress_v1(id => %L, worker_id => 'w1', claim => %s, done => null)$$,
         :'epid', :e_claim),
  'JQ001', 'X_ARGUMENT_INVALID: jobs.progress_v1: done must be a finite number of at least 0',
  'progress_v1 with a NULL done raises JQ001 naming done');
select throws_ok(
  format($$select jobs.progress_v1(id => %L, worker_id => 'w1', claim => %s, done => -1)$$,
         :'epid', :e_claim),
  'JQ001', 'X_ARGUMENT_INVALID: jobs.progress_v1: done must be a finite number of at least 0',
  'progress_v1 with a negative done raises JQ001 naming done');
select throws_ok(
  format($$select jobs.progress_v1(id => %L, worker_id => 'w1', claim => %s, done => 1,
                                   total => -0.5)$$, :'epid', :e_claim),
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.progress_v1: total must be NULL or a finite number of at least 0',
  'progress_v1 with a negative total raises JQ001 naming total');
select throws_ok(
  format($$select jobs.progress_v1(id => %L, worker_id => 'w1', claim => %s, done => 'NaN')$$,
         :'epid', :e_claim),
  'JQ001', 'X_ARGUMENT_INVALID: jobs.progress_v1: done must be a finite number of at least 0',
  'progress_v1 with a NaN done raises JQ001 (NaN compares above every number)');
select throws_ok(
  format($$select jobs.progress_v1(id => %L, worker_id => 'w1', claim => %s,
                                   done => 'Infinity')$$, :'epid', :e_claim),
  'JQ001', 'X_ARGUMENT_INVALID: jobs.progress_v1: done must be a finite number of at least 0',
  'progress_v1 with an infinite done raises JQ001');
select throws_ok(
  format($$select jobs.progress_v1(id => %L, worker_id => 'w1', claim => %s, done => 1,
                                   total => 'NaN')$$, :'epid', :e_claim),
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.progress_v1: total must be NULL or a finite number of at least 0',
  'progress_v1 with a NaN total raises JQ001');
select throws_ok(
  format($$select jobs.progress_v1(id => %L, worker_id => 'w1', claim => %s, done => 1,
                                   note => repeat('x', 1001))$$, :'epid', :e_claim),
  'JQ001', 'X_ARGUMENT_INVALID: jobs.progress_v1: note must be at most 1,000 characters',
  'progress_v1 with a 1,001-character note raises JQ001 naming note');
select throws_ok(
  $$select jobs.progress_v1(id => null, worker_id => 'w1', claim => 1, done => 1)$$,
  'JQ001', null, 'progress_v1 without an id raises JQ001');
select throws_ok(
  format($$select jobs.progress_v1(id => %L, worker_id => null, claim => %s, done => 1)$$,
         :'epid', :e_claim),
  'JQ001', null, 'progress_v1 without a worker_id raises JQ001');
select throws_ok(
  format($$select jobs.progress_v1(id => %L, worker_id => '  ', claim => %s, done => 1)$$,
         :'epid', :e_claim),
  'JQ001', null, 'progress_v1 with a blank worker_id raises JQ001');
select throws_ok(
  format($$select jobs.progress_v1(id => %L, worker_id => 'w1', claim => null, done => 1)$$,
         :'epid'),
  'JQ001', null, 'progress_v1 without a claim token raises JQ001');
select is((jobs_test.job(:'epid')).progress, null, 'a refused progress_v1 writes nothing');

select * from finish();
rollback;
