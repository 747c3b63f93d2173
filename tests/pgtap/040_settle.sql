-- 040_settle: ack_v1, nack_v1, heartbeat_v1, ack_many_v1, nack_many_v1: the fence (state
-- running + worker id + claim token, R39), the cancel, nack's next states (R9, R96), and the
-- batch forms.
begin;
\ir fixtures/factory.sql
select plan(105);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- a call missing its fence raises X_ARGUMENT_INVALID

select throws_ok($$select jobs.ack_v1(id => null, worker_id => 'w1', claim => 1)$$,
                 'JQ001', null, 'ack_v1 without an id raises JQ001');
select throws_ok($$select jobs.ack_v1(id => gen_random_uuid(), worker_id => '', claim => 1)$$,
                 'JQ001', null, 'ack_v1 with an empty worker_id raises JQ001');
select throws_ok($$select jobs.ack_v1(id => gen_random_uuid(), worker_id => 'w1', claim => null)$$,
                 'JQ001', null, 'ack_v1 without a claim token raises JQ001');
select throws_ok($$select jobs.nack_v1(id => gen_random_uuid(), worker_id => null, claim => 1)$$,
                 'JQ001', null, 'nack_v1 without a worker_id raises JQ001');
select throws_ok($$select jobs.heartbeat_v1(id => gen_random_uuid(), worker_id => 'w1', claim => null)$$,
                 'JQ001', null, 'heartbeat_v1 without a claim token raises JQ001');
select is(jobs.ack_v1(id => gen_random_uuid(), worker_id => 'w1', claim => 1), false,
          'ack_v1 of an unknown id answers false, it does not raise');

-- ---------------------------------------------------------------------------------------------
-- R39: a body whose lease lapsed cannot settle the attempt that replaced it, even when the
-- same worker id claimed it again

select jobs_test.enqueue(queue => 'q-r39') as r39_id \gset
select * from jobs_test.claim_one(queue => 'q-r39', worker_id => 'w1') \gset t1_
select jobs_test.lapse(:'r39_id') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-r39', worker_id => 'w1') \gset t2_
select is(:'t1_claim'::bigint, 1::bigint, 'R39: the first claim holds token 1');
select is(:'t2_claim'::bigint, 2::bigint, 'R39: the re-claim by the same worker holds token 2');
select jobs_test.job(:'r39_id') as r39_before \gset

select is(jobs.ack_v1(id => :'r39_id', worker_id => 'w1', claim => :'t1_claim'), false,
          'R39: ack with the stale token answers false');
select results_eq(
  format($$select state, claims, claimed_by, finished_at from jobs.jobs where id = %L$$, :'r39_id'),
  $$values ('running', 2::bigint, 'w1', null::timestamptz)$$,
  'R39: after the stale ack the row is still running under token 2');

select is(jobs.nack_v1(id => :'r39_id', worker_id => 'w1', claim => :'t1_claim', next_state => 'dead',
                       error => 'stale failure'), false,
          'R39: nack with the stale token answers false');
select is(jobs_test.job(:'r39_id')::text, :'r39_before',
          'R39: after the stale nack the row is unchanged');

select is(jobs.heartbeat_v1(id => :'r39_id', worker_id => 'w1', claim => :'t1_claim'), 'lost',
          'R39: heartbeat with the stale token answers lost');
select is(jobs_test.job(:'r39_id')::text, :'r39_before',
          'R39: after the stale heartbeat the lease is unchanged');

select throws_ok(
  format($$select jobs.record_step_v1(id => %L, worker_id => 'w1', claim => %s, name => 's',
                                      status => 'completed')$$, :'r39_id', :'t1_claim'),
  'JQ007', null, 'R39: record_step_v1 with the stale token raises JQ007');

select is(jobs.ack_v1(id => :'r39_id', worker_id => 'w1', claim => :'t2_claim'), true,
          'R39: ack with the current token lands');
select results_eq(
  format($$select state, lease_expires_at, finished_at, updated_at from jobs.jobs where id = %L$$, :'r39_id'),
  $$values ('done', null::timestamptz, '2026-01-01 00:00:00+00'::timestamptz,
            '2026-01-01 00:00:00+00'::timestamptz)$$,
  'ack: the row is done, its lease cleared, finished now');
select is(jobs.ack_v1(id => :'r39_id', worker_id => 'w1', claim => :'t2_claim'), false,
          'a second ack of the same attempt answers false');

-- ack with the wrong worker id answers false and leaves the row running
select jobs_test.enqueue(queue => 'q-wrong-worker') as ww_id \gset
select * from jobs_test.claim_one(queue => 'q-wrong-worker', worker_id => 'w1') \gset ww_
select is(jobs.ack_v1(id => :'ww_id', worker_id => 'w2', claim => :'ww_claim'), false,
          'ack with the wrong worker id answers false');
select is((jobs_test.job(:'ww_id')).state, 'running', 'the row is still running');
select is(jobs.heartbeat_v1(id => :'ww_id', worker_id => 'w2', claim => :'ww_claim'), 'lost',
          'heartbeat with the wrong worker id answers lost');

-- ---------------------------------------------------------------------------------------------
-- a cancel sticks: the cancelled body's ack and nack land nowhere, its heartbeat hears
-- 'cancelled'

select jobs_test.enqueue(queue => 'q-cancel') as cx_id \gset
select * from jobs_test.claim_one(queue => 'q-cancel', worker_id => 'w1') \gset cx_
select jobs_test.cancel(:'cx_id') \g /dev/null
select is(jobs.ack_v1(id => :'cx_id', worker_id => 'w1', claim => :'cx_claim'), false,
          'ack after a cancel answers false');
select is((jobs_test.job(:'cx_id')).state, 'cancelled', 'the row stays cancelled after the ack');
select is(jobs.nack_v1(id => :'cx_id', worker_id => 'w1', claim => :'cx_claim', next_state => 'ready'), false,
          'nack after a cancel answers false');
select is((jobs_test.job(:'cx_id')).state, 'cancelled', 'the row stays cancelled after the nack');
select is(jobs.heartbeat_v1(id => :'cx_id', worker_id => 'w1', claim => :'cx_claim'), 'cancelled',
          'heartbeat after a cancel answers cancelled');
select is(jobs.heartbeat_v1(id => :'cx_id', worker_id => 'w1', claim => :'cx_claim' - 1), 'lost',
          'heartbeat of an older attempt of a cancelled row answers lost');

-- ---------------------------------------------------------------------------------------------
-- heartbeat: 'ok' extends the lease from now

select jobs_test.enqueue(queue => 'q-hb') as hb_id \gset
select * from jobs_test.claim_one(queue => 'q-hb', worker_id => 'w1', visibility => '30 seconds') \gset hb_
set local durajobs.now = '2026-01-01 00:00:20+00';
select is(jobs.heartbeat_v1(id => :'hb_id', worker_id => 'w1', claim => :'hb_claim', visibility => '60 seconds'),
          'ok', 'heartbeat of the current attempt answers ok');
select is((jobs_test.job(:'hb_id')).lease_expires_at, '2026-01-01 00:01:20+00'::timestamptz,
          'heartbeat extends lease_expires_at to now + visibility');
select is(jobs.heartbeat_v1(id => :'hb_id', worker_id => 'w1', claim => :'hb_claim'), 'ok',
          'heartbeat with the default visibility answers ok');
select is((jobs_test.job(:'hb_id')).lease_expires_at, '2026-01-01 00:00:50+00'::timestamptz,
          'the default visibility is 30 seconds');
select throws_ok(
  format($$select jobs.heartbeat_v1(id => %L, worker_id => 'w1', claim => %s, visibility => '0')$$,
         :'hb_id', :'hb_claim'),
  'JQ001', null, 'heartbeat with visibility 0 raises JQ001');
-- a heartbeat keeps a row from being re-taken
set local durajobs.now = '2026-01-01 00:00:40+00';
select is_empty($$select * from jobs.claim_v1(queues => array['q-hb'], worker_id => 'w2')$$,
                'a row whose lease the heartbeat extended is not re-taken');
select ok(jobs.ack_v1(id => :'hb_id', worker_id => 'w1', claim => :'hb_claim'), 'the heartbeating attempt acks');
select is(jobs.heartbeat_v1(id => :'hb_id', worker_id => 'w1', claim => :'hb_claim'), 'lost',
          'heartbeat of a done row answers lost');

-- ---------------------------------------------------------------------------------------------
-- nack: next_state decides where the row goes

set local durajobs.now = '2026-01-01 00:00:00+00';

-- 'ready' with a delay: a retry, due now + delay, the attempt counted, the error written
select jobs_test.enqueue(queue => 'q-nack-ready') as nr_id \gset
select * from jobs_test.claim_one(queue => 'q-nack-ready') \gset nr_
select ok(jobs.nack_v1(id => :'nr_id', worker_id => 'w1', claim => :'nr_claim', next_state => 'ready',
                       delay => '5 minutes', error => 'boom', error_code => 'E_BOOM', error_stack => 'at line 1'),
          'nack to ready lands');
select results_eq(
  format($$select state, run_at, attempt, lease_expires_at, finished_at, last_error, last_error_code,
                  last_error_stack
             from jobs.jobs where id = %L$$, :'nr_id'),
  $$values ('ready', '2026-01-01 00:05:00+00'::timestamptz, 1, null::timestamptz, null::timestamptz,
            'boom', 'E_BOOM', 'at line 1')$$,
  'nack ready: state ready, run_at now + delay, attempt kept, lease cleared, error written');

-- the defaults: next_state ready, no delay
select jobs_test.enqueue(queue => 'q-nack-default') as nd_id \gset
select * from jobs_test.claim_one(queue => 'q-nack-default') \gset nd_
select ok(jobs.nack_v1(id => :'nd_id', worker_id => 'w1', claim => :'nd_claim'), 'nack with defaults lands');
select results_eq(
  format($$select state, run_at, attempt from jobs.jobs where id = %L$$, :'nd_id'),
  $$values ('ready', '2026-01-01 00:00:00+00'::timestamptz, 1)$$,
  'nack defaults: ready, due now, attempt counted');

-- 'suspended': a park, due after the delay
select jobs_test.enqueue(queue => 'q-nack-susp') as ns_id \gset
select * from jobs_test.claim_one(queue => 'q-nack-susp') \gset ns_
select ok(jobs.nack_v1(id => :'ns_id', worker_id => 'w1', claim => :'ns_claim', next_state => 'suspended',
                       delay => '1 hour'), 'nack to suspended lands');
select results_eq(
  format($$select state, run_at, finished_at, lease_expires_at from jobs.jobs where id = %L$$, :'ns_id'),
  $$values ('suspended', '2026-01-01 01:00:00+00'::timestamptz, null::timestamptz, null::timestamptz)$$,
  'nack suspended: state suspended, due after the delay, not finished');

-- 'dead': dead-lettered, finished now, run_at left alone
select jobs_test.enqueue(queue => 'q-nack-dead') as nx_id \gset
select * from jobs_test.claim_one(queue => 'q-nack-dead') \gset nx_
select ok(jobs.nack_v1(id => :'nx_id', worker_id => 'w1', claim => :'nx_claim', next_state => 'dead',
                       delay => '1 hour', error => 'fatal'), 'nack to dead lands');
select results_eq(
  format($$select state, finished_at, run_at, last_error from jobs.jobs where id = %L$$, :'nx_id'),
  $$values ('dead', '2026-01-01 00:00:00+00'::timestamptz, '2026-01-01 00:00:00+00'::timestamptz, 'fatal')$$,
  'nack dead: state dead, finished now, run_at unchanged');

-- 'failed': terminal, finished now
select jobs_test.enqueue(queue => 'q-nack-failed') as nf_id \gset
select * from jobs_test.claim_one(queue => 'q-nack-failed') \gset nf_
select ok(jobs.nack_v1(id => :'nf_id', worker_id => 'w1', claim => :'nf_claim', next_state => 'failed'),
          'nack to failed lands');
select results_eq(
  format($$select state, finished_at from jobs.jobs where id = %L$$, :'nf_id'),
  $$values ('failed', '2026-01-01 00:00:00+00'::timestamptz)$$,
  'nack failed: state failed, finished now');

-- counts_as_attempt false gives the claim's attempt back
select jobs_test.enqueue(queue => 'q-nack-uncounted') as nu_id \gset
select * from jobs_test.claim_one(queue => 'q-nack-uncounted') \gset nu_
select is(:'nu_attempt'::integer, 1, 'the claim made it attempt 1');
select ok(jobs.nack_v1(id => :'nu_id', worker_id => 'w1', claim => :'nu_claim', counts_as_attempt => false),
          'an uncounted nack lands');
select is((jobs_test.job(:'nu_id')).attempt, 0, 'an uncounted nack gives the attempt back (attempt - 1)');
select is((jobs_test.job(:'nu_id')).claims, :'nu_claim'::bigint, 'an uncounted nack keeps the claim token');

-- R96: the attempt given back never goes below zero
select * from jobs_test.claim_one(queue => 'q-nack-uncounted') \gset nu2_
update jobs.jobs set attempt = 0 where id = :'nu_id';
select ok(jobs.nack_v1(id => :'nu_id', worker_id => 'w1', claim => :'nu2_claim', counts_as_attempt => false),
          'R96: an uncounted nack of an attempt-0 row lands');
select is((jobs_test.job(:'nu_id')).attempt, 0, 'R96: the attempt is floored at 0');

-- R9: an error is written only when given: a shed (ready, uncounted, no error) leaves the
-- last error as it was
select jobs_test.enqueue(queue => 'q-shed') as sh_id \gset
select * from jobs_test.claim_one(queue => 'q-shed') \gset sh1_
select jobs.nack_v1(id => :'sh_id', worker_id => 'w1', claim => :'sh1_claim', error => 'first failure',
                    error_code => 'E_FIRST', error_stack => 'stack-1') \g /dev/null
select * from jobs_test.claim_one(queue => 'q-shed') \gset sh2_
select ok(jobs.nack_v1(id => :'sh_id', worker_id => 'w1', claim => :'sh2_claim', next_state => 'ready',
                       delay => '2 seconds', counts_as_attempt => false),
          'R9: the shed lands');
select results_eq(
  format($$select state, attempt, run_at, last_error, last_error_code, last_error_stack
             from jobs.jobs where id = %L$$, :'sh_id'),
  $$values ('ready', 1, '2026-01-01 00:00:02+00'::timestamptz, 'first failure', 'E_FIRST', 'stack-1')$$,
  'R9: a shed leaves last_error, its code and stack unchanged, and gives the attempt back');

-- invalid arguments raise X_ARGUMENT_INVALID and change nothing
select jobs_test.enqueue(queue => 'q-nack-bad') as nb_id \gset
select * from jobs_test.claim_one(queue => 'q-nack-bad') \gset nb_
select throws_ok(
  format($$select jobs.nack_v1(id => %L, worker_id => 'w1', claim => %s, next_state => 'bogus')$$, :'nb_id', :'nb_claim'),
  'JQ001', null, 'nack next_state ''bogus'' raises JQ001');
select throws_ok(
  format($$select jobs.nack_v1(id => %L, worker_id => 'w1', claim => %s, next_state => 'running')$$, :'nb_id', :'nb_claim'),
  'JQ001', null, 'nack next_state ''running'' raises JQ001');
select throws_ok(
  format($$select jobs.nack_v1(id => %L, worker_id => 'w1', claim => %s, next_state => 'done')$$, :'nb_id', :'nb_claim'),
  'JQ001', null, 'nack next_state ''done'' raises JQ001 (done is ack''s)');
select throws_ok(
  format($$select jobs.nack_v1(id => %L, worker_id => 'w1', claim => %s, next_state => null)$$, :'nb_id', :'nb_claim'),
  'JQ001', null, 'nack next_state NULL raises JQ001');
select throws_ok(
  format($$select jobs.nack_v1(id => %L, worker_id => 'w1', claim => %s, delay => '-1 second')$$, :'nb_id', :'nb_claim'),
  'JQ001', null, 'nack with a negative delay raises JQ001');
select throws_ok(
  format($$select jobs.nack_v1(id => %L, worker_id => 'w1', claim => %s, delay => null)$$, :'nb_id', :'nb_claim'),
  'JQ001', null, 'nack with a NULL delay raises JQ001');
select throws_ok(
  format($$select jobs.nack_v1(id => %L, worker_id => 'w1', claim => %s, counts_as_attempt => null)$$, :'nb_id', :'nb_claim'),
  'JQ001', null, 'nack with NULL counts_as_attempt raises JQ001');
select is((jobs_test.job(:'nb_id')).state, 'running', 'the refused nacks left the row running');

-- ---------------------------------------------------------------------------------------------
-- ack_many_v1: (id, landed) per id, in input order; a stale token lands false

select count(jobs_test.enqueue(queue => 'q-ack-many')) from generate_series(1, 3) \g /dev/null
create temporary table am on commit drop as
  select row_number() over () as n, c.id, c.claim
    from jobs.claim_v1(queues => array['q-ack-many'], worker_id => 'w-many', batch_size => 3) c;
select is((select count(*) from am), 3::bigint, 'three rows are claimed for ack_many');
-- input order is 3, 2, 1, and the second (row 2) carries a stale token
select results_eq(
  $$select r.id, r.landed
      from jobs.ack_many_v1(
             worker_id => 'w-many',
             ids => array(select id from am order by n desc),
             claims => array(select case when n = 2 then claim - 1 else claim end from am order by n desc)) r$$,
  $$select id, n <> 2 from am order by n desc$$,
  'ack_many_v1 answers (id, landed) in input order, false for the stale token');
select results_eq(
  $$select j.state from am join jobs.jobs j on j.id = am.id order by am.n$$,
  $$values ('done'), ('running'), ('done')$$,
  'ack_many_v1 settles the fenced rows and leaves the stale one running');

-- the fence pairs each id with its own claim: A re-claimed (claims 2) and B (claims 1), acked
-- with the claims swapped, each id naming a claim that the other row holds, lands neither
select count(jobs_test.enqueue(queue => 'q-ack-cross')) from generate_series(1, 2) \g /dev/null
create temporary table ax on commit drop as
  select row_number() over (order by c.id) as n, c.id, c.claim
    from jobs.claim_v1(queues => array['q-ack-cross'], worker_id => 'w-cross', batch_size => 2) c;
select jobs_test.lapse(id) from ax where n = 1 \g /dev/null
select count(*) from jobs.claim_v1(queues => array['q-ack-cross'], worker_id => 'w-cross',
                                   batch_size => 2) \g /dev/null
update ax set claim = j.claims from jobs.jobs_live j where j.id = ax.id;
select results_eq(
  $$select j.claims, j.state from ax join jobs.jobs_live j on j.id = ax.id order by ax.n$$,
  $$values (2::bigint, 'running'), (1::bigint, 'running')$$,
  'the first row is claimed again by the same worker, the second still under its first claim');
select results_eq(
  $$select r.landed
      from jobs.ack_many_v1(worker_id => 'w-cross',
                            ids => array(select id from ax order by n),
                            claims => array(select claim from ax order by n desc)) r$$,
  $$values (false), (false)$$,
  'ack_many_v1 with each id given the other''s claim lands neither');
select results_eq(
  $$select r.landed
      from jobs.ack_many_v1(worker_id => 'w-cross',
                            ids => array(select id from ax where n = 1 union all
                                         select id from ax where n = 1),
                            claims => array[1, 2]::bigint[]) r$$,
  $$values (false), (true)$$,
  'an id named twice lands under its current claim only');
select results_eq(
  $$select j.state from ax join jobs.jobs j on j.id = ax.id order by ax.n$$,
  $$values ('done'), ('running')$$,
  'the swapped ack left both rows running; the second ack settled the first');
select results_eq(
  $$select landed from jobs.ack_many_v1(worker_id => 'w-other',
                                        ids => array(select id from am where n = 2),
                                        claims => array(select claim from am where n = 2))$$,
  $$values (false)$$,
  'ack_many_v1 with the wrong worker answers false');
select throws_ok(
  $$select * from jobs.ack_many_v1(worker_id => 'w-many', ids => array[gen_random_uuid(), gen_random_uuid()],
                                   claims => array[1]::bigint[])$$,
  'JQ001', null, 'ack_many_v1 with arrays of different lengths raises JQ001');
select throws_ok(
  $$select * from jobs.ack_many_v1(worker_id => 'w-many', ids => null, claims => array[1]::bigint[])$$,
  'JQ001', null, 'ack_many_v1 with NULL ids raises JQ001');
select throws_ok(
  $$select * from jobs.ack_many_v1(worker_id => 'w-many', ids => array[null]::uuid[], claims => array[1]::bigint[])$$,
  'JQ001', null, 'ack_many_v1 with a NULL id raises JQ001');
select throws_ok(
  $$select * from jobs.ack_many_v1(worker_id => '', ids => array[gen_random_uuid()], claims => array[1]::bigint[])$$,
  'JQ001', null, 'ack_many_v1 with an empty worker_id raises JQ001');
select is_empty(
  $$select * from jobs.ack_many_v1(worker_id => 'w-many', ids => '{}', claims => '{}')$$,
  'ack_many_v1 of empty arrays answers no rows');

-- ---------------------------------------------------------------------------------------------
-- nack_many_v1: (id, landed) per element, in input order; delay as '5 seconds' or 'PT5S'

select count(jobs_test.enqueue(queue => 'q-nack-many')) from generate_series(1, 3) \g /dev/null
create temporary table nm on commit drop as
  select row_number() over () as n, c.id, c.claim
    from jobs.claim_v1(queues => array['q-nack-many'], worker_id => 'w-many', batch_size => 3) c;
select results_eq(
  $$select r.id, r.landed
      from jobs.nack_many_v1(worker_id => 'w-many', nacks => (
        select jsonb_agg(e order by ord) from (
          select 1 as ord, jsonb_build_object('id', id, 'claim', claim, 'delay', '5 seconds',
                                              'error', 'e1', 'error_code', 'C1') as e
            from nm where n = 3
          union all
          select 2, jsonb_build_object('id', id, 'claim', claim - 1) from nm where n = 1
          union all
          select 3, jsonb_build_object('id', id, 'claim', claim, 'delay', 'PT5S', 'next_state', 'suspended',
                                       'counts_as_attempt', false)
            from nm where n = 2) s)) r$$,
  $$select id, landed from (
      select 1 as ord, id, true as landed from nm where n = 3
      union all select 2, id, false from nm where n = 1
      union all select 3, id, true from nm where n = 2) s order by ord$$,
  'nack_many_v1 answers (id, landed) in input order, false for the stale token');
select results_eq(
  $$select j.state, j.run_at, j.attempt, j.last_error, j.last_error_code
      from nm join jobs.jobs j on j.id = nm.id order by nm.n$$,
  $$values ('running', '2026-01-01 00:00:00+00'::timestamptz, 1, null::text, null::text),
           ('suspended', '2026-01-01 00:00:05+00'::timestamptz, 0, null, null),
           ('ready', '2026-01-01 00:00:05+00'::timestamptz, 1, 'e1', 'C1')$$,
  'nack_many_v1 applies each element: ''5 seconds'' and ''PT5S'' both delay 5 s; the stale one is untouched');
select throws_ok(
  $$select * from jobs.nack_many_v1(worker_id => 'w-many', nacks => '{"id": 1}')$$,
  'JQ001', null, 'nack_many_v1 of a non-array raises JQ001');
select throws_ok(
  $$select * from jobs.nack_many_v1(worker_id => 'w-many', nacks => null)$$,
  'JQ001', null, 'nack_many_v1 of NULL raises JQ001');
select throws_ok(
  $$select * from jobs.nack_many_v1(worker_id => 'w-many', nacks => '[1]')$$,
  'JQ001', null, 'nack_many_v1 with an element that is not an object raises JQ001');
select throws_ok(
  format($$select * from jobs.nack_many_v1(worker_id => 'w-many',
           nacks => '[{"id": "%s", "claim": 1, "nextState": "dead"}]')$$, gen_random_uuid()),
  'JQ001', null, 'nack_many_v1 with an unknown key (nextState) raises JQ001');
select throws_ok(
  format($$select * from jobs.nack_many_v1(worker_id => 'w-many',
           nacks => '[{"id": "%s", "claim": 1, "next_state": "bogus"}]')$$, gen_random_uuid()),
  'JQ001', null, 'nack_many_v1 with an invalid next_state raises JQ001');
select throws_ok(
  format($$select * from jobs.nack_many_v1(worker_id => 'w-many',
           nacks => '[{"id": "%s"}]')$$, gen_random_uuid()),
  'JQ001', null, 'nack_many_v1 without a claim raises JQ001');
select throws_ok(
  format($$select * from jobs.nack_many_v1(worker_id => 'w-many',
           nacks => '[{"id": "%s", "claim": 1, "delay": "-5 seconds"}]')$$, gen_random_uuid()),
  'JQ001', null, 'nack_many_v1 with a negative delay raises JQ001');
-- the contract: nack_many_v1 raises X_ARGUMENT_INVALID for a malformed element, as
-- enqueue_many does for a value of the wrong type
select throws_ok(
  format($$select * from jobs.nack_many_v1(worker_id => 'w-many',
           nacks => '[{"id": "%s", "claim": 1, "delay": "soon"}]')$$, gen_random_uuid()),
  'JQ001', null, 'nack_many_v1 with a delay that is not an interval raises JQ001');
select throws_ok(
  $$select * from jobs.nack_many_v1(worker_id => 'w-many', nacks => '[{"id": "not-a-uuid", "claim": 1}]')$$,
  'JQ001', null, 'nack_many_v1 with an id that is not a uuid raises JQ001');
-- a refused batch settles nothing, even the elements before the bad one
select throws_ok(
  $$select * from jobs.nack_many_v1(worker_id => 'w-many', nacks => (
      select jsonb_build_array(jsonb_build_object('id', id, 'claim', claim, 'next_state', 'dead'),
                               jsonb_build_object('id', id, 'claim', claim, 'next_state', 'bogus'))
        from nm where n = 1))$$,
  'JQ001', null, 'nack_many_v1 with a bad second element raises JQ001');
select is((select j.state from nm join jobs.jobs j on j.id = nm.id where nm.n = 1), 'running',
          'nack_many_v1: the element before the bad one was not settled');
select is_empty($$select * from jobs.nack_many_v1(worker_id => 'w-many', nacks => '[]')$$,
                'nack_many_v1 of an empty array answers no rows');


-- ---------------------------------------------------------------------------------------------
-- the budget holds in SQL: a counted retry of the final attempt dead-letters instead of running
-- past max_attempts; an uncounted one (a shed) on the final attempt stays ready
set local durajobs.now = '2026-03-01 00:00:00+00';
select jobs_test.enqueue(name => 'budget', queue => 'q-budget', max_attempts => 1) as budget \gset
select (jobs_test.claim_one(queue => 'q-budget', worker_id => 'w-b')).claim as budget_claim \gset
select is(jobs.nack_v1(id => :'budget', worker_id => 'w-b', claim => :budget_claim,
                       error => 'boom'), true, 'a counted retry on the final attempt lands');
select is((jobs_test.job(:'budget')).state, 'dead', '... and dead-letters: the budget is spent');
select isnt((jobs_test.job(:'budget')).finished_at, null, '... with finished_at stamped');
select jobs_test.enqueue(name => 'budget-shed', queue => 'q-budget-shed', max_attempts => 1) as budget_shed \gset
select (jobs_test.claim_one(queue => 'q-budget-shed', worker_id => 'w-b')).claim as shed_claim \gset
select jobs.nack_v1(id => :'budget_shed', worker_id => 'w-b', claim => :shed_claim,
                    counts_as_attempt => false) \g /dev/null
select is((jobs_test.job(:'budget_shed')).state, 'ready', 'a shed on the final attempt stays ready');
select throws_ok(
  format($$select jobs.nack_v1(id => %L, worker_id => 'w-b', claim => 1, delay => interval '1000 years')$$,
         :'budget_shed'),
  'JQ001', null, 'a delay past 100 years raises JQ001, not an overflow');
select throws_ok(
  format($$select jobs.ack_v1(id => %L, worker_id => '  ', claim => 1)$$, :'budget_shed'),
  'JQ001', null, 'a blank worker_id raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- heartbeat_many_v1: one statement for a worker's rows, each fenced on its own claim, answered
-- in input order: ok (renewed from now), cancelled, lost

set local durajobs.now = '2026-01-01 00:10:00+00';
select jobs_test.enqueue(queue => 'q-hbm') as hm1_id \gset
select jobs_test.enqueue(queue => 'q-hbm') as hm2_id \gset
select jobs_test.enqueue(queue => 'q-hbm') as hm3_id \gset
select jobs_test.enqueue(queue => 'q-hbm') as hm4_id \gset
select * from jobs_test.claim_one(queue => 'q-hbm', worker_id => 'w1') \gset hm1c_
select * from jobs_test.claim_one(queue => 'q-hbm', worker_id => 'w1') \gset hm2c_
select * from jobs_test.claim_one(queue => 'q-hbm', worker_id => 'w1') \gset hm3c_
select * from jobs_test.claim_one(queue => 'q-hbm', worker_id => 'w2') \gset hm4c_
select jobs_test.cancel(:'hm2c_id') \g /dev/null
set local durajobs.now = '2026-01-01 00:10:20+00';
select results_eq(
  format($$select id, answer
             from jobs.heartbeat_many_v1(worker_id => 'w1', ids => array[%L, %L, %L, %L]::uuid[],
                                         claims => array[%s, %s, %s, %s], visibility => '60 seconds')$$,
         :'hm3c_id', :'hm2c_id', :'hm1c_id', :'hm4c_id',
         :'hm3c_claim', :'hm2c_claim', :'hm1c_claim' - 1, :'hm4c_claim'),
  format($$values (%L::uuid, 'ok'), (%L::uuid, 'cancelled'), (%L::uuid, 'lost'), (%L::uuid, 'lost')$$,
         :'hm3c_id', :'hm2c_id', :'hm1c_id', :'hm4c_id'),
  'heartbeat_many_v1 answers each row in input order: ok, cancelled, a stale claim lost, another worker''s row lost');
select is((jobs_test.job(:'hm3c_id')).lease_expires_at, '2026-01-01 00:11:20+00'::timestamptz,
          'the renewed row''s lease runs from now + visibility');
select isnt((jobs_test.job(:'hm1c_id')).lease_expires_at, '2026-01-01 00:11:20+00'::timestamptz,
            'a row answered lost keeps its lease');
select isnt((jobs_test.job(:'hm4c_id')).lease_expires_at, '2026-01-01 00:11:20+00'::timestamptz,
            'another worker''s row is not renewed');
select is((jobs_test.job(:'hm2c_id')).state, 'cancelled', 'the cancelled row stays cancelled');
select is_empty($$select * from jobs.heartbeat_many_v1(worker_id => 'w1', ids => '{}', claims => '{}')$$,
                'an empty batch answers nothing');
select throws_ok($$select * from jobs.heartbeat_many_v1(worker_id => 'w1', ids => array[gen_random_uuid()], claims => '{}')$$,
                 'JQ001', null, 'arrays of different lengths raise JQ001');
select throws_ok($$select * from jobs.heartbeat_many_v1(worker_id => ' ', ids => '{}', claims => '{}')$$,
                 'JQ001', null, 'a blank worker_id raises JQ001');
select throws_ok($$select * from jobs.heartbeat_many_v1(worker_id => 'w1', ids => '{}', claims => '{}', visibility => '0')$$,
                 'JQ001', null, 'visibility 0 raises JQ001');

-- two attempts of one row in one batch (the first cancelled, the row requeued and claimed
-- again by the same worker): each answered on its own claim, the stale one lost
set local durajobs.now = '2030-01-01 00:00:00+00';
select id as twice from jobs.enqueue('twice', '{}', 'twice-1', queue => 'q-twice') \gset
select jobs.claim_v1(queues => array['q-twice'], worker_id => 'w-twice', visibility => '1 second')
  \g /dev/null
set local durajobs.now = '2030-01-01 00:10:00+00';
select is((select claim from jobs.claim_v1(queues => array['q-twice'], worker_id => 'w-twice',
                                            recover_lapsed => true)),
          2::bigint, 'the lapsed row is taken again by the same worker, under claim 2');
select results_eq(
  format($$select answer from jobs.heartbeat_many_v1(worker_id => 'w-twice',
                                                     ids => array[%L, %L]::uuid[],
                                                     claims => array[1, 2])$$, :'twice', :'twice'),
  $$values ('lost'::text), ('ok')$$,
  'the earlier attempt is lost, the current one renewed: not both ok');

select * from finish();
rollback;
