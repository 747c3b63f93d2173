-- 140_workers: the worker registry. worker_announce inserts or re-registers a worker (keeping
-- started_at) and sweeps expired rows; worker_heartbeat extends a row and records what it holds
-- (the first 100 ids, the true count); worker_draining marks a worker once; worker_forget
-- deletes it; workers_live lists the rows not yet expired. A row is live until
-- expires_at = heartbeat + ttl.
begin;
\ir fixtures/factory.sql
select plan(69);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- the registry row of one worker, as text, for before/after comparisons
create function jobs_test.worker(id text)
returns text
language sql
stable
as $$
  select w::text from jobs.workers w where w.id = worker.id
$$;

-- the ids workers_live answers, in its order
create function jobs_test.live_ids()
returns text[]
language sql
stable
as $$
  select coalesce(array_agg(l.id order by l.ordinality), '{}')
    from jobs.workers_live() with ordinality l
$$;

-- =============================================================================================
-- worker_announce: a first announce inserts the row, live for ttl (30 s by default)

select lives_ok(
  $$select jobs.worker_announce(worker_id => 'w1', host => 'host-a', pid => 101,
                                queues => array['q1', 'q2'], slots => 4)$$,
  'worker_announce of a new worker lives');
select results_eq(
  $$select host, pid, queues, slots, in_flight, in_flight_count, started_at, heartbeat_at,
           expires_at, draining_at
      from jobs.workers where id = 'w1'$$,
  $$values ('host-a', 101, array['q1', 'q2'], 4, '{}'::uuid[], 0,
            '2026-01-01 00:00:00+00'::timestamptz, '2026-01-01 00:00:00+00'::timestamptz,
            '2026-01-01 00:00:30+00'::timestamptz, null::timestamptz)$$,
  'announce inserts host, pid, queues, slots, no work held, started now, live for 30 s');

-- a re-announce keeps started_at and what it is not given (in_flight, draining_at), and takes
-- the new host, pid, queues, slots and ttl
select jobs.worker_heartbeat(worker_id => 'w1',
                             in_flight => array['00000000-0000-7000-8000-000000000001']::uuid[])
  \g /dev/null
set local durajobs.now = '2026-01-01 00:00:10+00';
select jobs.worker_draining(worker_id => 'w1') \g /dev/null
set local durajobs.now = '2026-01-01 00:00:20+00';
select lives_ok(
  $$select jobs.worker_announce(worker_id => 'w1', host => 'host-b', pid => 202,
                                queues => array['q3'], slots => 8, ttl => '1 minute')$$,
  'a re-announce of a known worker lives');
select is((select count(*) from jobs.workers where id = 'w1'), 1::bigint,
          'a re-announce keeps one row per worker');
select results_eq(
  $$select host, pid, queues, slots, started_at, heartbeat_at, expires_at
      from jobs.workers where id = 'w1'$$,
  $$values ('host-b', 202, array['q3'], 8, '2026-01-01 00:00:00+00'::timestamptz,
            '2026-01-01 00:00:20+00'::timestamptz, '2026-01-01 00:01:20+00'::timestamptz)$$,
  're-announce keeps started_at and takes the new host, pid, queues, slots and ttl');
select results_eq(
  $$select in_flight, in_flight_count, draining_at from jobs.workers where id = 'w1'$$,
  $$values (array['00000000-0000-7000-8000-000000000001']::uuid[], 1,
            '2026-01-01 00:00:10+00'::timestamptz)$$,
  're-announce clears nothing it is not given: in_flight and draining_at are kept');

-- pid 0 is allowed
select lives_ok(
  $$select jobs.worker_announce(worker_id => 'w-pid0', host => 'h', pid => 0,
                                queues => array['q1'], slots => 1)$$,
  'announce with pid 0 lives');

-- ---------------------------------------------------------------------------------------------
-- an announce sweeps the other expired rows, not the live ones; expiry at expires_at exactly

delete from jobs.workers;
set local durajobs.now = '2026-01-02 00:00:00+00';
select jobs.worker_announce(worker_id => 'w-short', host => 'h', pid => 1, queues => array['q'],
                            slots => 1, ttl => '10 seconds') \g /dev/null
select jobs.worker_announce(worker_id => 'w-long', host => 'h', pid => 2, queues => array['q'],
                            slots => 1, ttl => '1 hour') \g /dev/null

set local durajobs.now = '2026-01-02 00:00:09.999+00';
select is(jobs_test.live_ids(), array['w-long', 'w-short'],
          'a row is live just before expires_at');
select jobs.worker_announce(worker_id => 'w-sweeper', host => 'h', pid => 3,
                            queues => array['q'], slots => 1) \g /dev/null
select isnt(jobs_test.worker('w-short'), null,
            'an announce just before another row expires does not sweep it');

set local durajobs.now = '2026-01-02 00:00:10+00';
select is(jobs_test.live_ids(), array['w-long', 'w-sweeper'],
          'at expires_at = heartbeat + ttl the row is no longer live');
select isnt(jobs_test.worker('w-short'), null,
            'an expired row stays in the table until an announce sweeps it');
select jobs.worker_announce(worker_id => 'w-sweeper', host => 'h', pid => 3,
                            queues => array['q'], slots => 1) \g /dev/null
select is(jobs_test.worker('w-short'), null, 'an announce sweeps another expired row');
select isnt(jobs_test.worker('w-long'), null, 'an announce keeps a live row');

-- a worker announcing again after its own row expired re-registers, keeping started_at
set local durajobs.now = '2026-01-02 01:00:05+00';
select jobs.worker_announce(worker_id => 'w-long', host => 'h', pid => 2, queues => array['q'],
                            slots => 1) \g /dev/null
select results_eq(
  $$select started_at, heartbeat_at, expires_at from jobs.workers where id = 'w-long'$$,
  $$values ('2026-01-02 00:00:00+00'::timestamptz, '2026-01-02 01:00:05+00'::timestamptz,
            '2026-01-02 01:00:35+00'::timestamptz)$$,
  'a worker re-announcing after its own row expired is live again with its started_at kept');
select is(jobs_test.worker('w-sweeper'), null,
          '... and that announce swept the other expired row');

-- ---------------------------------------------------------------------------------------------
-- worker_announce: argument errors (X_ARGUMENT_INVALID, JQ001), each naming its argument

select throws_ok(
  $$select jobs.worker_announce(worker_id => '', host => 'h', pid => 1, queues => array['q'],
                                slots => 1)$$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.worker_announce: worker_id must not be blank (empty or only whitespace)',
  'announce with an empty worker_id raises JQ001 naming worker_id');
select throws_ok(
  $$select jobs.worker_announce(worker_id => '   ', host => 'h', pid => 1, queues => array['q'],
                                slots => 1)$$,
  'JQ001', null, 'announce with a blank worker_id raises JQ001');
select throws_ok(
  $$select jobs.worker_announce(worker_id => null, host => 'h', pid => 1, queues => array['q'],
                                slots => 1)$$,
  'JQ001', null, 'announce with a NULL worker_id raises JQ001');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => '  ', pid => 1, queues => array['q'],
                                slots => 1)$$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.worker_announce: host must not be blank (empty or only whitespace)',
  'announce with a blank host raises JQ001 naming host');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => null, pid => 1, queues => array['q'],
                                slots => 1)$$,
  'JQ001', null, 'announce with a NULL host raises JQ001');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => -1, queues => array['q'],
                                slots => 1)$$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.worker_announce: pid must be a process id of at least 0',
  'announce with a negative pid raises JQ001 naming pid');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => null, queues => array['q'],
                                slots => 1)$$,
  'JQ001', null, 'announce with a NULL pid raises JQ001');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => 1, queues => '{}',
                                slots => 1)$$,
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.worker_announce: queues must be a non-empty array of non-empty '
    || 'queue names',
  'announce with an empty queues array raises JQ001 naming queues');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => 1, queues => null,
                                slots => 1)$$,
  'JQ001', null, 'announce with NULL queues raises JQ001');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => 1,
                                queues => array['q', ''], slots => 1)$$,
  'JQ001', null, 'announce with an empty queue name in queues raises JQ001');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => 1,
                                queues => array['q', '  '], slots => 1)$$,
  'JQ001', null, 'announce with a blank queue name in queues raises JQ001');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => 1,
                                queues => array['q', null], slots => 1)$$,
  'JQ001', null, 'announce with a NULL queue name in queues raises JQ001');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => 1, queues => array['q'],
                                slots => 0)$$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.worker_announce: slots must be an integer of at least 1',
  'announce with slots 0 raises JQ001 naming slots');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => 1, queues => array['q'],
                                slots => null)$$,
  'JQ001', null, 'announce with NULL slots raises JQ001');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => 1, queues => array['q'],
                                slots => 1, ttl => '0')$$,
  'JQ001', 'X_ARGUMENT_INVALID: jobs.worker_announce: ttl must be a positive interval of at most 1 day',
  'announce with ttl 0 raises JQ001 naming ttl');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => 1, queues => array['q'],
                                slots => 1, ttl => '-5 seconds')$$,
  'JQ001', null, 'announce with a negative ttl raises JQ001');
select throws_ok(
  $$select jobs.worker_announce(worker_id => 'w', host => 'h', pid => 1, queues => array['q'],
                                slots => 1, ttl => null)$$,
  'JQ001', null, 'announce with a NULL ttl raises JQ001');
select is((select count(*) from jobs.workers where id = 'w'), 0::bigint,
          'a refused announce writes no row');

-- =============================================================================================
-- worker_heartbeat

delete from jobs.workers;
set local durajobs.now = '2026-01-03 00:00:00+00';
select jobs.worker_announce(worker_id => 'w-hb', host => 'h', pid => 1, queues => array['q'],
                            slots => 200) \g /dev/null

set local durajobs.now = '2026-01-03 00:00:25+00';
select is(jobs.worker_heartbeat(worker_id => 'w-hb'), true,
          'heartbeat of a live worker answers true');
select results_eq(
  $$select started_at, heartbeat_at, expires_at, in_flight, in_flight_count
      from jobs.workers where id = 'w-hb'$$,
  $$values ('2026-01-03 00:00:00+00'::timestamptz, '2026-01-03 00:00:25+00'::timestamptz,
            '2026-01-03 00:00:55+00'::timestamptz, '{}'::uuid[], 0)$$,
  'heartbeat moves heartbeat_at to now and expires_at to now + 30 s, keeps started_at');

select is(jobs.worker_heartbeat(worker_id => 'w-hb', in_flight => '{}', ttl => '2 minutes'),
          true, 'heartbeat with a ttl answers true');
select is((select expires_at from jobs.workers where id = 'w-hb'),
          '2026-01-03 00:02:25+00'::timestamptz, 'heartbeat extends expires_at to now + ttl');

-- 150 ids held: the first 100 are kept in order, the count is the true 150
select array_agg(('00000000-0000-7000-8000-' || lpad(g::text, 12, '0'))::uuid order by g)
       as many_ids
  from generate_series(1, 150) g \gset
select is(jobs.worker_heartbeat(worker_id => 'w-hb', in_flight => :'many_ids'::uuid[]), true,
          'heartbeat with 150 in-flight ids answers true');
select is((select in_flight from jobs.workers where id = 'w-hb'),
          (:'many_ids'::uuid[])[1:100], 'heartbeat keeps the first 100 in-flight ids, in order');
select is((select cardinality(in_flight) from jobs.workers where id = 'w-hb'), 100,
          'heartbeat stores exactly 100 ids');
select is((select in_flight_count from jobs.workers where id = 'w-hb'), 150,
          'in_flight_count holds the true count, 150');

-- the next heartbeat replaces the held ids
select jobs.worker_heartbeat(worker_id => 'w-hb',
                             in_flight => array['00000000-0000-7000-8000-000000000777']::uuid[])
  \g /dev/null
select results_eq(
  $$select in_flight, in_flight_count from jobs.workers where id = 'w-hb'$$,
  $$values (array['00000000-0000-7000-8000-000000000777']::uuid[], 1)$$,
  'a later heartbeat replaces the held ids and the count');

select is(jobs.worker_heartbeat(worker_id => 'w-unknown'), false,
          'heartbeat of an unknown worker answers false');
select is((select count(*) from jobs.workers where id = 'w-unknown'), 0::bigint,
          'heartbeat of an unknown worker inserts no row');

select jobs_test.worker('w-hb') as hb_before \gset
select throws_ok(
  $$select jobs.worker_heartbeat(worker_id => 'w-hb',
                                 in_flight => array[gen_random_uuid(), null])$$,
  'JQ001',
  'X_ARGUMENT_INVALID: jobs.worker_heartbeat: in_flight must be a one-dimensional array of job ids (empty for '
    || 'none)',
  'heartbeat with a NULL in the in_flight array raises JQ001 naming in_flight');
select throws_ok(
  $$select jobs.worker_heartbeat(worker_id => 'w-hb', in_flight => null)$$,
  'JQ001', null, 'heartbeat with a NULL in_flight raises JQ001');
select is(jobs_test.worker('w-hb'), :'hb_before', 'a refused heartbeat leaves the row unchanged');
select throws_ok(
  $$select jobs.worker_heartbeat(worker_id => ' ')$$,
  'JQ001', null, 'heartbeat with a blank worker_id raises JQ001');
select throws_ok(
  $$select jobs.worker_heartbeat(worker_id => 'w-hb', ttl => '0')$$,
  'JQ001', null, 'heartbeat with ttl 0 raises JQ001');

-- =============================================================================================
-- worker_draining: the first mark's time is kept

set local durajobs.now = '2026-01-03 00:01:00+00';
select is(jobs.worker_draining(worker_id => 'w-hb'), true,
          'worker_draining of a known worker answers true');
select is((select draining_at from jobs.workers where id = 'w-hb'),
          '2026-01-03 00:01:00+00'::timestamptz, 'worker_draining sets draining_at to now');
set local durajobs.now = '2026-01-03 00:01:30+00';
select is(jobs.worker_draining(worker_id => 'w-hb'), true,
          'a second worker_draining answers true');
select is((select draining_at from jobs.workers where id = 'w-hb'),
          '2026-01-03 00:01:00+00'::timestamptz, 'a second worker_draining keeps the first time');
select is(jobs.worker_draining(worker_id => 'w-unknown'), false,
          'worker_draining of an unknown worker answers false');
select throws_ok($$select jobs.worker_draining(worker_id => '')$$, 'JQ001', null,
                 'worker_draining with an empty worker_id raises JQ001');
select throws_ok($$select jobs.worker_draining(worker_id => null)$$, 'JQ001', null,
                 'worker_draining with a NULL worker_id raises JQ001');

-- =============================================================================================
-- worker_forget

select jobs.worker_announce(worker_id => 'w-forget', host => 'h', pid => 1, queues => array['q'],
                            slots => 1) \g /dev/null
select jobs.worker_announce(worker_id => 'w-stays', host => 'h', pid => 1, queues => array['q'],
                            slots => 1) \g /dev/null
select is(jobs.worker_forget(worker_id => 'w-forget'), true,
          'worker_forget of a known worker answers true');
select is(jobs_test.worker('w-forget'), null, 'worker_forget deletes the row');
select is(jobs.worker_forget(worker_id => 'w-forget'), false,
          'a second worker_forget answers false');
select is(jobs.worker_heartbeat(worker_id => 'w-forget'), false,
          'a heartbeat after worker_forget answers false');
select isnt(jobs_test.worker('w-stays'), null, 'worker_forget leaves the other workers');
select throws_ok($$select jobs.worker_forget(worker_id => '  ')$$, 'JQ001', null,
                 'worker_forget with a blank worker_id raises JQ001');

-- =============================================================================================
-- workers_live: the rows not expired, ordered by started_at, then id

delete from jobs.workers;
set local durajobs.now = '2026-01-04 00:00:00+00';
select jobs.worker_announce(worker_id => 'w-b', host => 'h', pid => 1, queues => array['q'],
                            slots => 1, ttl => '1 hour') \g /dev/null
select jobs.worker_announce(worker_id => 'w-a', host => 'h', pid => 1, queues => array['q'],
                            slots => 1, ttl => '1 hour') \g /dev/null
select jobs.worker_announce(worker_id => 'w-dead', host => 'h', pid => 1, queues => array['q'],
                            slots => 1, ttl => '5 seconds') \g /dev/null
set local durajobs.now = '2026-01-04 00:00:01+00';
select jobs.worker_announce(worker_id => 'w-0', host => 'h', pid => 1, queues => array['q'],
                            slots => 1, ttl => '1 hour') \g /dev/null
select is(jobs_test.live_ids(), array['w-a', 'w-b', 'w-dead', 'w-0'],
          'workers_live orders by started_at, then id');

set local durajobs.now = '2026-01-04 00:00:05+00';
select is(jobs_test.live_ids(), array['w-a', 'w-b', 'w-0'],
          'workers_live leaves out a row that expired (not yet swept)');
select isnt(jobs_test.worker('w-dead'), null, '... though the expired row is still in the table');

-- a heartbeat does not move a worker in the order; the columns are the registry's
select jobs.worker_heartbeat(worker_id => 'w-b',
                             in_flight => array['00000000-0000-7000-8000-000000000042']::uuid[])
  \g /dev/null
select jobs.worker_draining(worker_id => 'w-b') \g /dev/null
select is(jobs_test.live_ids(), array['w-a', 'w-b', 'w-0'],
          'a heartbeat keeps the worker''s place (ordered by started_at, not heartbeat_at)');
select results_eq(
  $$select * from jobs.workers_live() where id = 'w-b'$$,
  $$select id, host, pid, queues, slots, in_flight, in_flight_count, started_at, heartbeat_at,
           expires_at, draining_at
      from jobs.workers where id = 'w-b'$$,
  'workers_live answers the registry''s columns');
select results_eq(
  $$select in_flight, in_flight_count, draining_at from jobs.workers_live() where id = 'w-b'$$,
  $$values (array['00000000-0000-7000-8000-000000000042']::uuid[], 1,
            '2026-01-04 00:00:05+00'::timestamptz)$$,
  'workers_live shows what a worker holds and that it is draining');

set local durajobs.now = '2026-01-05 00:00:00+00';
select is_empty($$select * from jobs.workers_live()$$,
                'workers_live answers no rows when every worker expired');

select * from finish();
rollback;
