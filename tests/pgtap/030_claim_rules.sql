-- 030_claim_rules: the claim under the limits of jobs.set_limit (jobs._claim_limited), from one
-- session as a psql-only worker would call it: a queue, a tenant, each tenant apart (a tenant's
-- own rule overriding), a tenant within one queue, or the whole fleet never has more running
-- attempts than its concurrency, nor more starts in a window than its rate; 0 stops the scope; a
-- rule and a declared limit must both have room; held-back rows stay waiting, burn no attempt
-- and keep their place; only a row handed out spends a rate (R63); jobs.limits lists the rules.
-- (Two claimers racing for one group: tests/python/concurrency/test_limit_races.py.)
begin;
\ir fixtures/factory.sql
select plan(69);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- a waiting row known by its idempotency key, due since before any clock this file sets; rows
-- are handed out in the order they are put
create sequence jobs_test.put_order;
create function pg_temp.put(key text, queue text, tenant text default null,
                            name text default 'j', run_at timestamptz default null)
returns uuid
language sql
volatile
as $$
  select (jobs.enqueue(
            name => put.name, input => '{}', idempotency_key => put.key, queue => put.queue,
            tenant_id => put.tenant,
            run_at => coalesce(put.run_at, timestamptz '2025-12-31 00:00:00+00'
                                           + nextval('jobs_test.put_order') * interval '1 second')
          )).id
$$;

-- one claim of `queues`; its rows by key, in hand-out order
create function pg_temp.claim(queues text[], worker text default 'w1', batch integer default 10)
returns table (idempotency_key text, tenant_id text, state text, attempt integer)
language sql
volatile
as $$
  select j.idempotency_key, c.tenant_id, c.state, c.attempt
    from jobs.claim_v1(queues => claim.queues, worker_id => claim.worker,
                       batch_size => claim.batch, visibility => interval '1 day',
                       recover_lapsed => false) c
    join jobs.jobs j on j.id = c.id
   order by c.priority, c.run_at, c.id
$$;

-- the keys one claim hands out, as one sorted array ('{}' for none)
create function pg_temp.keys(queues text[], worker text default 'w1', batch integer default 10)
returns text[]
language sql
volatile
as $$
  select coalesce(array_agg(c.idempotency_key order by c.idempotency_key), '{}')
    from pg_temp.claim(keys.queues, keys.worker, keys.batch) c
$$;

-- the keys of the rows running now in `queues`
create function pg_temp.running(queues text[])
returns text[]
language sql
stable
as $$
  select coalesce(array_agg(j.idempotency_key order by j.idempotency_key), '{}')
    from jobs.jobs j
   where j.queue = any(running.queues)
     and j.state = 'running'
$$;

-- the worker acks the running row `key` with its claim token (NULL when `key` is not running)
create function pg_temp.ack(key text)
returns boolean
language sql
volatile
as $$
  select jobs.ack_v1(id => j.id, worker_id => j.claimed_by, claim => j.claims)
    from jobs.jobs j
   where j.idempotency_key = ack.key
     and j.state = 'running'
$$;

-- the starts a rate counts now, for the rules of `queue` (NULL: the rules of every queue)
create function pg_temp.starts(queue text default null, tenant text default null)
returns bigint
language sql
stable
as $$
  select count(*)
    from jobs.limit_starts s
    join jobs.limit_rules r on r.id = s.rule_id
   where (starts.queue is null or r.queue = starts.queue)
     and (starts.tenant is null or r.tenant_id = starts.tenant)
$$;

-- ---------------------------------------------------------------------------------------------
-- a queue capped at 2: never more than 2 running, across claims and workers

select jobs.set_limit(queue => 'q-cap', concurrency => 2) \g /dev/null
select pg_temp.put('c' || n, 'q-cap', case when n % 2 = 0 then 'acme' end)
  from generate_series(1, 5) n \g /dev/null
select pg_temp.put('free1', 'q-free') \g /dev/null
select is(pg_temp.keys(array['q-cap']), '{c1,c2}',
          'a batch of 10 hands out the first 2 rows of a queue capped at 2');
select is(pg_temp.keys(array['q-cap'], 'w2'), '{}', 'another worker gets none while 2 run');
select is(pg_temp.keys(array['q-cap'], 'w3', 1), '{}', 'nor does a batch of 1');
select is(pg_temp.keys(array['q-cap', 'q-free'], 'w2'), '{free1}',
          'a queue without a rule is claimed beside the capped one');
select jobs.set_limit(queue => 'q-room', concurrency => 5) \g /dev/null
select pg_temp.put('room1', 'q-room', 'acme'), pg_temp.put('room2', 'q-room') \g /dev/null
select is(pg_temp.keys(array['q-room'], 'w2'), '{room1,room2}',
          'a full queue holds back no row of another capped queue, with a tenant or without');
select results_eq(
  $$select idempotency_key, state, attempt from jobs.jobs where queue = 'q-cap' order by 1$$,
  $$values ('c1', 'running', 1), ('c2', 'running', 1), ('c3', 'ready', 0), ('c4', 'ready', 0),
           ('c5', 'ready', 0)$$,
  'the held-back rows stay ready and burn no attempt');
select ok(pg_temp.ack('c1'), 'the worker acks one of the running rows');
select is(pg_temp.keys(array['q-cap'], 'w2'), '{c3}', 'an ack frees one place: the next row runs');
select ok(jobs.nack_v1(id => j.id, worker_id => j.claimed_by, claim => j.claims,
                       delay => interval '1 hour'), 'a running row is nacked')
  from jobs.jobs j where j.idempotency_key = 'c2';
select is(pg_temp.keys(array['q-cap'], 'w3'), '{c4}', 'a nack frees its place: the next in order');
select is(pg_temp.running(array['q-cap']), '{c3,c4}', 'exactly 2 run, never more');

-- ---------------------------------------------------------------------------------------------
-- a tenant capped at 1 across every queue; other tenants of the same queues run

select jobs.set_limit(tenant_id => 't-one', concurrency => 1) \g /dev/null
select pg_temp.put('one-a1', 'q-ta', 't-one'), pg_temp.put('one-b1', 'q-tb', 't-one'),
       pg_temp.put('one-a2', 'q-ta', 't-one'), pg_temp.put('oth-a1', 'q-ta', 't-oth'),
       pg_temp.put('oth-a2', 'q-ta', 't-oth'), pg_temp.put('nil-a1', 'q-ta') \g /dev/null
select is(pg_temp.keys(array['q-ta', 'q-tb']), '{nil-a1,one-a1,oth-a1,oth-a2}',
          'one row of the capped tenant runs; other tenants and rows without one all run');
select is(pg_temp.keys(array['q-tb'], 'w2'), '{}',
          'the tenant''s cap counts across queues: its row of another queue waits');
select ok(pg_temp.ack('one-a1'), 'the tenant''s running row is acked');
select is(pg_temp.keys(array['q-tb', 'q-ta'], 'w2'), '{one-b1}',
          'the place goes to the tenant''s next row in hand-out order, whatever its queue');

-- ---------------------------------------------------------------------------------------------
-- each tenant of a queue capped at 1, one tenant overriding with 3 of its own

select jobs.set_limit(queue => 'q-each', every_tenant => true, concurrency => 1) \g /dev/null
select jobs.set_limit(queue => 'q-each', tenant_id => 'vip', concurrency => 3) \g /dev/null
select pg_temp.put(k, 'q-each', t)
  from (values ('a1', 'a'), ('a2', 'a'), ('b1', 'b'), ('v1', 'vip'), ('v2', 'vip'), ('v3', 'vip'),
               ('v4', 'vip'), ('b2', 'b'), ('n1', null), ('n2', null)) v(k, t) \g /dev/null
select is(pg_temp.keys(array['q-each']), '{a1,b1,n1,n2,v1,v2,v3}',
          'every tenant runs 1, the overriding tenant its own 3, rows without a tenant are free');
select is(pg_temp.keys(array['q-each'], 'w2'), '{}', 'then nothing more');
select ok(pg_temp.ack('b1'), 'tenant b''s row is acked');
select is(pg_temp.keys(array['q-each'], 'w2'), '{b2}', 'only tenant b gains a place');

-- ---------------------------------------------------------------------------------------------
-- a tenant capped within one queue is free in the others

select jobs.set_limit(queue => 'q-in', tenant_id => 't-in', concurrency => 1) \g /dev/null
select pg_temp.put('in1', 'q-in', 't-in'), pg_temp.put('in2', 'q-in', 't-in'),
       pg_temp.put('out1', 'q-out', 't-in'), pg_temp.put('out2', 'q-out', 't-in') \g /dev/null
select is(pg_temp.keys(array['q-in', 'q-out']), '{in1,out1,out2}',
          'the tenant runs 1 in the capped queue and all its rows in another');
select results_eq($$select capped from jobs.jobs where idempotency_key in ('out1', 'out2')$$,
                  $$values (false), (false)$$, 'its rows of the other queue are not capped');

-- ---------------------------------------------------------------------------------------------
-- a rule and a declared limit: a row runs only while both have room

select jobs.declare_job(name => 'dj', queue => 'q-dj', max_attempts => 3, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 2) \g /dev/null
select jobs.set_limit(queue => 'q-dj', tenant_id => 't-dj', concurrency => 1) \g /dev/null
select pg_temp.put(k, 'q-dj', t, name => 'dj')
  from (values ('dj-t1', 't-dj'), ('dj-t2', 't-dj'), ('dj-x1', 't-x'), ('dj-x2', 't-x')) v(k, t)
  \g /dev/null
select is(pg_temp.keys(array['q-dj']), '{dj-t1,dj-x1}',
          'the tenant rule holds dj-t2 though the job has room; the job''s limit holds dj-x2');
select ok(pg_temp.ack('dj-x1'), 'the other tenant''s row is acked');
select is(pg_temp.keys(array['q-dj']), '{dj-x2}',
          'the job''s free place goes past the tenant held by its rule');
select ok(pg_temp.ack('dj-t1'), 'the ruled tenant''s row is acked');
select is(pg_temp.keys(array['q-dj']), '{dj-t2}', 'now both have room for it');

-- ---------------------------------------------------------------------------------------------
-- concurrency 0 stops its scope: nothing runs, nothing burns an attempt

select jobs.set_limit(queue => 'q-stop', concurrency => 0) \g /dev/null
select jobs.set_limit(tenant_id => 't-stop', concurrency => 0) \g /dev/null
select pg_temp.put('st1', 'q-stop'), pg_temp.put('st2', 'q-stop', 'z'),
       pg_temp.put('ts1', 'q-go', 't-stop'), pg_temp.put('go1', 'q-go', 'z') \g /dev/null
select is(pg_temp.keys(array['q-stop', 'q-go']), '{go1}',
          'a queue at 0 and a tenant at 0 hand out nothing; the rest runs');
select results_eq(
  $$select state, attempt from jobs.jobs where idempotency_key in ('st1', 'st2', 'ts1')$$,
  $$values ('ready', 0), ('ready', 0), ('ready', 0)$$, 'the stopped rows wait, attempt 0');

-- each tenant at 0, but one tenant's own rule lets it run: its row is not hidden behind a
-- stopped tenant's backlog, even by a batch of 1
select jobs.set_limit(queue => 'q-zero', every_tenant => true, concurrency => 0) \g /dev/null
select jobs.set_limit(queue => 'q-zero', tenant_id => 'vip0', concurrency => 1) \g /dev/null
select pg_temp.put('z-a' || n, 'q-zero', 'a0') from generate_series(1, 3) n \g /dev/null
select pg_temp.put('z-v1', 'q-zero', 'vip0'), pg_temp.put('z-n1', 'q-zero') \g /dev/null
select is(pg_temp.keys(array['q-zero'], 'w1', 1), '{z-v1}',
          'each tenant at 0: a batch of 1 passes over the stopped tenant''s backlog to the '
          'overriding tenant''s row');
select is(pg_temp.keys(array['q-zero'], 'w1', 1), '{z-n1}',
          'and the next batch of 1 to the row without a tenant');
select count(*) from pg_temp.claim(array['q-zero'], 'w2', 10) \g /dev/null
select is((select count(*) from jobs.jobs
            where tenant_id = 'a0' and state = 'ready' and attempt = 0), 3::bigint,
          'the stopped tenant''s rows never run, whatever the batch');

-- ---------------------------------------------------------------------------------------------
-- a rate: at most 2 starts per minute, counted in the database; the window slides

select jobs.set_limit(queue => 'q-rate', rate => 2, per => '1 minute') \g /dev/null
select pg_temp.put('r' || n, 'q-rate') from generate_series(1, 5) n \g /dev/null
select is(pg_temp.keys(array['q-rate']), '{r1,r2}', 'a rate of 2 per minute starts 2');
select ok(pg_temp.ack('r1') and pg_temp.ack('r2'), 'both are acked: nothing runs');
select is(pg_temp.keys(array['q-rate'], 'w2'), '{}', 'a rate is not a concurrency: still none');
select is(pg_temp.starts('q-rate'), 2::bigint, 'the 2 starts are stamped');
set local durajobs.now = '2026-01-01 00:00:59+00';
select is(pg_temp.keys(array['q-rate']), '{}', '59 seconds later the window still holds them');
set local durajobs.now = '2026-01-01 00:01:00+00';
select is(pg_temp.keys(array['q-rate']), '{r3,r4}', 'one minute later 2 more start');
select results_eq(
  $$select state, attempt from jobs.jobs where idempotency_key = 'r5'$$,
  $$values ('ready', 0)$$, 'a row held back by a rate stays ready, attempt 0');
select is(pg_temp.starts('q-rate'), 2::bigint, 'the starts outside the window are dropped');

-- each tenant its own rate
select jobs.set_limit(queue => 'q-er', every_tenant => true, rate => 1, per => '1 hour')
  \g /dev/null
select pg_temp.put(k, 'q-er', t)
  from (values ('er-a1', 'a'), ('er-a2', 'a'), ('er-b1', 'b'), ('er-b2', 'b')) v(k, t) \g /dev/null
select is(pg_temp.keys(array['q-er']), '{er-a1,er-b1}', 'an every_tenant rate: 1 start per tenant');
select results_eq(
  $$select s.tenant_id from jobs.limit_starts s join jobs.limit_rules r on r.id = s.rule_id
     where r.queue = 'q-er' order by 1$$,
  $$values ('a'), ('b')$$, 'each start is stamped under its tenant');
-- a tenant given a rate of its own after the every_tenant rate is used is held to its own
select jobs.set_limit(queue => 'q-er', tenant_id => 'b', rate => 5, per => '1 hour') \g /dev/null
select is(pg_temp.keys(array['q-er']), '{er-b2}',
          'a tenant''s own rate overrides the every_tenant rate, starts already counted included');

-- R63: a row held back by a concurrency cap spends none of its tenant's rate
select jobs.set_limit(queue => 'q-r63', concurrency => 1) \g /dev/null
select jobs.set_limit(tenant_id => 't63', rate => 2, per => '1 hour') \g /dev/null
select pg_temp.put('r63-' || n, 'q-r63', 't63') from generate_series(1, 4) n \g /dev/null
select is(pg_temp.keys(array['q-r63']), '{r63-1}', 'R63: the queue cap lets 1 run');
select is(pg_temp.keys(array['q-r63'], 'w' || n), '{}',
          'R63: held back by the queue cap (claim ' || n || ')')
  from generate_series(2, 3) n;
select is(pg_temp.starts(tenant => 't63'), 1::bigint,
          'R63: the held-back claims stamped no start of the tenant''s rate');
select ok(pg_temp.ack('r63-1'), 'R63: the running row is acked');
select is(pg_temp.keys(array['q-r63']), '{r63-2}', 'R63: the tenant''s second start is granted');
select ok(pg_temp.ack('r63-2'), 'R63: acked too');
select is(pg_temp.keys(array['q-r63']), '{}', 'R63: the queue has room, the rate of 2 is spent');

-- a row admitted under a rate but not handed out (a batch filled by uncapped rows first)
-- spends nothing
select jobs.set_limit(queue => 'q-mix', tenant_id => 't-mix', rate => 5, per => '1 hour')
  \g /dev/null
select pg_temp.put('mix-free', 'q-mix'), pg_temp.put('mix-t', 'q-mix', 't-mix') \g /dev/null
select is(pg_temp.keys(array['q-mix'], 'w1', 1), '{mix-free}', 'a batch of 1 takes the first row');
select is(pg_temp.starts('q-mix'), 0::bigint, 'the ruled row it did not hand out stamped no start');
select is(pg_temp.keys(array['q-mix'], 'w1', 1), '{mix-t}', 'the next claim hands it out');
select is(pg_temp.starts('q-mix'), 1::bigint, 'and stamps its start');

-- ---------------------------------------------------------------------------------------------
-- a row left uncapped by an enqueue racing the rule is still limited

select jobs.set_limit(queue => 'q-stray', concurrency => 1) \g /dev/null
select pg_temp.put('s' || n, 'q-stray') from generate_series(1, 3) n \g /dev/null
update jobs.jobs set capped = false where queue = 'q-stray';
select is(pg_temp.keys(array['q-stray']), '{s1}', 'uncapped rows a rule covers: only 1 runs');
select is(pg_temp.keys(array['q-stray'], 'w2'), '{}', 'and no more');
select is((select count(*) from jobs.jobs where queue = 'q-stray' and capped), 3::bigint,
          'the claim caps the rows it found uncapped');

-- ---------------------------------------------------------------------------------------------
-- the fleet: at most 3 running across every queue

select count(jobs.cancel(id => j.id))
  from jobs.jobs j where j.state in ('ready', 'delayed', 'running', 'suspended') \g /dev/null
delete from jobs.limit_rules;
select jobs.set_limit(concurrency => 3) \g /dev/null
select pg_temp.put('f1', 'q-f1'), pg_temp.put('f2', 'q-f2', 'acme'), pg_temp.put('f3', 'q-f1'),
       pg_temp.put('f4', 'q-f2'), pg_temp.put('f5', 'q-f3', 'zeta') \g /dev/null
select is(pg_temp.keys(array['q-f1', 'q-f2']), '{f1,f2,f3}', 'a fleet cap of 3 starts 3');
select is(pg_temp.keys(array['q-f3'], 'w2'), '{}', 'no queue has room while the fleet is full');
select ok(pg_temp.ack('f2'), 'one is acked');
select is(pg_temp.keys(array['q-f3', 'q-f2'], 'w2'), '{f4}', 'one more starts, in hand-out order');
select is(pg_temp.running(array['q-f1', 'q-f2', 'q-f3']), '{f1,f3,f4}', 'never more than 3');
select jobs.set_limit(concurrency => 0) \g /dev/null
select ok(pg_temp.ack('f1'), 'a running row is acked under a fleet at 0');
select is(pg_temp.keys(array['q-f1', 'q-f2', 'q-f3']), '{}', 'a fleet at 0 holds everything');

-- ---------------------------------------------------------------------------------------------
-- jobs.limits: one row per rule, one per tenant of an every_tenant rule

select count(jobs.cancel(id => j.id))
  from jobs.jobs j where j.state in ('ready', 'delayed', 'running', 'suspended') \g /dev/null
delete from jobs.limit_rules;
set local durajobs.now = '2026-01-02 00:00:00+00';
select jobs.set_limit(queue => 'q-l', concurrency => 1) \g /dev/null
select jobs.set_limit(tenant_id => 't-l', rate => 1, per => '1 hour') \g /dev/null
select jobs.set_limit(queue => 'q-l2', every_tenant => true, concurrency => 1) \g /dev/null
select jobs.set_limit(queue => 'q-l2', tenant_id => 'b', concurrency => 5) \g /dev/null
select jobs.set_limit(concurrency => 100) \g /dev/null
select jobs.set_limit(queue => 'q-none', every_tenant => true, concurrency => 4) \g /dev/null
select pg_temp.put('x' || n, 'q-l') from generate_series(1, 3) n \g /dev/null
select pg_temp.put('x4', 'q-l', run_at => '2026-01-03 00:00:00+00') \g /dev/null
select pg_temp.put(k, 'q-l2', t)
  from (values ('a1', 'a'), ('a2', 'a'), ('b1', 'b'), ('tl1', 't-l'), ('tl2', 't-l')) v(k, t)
  \g /dev/null
select is(pg_temp.keys(array['q-l'], 'w-l'), '{x1}', 'the fixture: the capped queue runs 1');
select is(pg_temp.keys(array['q-l2'], 'w-m'), '{a1,b1,tl1}', 'the fixture: one per tenant runs');
select results_eq(
  $$select scope, queue, tenant_id, concurrency, rate, per, started, running, waiting,
           held_back, holders
      from jobs.limits() where scope <> 'job'$$,
  $$values
    ('every tenant', 'q-l2', 'a', 1, null::integer, null::interval, null::bigint, 1::bigint,
     1::bigint, 1::bigint, '{w-m}'::text[]),
    ('every tenant', 'q-l2', 't-l', 1, null, null, null, 1, 1, 1, '{w-m}'),
    ('every tenant', 'q-none', null, 4, null, null, null, 0, 0, 0, '{}'),
    ('fleet', null, null, 100, null, null, null, 4, 5, 0, '{w-l,w-m}'),
    ('queue', 'q-l', null, 1, null, null, null, 1, 3, 2, '{w-l}'),
    ('tenant', null, 't-l', null, 1, interval '1 hour', 1, 1, 1, 1, '{w-m}'),
    ('tenant', 'q-l2', 'b', 5, null, null, null, 1, 0, 0, '{w-m}')$$,
  'each rule with what it runs, waits and holds back; an overriding tenant under its own rule');
set local durajobs.now = '2026-01-02 01:00:00+00';
select results_eq(
  $$select started, running, waiting, held_back from jobs.limits()
     where scope = 'tenant' and tenant_id = 't-l'$$,
  $$values (0::bigint, 1::bigint, 1::bigint, 0::bigint)$$,
  'once the window passes its starts no longer count and the rate holds nothing back');
select is_empty($$select * from jobs.limits(name => 'j')$$,
                'limits(name) lists a job''s declared limit only, never a rule');

select * from finish();
rollback;
