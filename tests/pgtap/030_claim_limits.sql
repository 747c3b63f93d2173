-- 030_claim_limits: the claim under declared concurrency limits (jobs._claim_limited), from one
-- session as a psql-only worker would call it: a capped job never has more running attempts
-- than its limit, per key when keyed; held-back rows stay waiting and keep their place; a settle,
-- a cancel or a burial frees a place, a lapsed lease keeps it until the row is re-taken.
-- (Two claimers racing for one group: tests/python/concurrency/test_limit_races.py.)
begin;
\ir fixtures/factory.sql
select plan(56);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- the claim's rows with the keys they were enqueued under (which a claim never changes)
create function pg_temp.claim(queue text, worker text default 'w1', batch integer default 10,
                              recover boolean default false)
returns table (idempotency_key text, concurrency_key text, state text, attempt integer, name text)
language sql
volatile
as $$
  select j.idempotency_key, j.concurrency_key, c.state, c.attempt, c.name
    from jobs.claim_v1(queues => array[claim.queue], worker_id => claim.worker,
                       batch_size => claim.batch, recover_lapsed => claim.recover) c
    join jobs.jobs j on j.id = c.id
$$;

create function pg_temp.running(name text)
returns bigint
language sql
stable
as $$
  select count(*) from jobs.jobs j where j.name = running.name and j.state = 'running'
$$;

-- ---------------------------------------------------------------------------------------------
-- declare_job checks the limit it is given

select throws_ok($$select jobs.declare_job(name => 'x', queue => 'q', max_attempts => 1, priority => 0, tenant_required => false, declared_by => 'd', concurrency => 0)$$,
                 'JQ001', null, 'declare_job: concurrency 0 raises JQ001');
select throws_ok($$select jobs.declare_job(name => 'x', queue => 'q', max_attempts => 1, priority => 0, tenant_required => false, declared_by => 'd', concurrency_keyed => true)$$,
                 'JQ001', null, 'declare_job: a keyed limit without a concurrency raises JQ001');
select throws_ok($$select jobs.declare_job(name => 'x', queue => 'q', max_attempts => 1, priority => 0, tenant_required => false, declared_by => 'd', concurrency_keyed => null)$$,
                 'JQ001', null, 'declare_job: a NULL concurrency_keyed raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- a job-level limit: at most 2 running, whatever the batch asks

select jobs.declare_job(name => 'capped', queue => 'q-cap', max_attempts => 5, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 2) \g /dev/null
-- rows of one statement share run_at: each its own, so hand-out order is the enqueue order
select jobs.enqueue(name => 'capped', input => jsonb_build_object('n', n), idempotency_key => 'c' || n,
                    run_at => jobs._now() - make_interval(secs => 10 - n))
  from generate_series(1, 5) n \g /dev/null
select is((select count(*) from jobs.jobs where name = 'capped' and capped), 5::bigint,
          'the rows of a declared limited job are enqueued capped');
select is((select count(*) from pg_temp.claim('q-cap')), 2::bigint,
          'a batch of 10 hands out 2 rows of a job limited to 2');
select is((select count(*) from pg_temp.claim('q-cap', 'w2')), 0::bigint,
          'another claimer gets none while 2 run');
select is(pg_temp.running('capped'), 2::bigint, 'exactly 2 run');
select results_eq(
  $$select idempotency_key from jobs.jobs where name = 'capped' and state = 'running' order by 1$$,
  $$values ('c1'), ('c2')$$,
  'the first rows in hand-out order run; the others keep their place');
select is((select count(*) from jobs.jobs where name = 'capped' and state = 'ready' and attempt = 0),
          3::bigint, 'the held-back rows stay ready and burn no attempt');

-- an uncapped job in the same queue is not held back
select jobs.enqueue(name => 'free', input => jsonb_build_object('n', n), idempotency_key => 'f' || n,
                    queue => 'q-cap')
  from generate_series(1, 3) n \g /dev/null
select is((select count(*) from pg_temp.claim('q-cap') where name = 'free'), 3::bigint,
          'uncapped rows of the same queue are handed out beside the limit');

-- a settle frees a place; the next row in order takes it
select jobs.ack_v1(id => j.id, worker_id => j.claimed_by, claim => j.claims)
  from jobs.jobs j where j.idempotency_key = 'c1' \g /dev/null
select results_eq($$select idempotency_key from pg_temp.claim('q-cap')$$, $$values ('c3')$$,
                  'an ack frees one place: the next row runs');
select jobs.nack_v1(id => j.id, worker_id => j.claimed_by, claim => j.claims, delay => interval '1 hour')
  from jobs.jobs j where j.idempotency_key = 'c2' \g /dev/null
select results_eq($$select idempotency_key from pg_temp.claim('q-cap')$$, $$values ('c4')$$,
                  'a nack frees its place');
select jobs.cancel(id => j.id) from jobs.jobs j where j.idempotency_key = 'c3' \g /dev/null
select results_eq($$select idempotency_key from pg_temp.claim('q-cap')$$, $$values ('c5')$$,
                  'a cancel frees its place');
select is(pg_temp.running('capped'), 2::bigint, 'never more than 2 ran');

-- ---------------------------------------------------------------------------------------------
-- a lapsed lease keeps its place until its row is re-taken; a burial frees it

select jobs.declare_job(name => 'lapse', queue => 'q-lapse', max_attempts => 2, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 1) \g /dev/null
select jobs.enqueue(name => 'lapse', input => '{}', idempotency_key => k, queue => 'q-lapse',
                    run_at => jobs._now() - make_interval(secs => 10 - n))
  from unnest(array['l1', 'l2']) with ordinality as t(k, n) \g /dev/null
select is((select count(*) from pg_temp.claim('q-lapse')), 1::bigint, 'one of the limited pair runs');
select jobs_test.lapse(j.id) from jobs.jobs j where j.idempotency_key = 'l1' \g /dev/null
select is((select count(*) from pg_temp.claim('q-lapse')), 0::bigint,
          'a lapsed lease still holds its place: its run may be alive');
select results_eq($$select idempotency_key, attempt from pg_temp.claim('q-lapse', recover => true)$$,
                  $$values ('l1', 2)$$,
                  'the lapsed row is re-taken as a new attempt and keeps the place');
select is(pg_temp.running('lapse'), 1::bigint, 'still one runs');
select jobs_test.lapse(j.id) from jobs.jobs j where j.idempotency_key = 'l1' \g /dev/null
select results_eq(
  $$select idempotency_key, state from pg_temp.claim('q-lapse', recover => true) order by 2, 1$$,
  $$values ('l1', 'dead'), ('l2', 'running')$$,
  'a burial on the final attempt frees the place in the same claim');

-- ---------------------------------------------------------------------------------------------
-- a keyed limit: at most 1 running per account

select jobs.declare_job(name => 'per-account', queue => 'q-key', max_attempts => 5, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 1,
                        concurrency_keyed => true) \g /dev/null
select jobs.enqueue(name => 'per-account', input => '{}', idempotency_key => k,
                    concurrency_key => split_part(k, '-', 1),
                    run_at => jobs._now() - make_interval(secs => 10 - n))
  from unnest(array['a-1', 'a-2', 'b-1', 'b-2', 'c-1']) with ordinality as t(k, n) \g /dev/null
update jobs.jobs set queue = 'q-key' where name = 'per-account';
select results_eq(
  $$select concurrency_key, idempotency_key from pg_temp.claim('q-key') order by 1$$,
  $$values ('a', 'a-1'), ('b', 'b-1'), ('c', 'c-1')$$,
  'one row per key runs, the first of each');
select is((select count(*) from pg_temp.claim('q-key')), 0::bigint, 'no key runs twice');
select jobs.ack_v1(id => j.id, worker_id => j.claimed_by, claim => j.claims)
  from jobs.jobs j where j.idempotency_key = 'a-1' \g /dev/null
select results_eq($$select idempotency_key from pg_temp.claim('q-key')$$, $$values ('a-2')$$,
                  'a key''s ack lets its next row run, and only that key''s');

-- a busy key's backlog does not hide another key's row behind it
select jobs.declare_job(name => 'hol', queue => 'q-hol', max_attempts => 5, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 1,
                        concurrency_keyed => true) \g /dev/null
select jobs.enqueue(name => 'hol', input => '{}', idempotency_key => 'busy-' || n, queue => 'q-hol',
                    concurrency_key => 'busy', run_at => jobs._now() - make_interval(secs => 100 - n))
  from generate_series(1, 50) n \g /dev/null
select jobs.enqueue(name => 'hol', input => '{}', idempotency_key => 'other-1', queue => 'q-hol',
                    concurrency_key => 'other') \g /dev/null
select results_eq($$select idempotency_key from pg_temp.claim('q-hol', batch => 1)$$,
                  $$values ('busy-1')$$, 'the busy key''s first row runs');
select results_eq($$select idempotency_key from pg_temp.claim('q-hol', batch => 1)$$,
                  $$values ('other-1')$$,
                  'a batch of 1 passes over 49 rows of the busy key to the other key''s row');

-- ---------------------------------------------------------------------------------------------
-- the key: required by a keyed limit, at most 200 characters, from every enqueue surface

select jobs_test.job_count() as keys_before \gset
select throws_ok($$select jobs.enqueue(name => 'per-account', input => '{}', idempotency_key => 'nokey')$$,
                 'JQ001', 'X_ARGUMENT_INVALID: jobs.enqueue: concurrency_key is required: job per-account limits its concurrency per key',
                 'a keyed job enqueued without a key is refused, naming the job');
select throws_ok($$select jobs.enqueue(name => 'per-account', input => '{}', idempotency_key => 'blank', concurrency_key => ' ')$$,
                 'JQ001', null, 'a blank key is refused');
select throws_ok(format($$select jobs.enqueue(name => 'free', input => '{}', idempotency_key => 'long', concurrency_key => %L)$$, repeat('k', 201)),
                 'JQ001', null, 'a key of 201 characters is refused, even for an unlimited job');
select lives_ok(format($$select jobs.enqueue(name => 'free', input => '{}', idempotency_key => 'long', concurrency_key => %L)$$, repeat('k', 200)),
                'a key of 200 characters is kept');
select throws_ok($$select jobs.enqueue_many(requests => '[{"name": "free", "input": {}, "idempotency_key": "m1"}, {"name": "per-account", "input": {}, "idempotency_key": "m2"}]')$$,
                 'JQ001', 'X_ARGUMENT_INVALID: jobs.enqueue_many: requests[2].concurrency_key is required: job per-account limits its concurrency per key',
                 'enqueue_many names the request without its key');
select throws_ok($$select jobs.outbox_stage(name => 'per-account', input => '{}', idempotency_key => 'o1')$$,
                 'JQ001', null, 'a stage without the key is refused');
select is(jobs_test.job_count(), :'keys_before'::bigint + 1, 'only the valid enqueue stored a row');
select (jobs.enqueue_many(requests => '[{"name": "per-account", "input": {}, "idempotency_key": "m3", "concurrency_key": "z"}]')).id as m3 \gset
select is((select (concurrency_key, capped)::text from jobs.jobs where id = :'m3'), '(z,t)',
          'enqueue_many stores the key and caps the row');
select (jobs.outbox_stage(name => 'per-account', input => '{}', idempotency_key => 'o2', concurrency_key => 'y')).id as o2 \gset
select lives_ok($$select jobs.outbox_relay(relay_id => 'r1')$$, 'the relay publishes the staged row');
select is((select (concurrency_key, capped)::text from jobs.jobs where id = :'o2'), '(y,t)',
          'a published row keeps its key and is capped');

-- ---------------------------------------------------------------------------------------------
-- when_busy 'fail': a run whose key another run holds is refused, settled failed in the claim

select throws_ok($$select jobs.declare_job(name => 'x', queue => 'q', max_attempts => 1, priority => 0, tenant_required => false, declared_by => 'd', concurrency => 1, when_busy => 'fail')$$,
                 'JQ001', null, 'declare_job: when_busy fail without a keyed limit raises JQ001');
select jobs.declare_job(name => 'exclusive', queue => 'q-fail', max_attempts => 3, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 1,
                        concurrency_keyed => true, when_busy => 'fail') \g /dev/null
select (jobs.enqueue(name => 'exclusive', input => '{}', idempotency_key => 'ex-a', queue => 'q-fail',
                     concurrency_key => 'k', run_at => jobs._now() - interval '3 seconds')).run_id as ex_a_run \gset
select jobs.enqueue(name => 'exclusive', input => '{}', idempotency_key => k, queue => 'q-fail',
                    concurrency_key => ck, run_at => jobs._now() - make_interval(secs => 3 - n))
  from (values ('ex-b', 'k', 1), ('ex-c', 'other', 2)) v(k, ck, n) \g /dev/null
select results_eq(
  $$select idempotency_key, state from pg_temp.claim('q-fail') order by 1$$,
  $$values ('ex-a', 'running'), ('ex-b', 'failed'), ('ex-c', 'running')$$,
  'the first run of a busy key runs; the second is refused in the same claim, other keys run');
select results_eq(
  $$select state, attempt, last_error_code, last_error, finished_at is not null, lease_expires_at
      from jobs.jobs where idempotency_key = 'ex-b'$$,
  $$values ('failed', 0, 'X_JOB_KEY_BUSY',
            'X_JOB_KEY_BUSY: key k of job exclusive is held by another run', true, null::timestamptz)$$,
  'a refused run is failed, burns no attempt, and says which key was busy');
select is((select failed from jobs.counter_totals() where name = 'exclusive'), 1::bigint,
          'a refusal counts as failed');
-- its own run's leftover never refuses it: a continuation of the holder's run waits
select jobs.enqueue(name => 'exclusive', input => '{}', idempotency_key => 'ex-a-next', queue => 'q-fail',
                    concurrency_key => 'k', run_id => :'ex_a_run') \g /dev/null
select is((select count(*) from pg_temp.claim('q-fail')), 0::bigint,
          'a run meeting its own run''s holder is neither claimed nor refused');
select is((select state from jobs.jobs where idempotency_key = 'ex-a-next'), 'ready', 'it waits');
select jobs.ack_v1(id => j.id, worker_id => j.claimed_by, claim => j.claims)
  from jobs.jobs j where j.idempotency_key = 'ex-a' \g /dev/null
select results_eq($$select idempotency_key, state from pg_temp.claim('q-fail')$$,
                  $$values ('ex-a-next', 'running')$$, 'and runs once the holder ends');
-- the evidence must be handed out: an admitted run the claim's room ends before holds no key
select jobs.enqueue(name => 'plain', input => '{}', idempotency_key => k, queue => 'q-room',
                    priority => -5)
  from (values ('rm-u1'), ('rm-u2')) v(k) \g /dev/null
select jobs.enqueue(name => 'exclusive', input => '{}', idempotency_key => k, queue => 'q-room',
                    concurrency_key => 'r', run_at => jobs._now() - make_interval(secs => 3 - n))
  from (values ('rm-a', 1), ('rm-b', 2)) v(k, n) \g /dev/null
select results_eq(
  $$select idempotency_key, state from pg_temp.claim('q-room', batch => 2) order by 1$$,
  $$values ('rm-u1', 'running'), ('rm-u2', 'running')$$,
  'a claim of two hands out the uncapped rows, and refuses no run of the key it did not hand out');
select results_eq(
  $$select idempotency_key, state from jobs.jobs where idempotency_key in ('rm-a', 'rm-b')
     order by 1$$,
  $$values ('rm-a', 'ready'), ('rm-b', 'ready')$$, 'both runs of the key still wait');
select results_eq(
  $$select idempotency_key, state from pg_temp.claim('q-room') order by 1$$,
  $$values ('rm-a', 'running'), ('rm-b', 'failed')$$,
  'the next claim hands out the first, and refuses the second on that evidence');

-- a keyed job's rows from before it was keyed have no key: a group of their own, whose being at
-- its limit holds back no keyed run
select jobs.enqueue(name => 'keyless', input => '{}', idempotency_key => 'kl-old', queue => 'q-kl')
  \g /dev/null
select jobs.declare_job(name => 'keyless', queue => 'q-kl', max_attempts => 3, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 1,
                        concurrency_keyed => true) \g /dev/null
select results_eq($$select idempotency_key, state from pg_temp.claim('q-kl')$$,
                  $$values ('kl-old', 'running')$$, 'the keyless row runs, filling its group');
select jobs.enqueue(name => 'keyless', input => '{}', idempotency_key => 'kl-a', queue => 'q-kl',
                    concurrency_key => 'a') \g /dev/null
select results_eq($$select idempotency_key, state from pg_temp.claim('q-kl')$$,
                  $$values ('kl-a', 'running')$$,
                  'a keyed run is not held back by the full keyless group');

-- ---------------------------------------------------------------------------------------------
-- a limit declared, changed or forgotten later applies to the rows already waiting

select jobs.enqueue(name => 'late', input => '{}', idempotency_key => 'late-' || n, queue => 'q-late')
  from generate_series(1, 3) n \g /dev/null
select is((select count(*) from jobs.jobs where name = 'late' and not capped), 3::bigint,
          'an undeclared job''s rows are not capped');
select jobs.declare_job(name => 'late', queue => 'q-late', max_attempts => 5, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 1) \g /dev/null
select is((select count(*) from jobs.jobs where name = 'late' and capped), 3::bigint,
          'declaring a limit caps the rows already waiting');
select is((select count(*) from pg_temp.claim('q-late')), 1::bigint, 'and the claim holds them to it');
select results_eq(
  $$select outcome, differences from jobs.declare_job(name => 'late', queue => 'q-late',
      max_attempts => 5, priority => 0, tenant_required => false, declared_by => 'd2',
      concurrency => 3)$$,
  $$values ('conflict', '{"concurrency": {"stored": 1, "declared": 3}}'::jsonb)$$,
  'a different limit is a conflict like any enforced field');
select results_eq(
  $$select outcome from jobs.declare_job(name => 'late', queue => 'q-late', max_attempts => 5,
      priority => 0, tenant_required => false, declared_by => 'd2', replace => true)$$,
  $$values ('replaced')$$,
  'replacing it with no limit is the operator''s call');
select is((select count(*) from jobs.jobs where name = 'late' and capped), 0::bigint,
          'a limit removed uncaps the live rows, the running one included');
select is((select count(*) from pg_temp.claim('q-late')), 2::bigint, 'the rest run');
select jobs.declare_job(name => 'late2', queue => 'q-late2', max_attempts => 5, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 1) \g /dev/null
select jobs.enqueue(name => 'late2', input => '{}', idempotency_key => 'x' || n, queue => 'q-late2')
  from generate_series(1, 2) n \g /dev/null
select is(jobs.forget_job_type(name => 'late2'), true, 'a limited name is forgotten');
select is((select count(*) from jobs.jobs where name = 'late2' and capped), 0::bigint,
          'forgetting it uncaps its rows');
select is((select count(*) from pg_temp.claim('q-late2')), 2::bigint, 'and they all run');

select * from finish();
rollback;
