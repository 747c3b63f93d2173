-- 060_stats: jobs.queue_stats: one bucket per row, a shed row counts as ready (R9), a parked
-- row never sets oldest_ready_age (R10), zero rows for named empty queues, the paused flag.
-- It reads each counted state through its partial index: a queue's finished rows are never
-- read, however many there are (a metrics scrape calls it).
-- the reads counted below start from a vacuumed table: other files insert rows and roll them
-- back, and the index entries those leave are read until a vacuum removes them
vacuum jobs.jobs_live;
begin;
\ir fixtures/factory.sql
select plan(23);

-- ---------------------------------------------------------------------------------------------
-- one queue holding a row in every state

set local durajobs.now = '2026-01-01 00:00:00+00';
-- running (under a long lease)
select jobs_test.enqueue(name => 's-running', queue => 'q-stats') as s_running \gset
select jobs_test.claim_one(queue => 'q-stats', visibility => '1 day') \g /dev/null
-- dead
select jobs_test.enqueue(name => 's-dead', queue => 'q-stats') as s_dead \gset
select * from jobs_test.claim_one(queue => 'q-stats') \gset sd_
select jobs.nack_v1(id => :'s_dead', worker_id => 'w1', claim => :'sd_claim', next_state => 'dead') \g /dev/null
-- done, failed, cancelled: in no bucket
select jobs_test.enqueue(name => 's-done', queue => 'q-stats') as s_done \gset
select * from jobs_test.claim_one(queue => 'q-stats') \gset sk_
select jobs.ack_v1(id => :'s_done', worker_id => 'w1', claim => :'sk_claim') \g /dev/null
select jobs_test.enqueue(name => 's-failed', queue => 'q-stats') as s_failed \gset
select * from jobs_test.claim_one(queue => 'q-stats') \gset sf_
select jobs.nack_v1(id => :'s_failed', worker_id => 'w1', claim => :'sf_claim', next_state => 'failed') \g /dev/null
select jobs_test.enqueue(name => 's-cancelled', queue => 'q-stats') as s_cancelled \gset
select jobs_test.cancel(:'s_cancelled') \g /dev/null
-- parked: suspended, due since 00:00:00 (older than every ready row)
select jobs_test.enqueue(name => 's-parked', queue => 'q-stats') as s_parked \gset
select * from jobs_test.claim_one(queue => 'q-stats') \gset sp_
select jobs.nack_v1(id => :'s_parked', worker_id => 'w1', claim => :'sp_claim', next_state => 'suspended',
                    counts_as_attempt => false) \g /dev/null

set local durajobs.now = '2026-01-01 00:10:00+00';
-- shed: ready, uncounted, due again in 5 s (claimed first thanks to its priority)
select jobs_test.enqueue(name => 's-shed', queue => 'q-stats', priority => -1) as s_shed \gset
select * from jobs_test.claim_one(queue => 'q-stats') \gset ss_
select is(:'ss_id'::uuid, :'s_shed'::uuid, 'the shed row is the one claimed');
select jobs.nack_v1(id => :'s_shed', worker_id => 'w1', claim => :'ss_claim', next_state => 'ready',
                    delay => '5 seconds', counts_as_attempt => false) \g /dev/null
-- ready and due since 00:07 and 00:09; delayed until 01:00
select jobs_test.enqueue(name => 's-ready-old', queue => 'q-stats', run_at => '2026-01-01 00:07:00+00'),
       jobs_test.enqueue(name => 's-ready-new', queue => 'q-stats', run_at => '2026-01-01 00:09:00+00'),
       jobs_test.enqueue(name => 's-delayed', queue => 'q-stats', run_at => '2026-01-01 01:00:00+00') \g /dev/null

select results_eq(
  $$select state, count(*) from jobs.jobs where queue = 'q-stats' group by state order by state$$,
  $$values ('cancelled', 1::bigint), ('dead', 1), ('delayed', 1), ('done', 1), ('failed', 1), ('ready', 3),
           ('running', 1), ('suspended', 1)$$,
  'the fixture holds a row in every state');

select results_eq(
  $$select queue, ready, delayed, running, suspended, dead, oldest_ready_age, paused
      from jobs.queue_stats(queues => array['q-stats'])$$,
  $$values ('q-stats', 3::bigint, 1::bigint, 1::bigint, 1::bigint, 1::bigint, interval '3 minutes', false)$$,
  'queue_stats counts each bucket; oldest_ready_age is the oldest due ready row''s wait');

-- R9: the shed row counts as ready
select is((select ready from jobs.queue_stats(queues => array['q-stats'])), 3::bigint,
          'R9: the shed row (ready, not yet due) is counted in ready');
-- R10: the parked row is not ready and, due for 10 minutes, does not set oldest_ready_age
select is((select suspended from jobs.queue_stats(queues => array['q-stats'])), 1::bigint,
          'R10: the parked row is counted in suspended, not ready');
select is((select oldest_ready_age from jobs.queue_stats(queues => array['q-stats'])), interval '3 minutes',
          'R10: the due parked row (10 minutes) does not set oldest_ready_age');
-- each row in exactly one bucket: the buckets sum to the rows in their states
select is(
  (select ready + delayed + running + suspended + dead from jobs.queue_stats(queues => array['q-stats'])),
  (select count(*) from jobs.jobs
    where queue = 'q-stats' and state in ('ready', 'delayed', 'running', 'suspended', 'dead')),
  'each row is counted in exactly one bucket');

-- a due ready row sets oldest_ready_age = now - run_at; a not-yet-due shed row does not
select jobs_test.enqueue(name => 'age', queue => 'q-age', run_at => '2026-01-01 00:09:30+00') \g /dev/null
select is((select oldest_ready_age from jobs.queue_stats(queues => array['q-age'])), interval '30 seconds',
          'a due ready row sets oldest_ready_age = now - run_at');
select jobs_test.enqueue(name => 'shed-only', queue => 'q-shed-only', priority => -1) as so_id \gset
select * from jobs_test.claim_one(queue => 'q-shed-only') \gset so_
select jobs.nack_v1(id => :'so_id', worker_id => 'w1', claim => :'so_claim', delay => '5 seconds',
                    counts_as_attempt => false) \g /dev/null
select results_eq(
  $$select ready, oldest_ready_age from jobs.queue_stats(queues => array['q-shed-only'])$$,
  $$values (1::bigint, null::interval)$$,
  'a shed row not yet due counts as ready but sets no oldest_ready_age');
select jobs_test.advance(interval '5 seconds') \g /dev/null
select is((select oldest_ready_age from jobs.queue_stats(queues => array['q-shed-only'])), interval '0',
          'once due, the shed row sets oldest_ready_age');
set local durajobs.now = '2026-01-01 00:10:00+00';

-- ---------------------------------------------------------------------------------------------
-- the queues asked for, zeros included; NULL asks for every queue holding a job

select results_eq(
  $$select queue, ready, delayed, running, suspended, dead, oldest_ready_age, paused
      from jobs.queue_stats(queues => array['empty-q'])$$,
  $$values ('empty-q', 0::bigint, 0::bigint, 0::bigint, 0::bigint, 0::bigint, null::interval, false)$$,
  'a named queue with no jobs answers a zero row');
select results_eq(
  $$select queue from jobs.queue_stats(queues => array['q-stats', 'empty-q', 'q-age'])$$,
  $$values ('empty-q'), ('q-age'), ('q-stats')$$,
  'exactly the named queues are answered, ordered by queue');
select ok(
  (select array_agg(queue) from jobs.queue_stats()) @> array['q-stats', 'q-age', 'q-shed-only'],
  'NULL queues answers every queue holding a job');
select ok(
  not exists (select 1 from jobs.queue_stats() where queue = 'empty-q'),
  'NULL queues does not invent a queue without jobs');
select ok(
  (select bool_and(a.queue < b.queue)
     from (select queue, row_number() over () as n from jobs.queue_stats()) a
     join (select queue, row_number() over () as n from jobs.queue_stats()) b on b.n = a.n + 1),
  'NULL queues answers the queues ordered by queue');

-- ---------------------------------------------------------------------------------------------
-- the paused flag

select jobs.pause_queue(queue => 'q-stats') \g /dev/null
select jobs.pause_queue(queue => 'empty-q') \g /dev/null
select results_eq(
  $$select queue, paused from jobs.queue_stats(queues => array['empty-q', 'q-age', 'q-stats'])$$,
  $$values ('empty-q', true), ('q-age', false), ('q-stats', true)$$,
  'paused is shown per queue, for an empty queue too');
select jobs.resume_queue(queue => 'q-stats') \g /dev/null
select is((select paused from jobs.queue_stats(queues => array['q-stats'])), false,
          'paused clears on resume');
-- a queue paused before its jobs come (or after they all finished) is listed without naming it
select results_eq(
  $$select queue, ready, running, dead, paused from jobs.queue_stats() where queue = 'empty-q'$$,
  $$values ('empty-q', 0::bigint, 0::bigint, 0::bigint, true)$$,
  'NULL queues lists a paused queue that holds nothing, with zeros');
select jobs.resume_queue(queue => 'empty-q') \g /dev/null
select ok(not exists (select 1 from jobs.queue_stats() where queue = 'empty-q'),
          'and forgets it once resumed');


-- a delayed row that came due waits like a ready one: it counts as ready and ages
set local durajobs.now = '2026-05-01 00:00:00+00';
select jobs_test.enqueue(name => 'due-later', queue => 'q-due',
                         run_at => jobs._now() + interval '5 minutes') \g /dev/null
select jobs_test.enqueue(name => 'far-later', queue => 'q-due',
                         run_at => jobs._now() + interval '1 hour') \g /dev/null
select jobs_test.advance(interval '15 minutes') \g /dev/null
select results_eq(
  $$select ready, delayed, oldest_ready_age from jobs.queue_stats(array['q-due'])$$,
  $$values (1::bigint, 1::bigint, interval '10 minutes')$$,
  'an overdue delayed row counts as ready and sets oldest_ready_age; a future one stays delayed');

-- ---------------------------------------------------------------------------------------------
-- reads: 20,000 finished rows and a few live ones; the stats read the live ones only (the
-- bound leaves room for the entries this transaction's own earlier rows left in the indexes)


-- inserted finished: rows that ran in this transaction would leave entries in the claim index
-- that only a vacuum (impossible here) removes
insert into jobs.jobs (id, name, queue, input, idempotency_key, run_id, state, attempt,
                       max_attempts, run_at, created_at, updated_at, finished_at)
select gen_random_uuid(), 'old', 'q-reads', '{}', 'old' || g, gen_random_uuid(), 'done', 1, 1,
       jobs._now(), jobs._now(), jobs._now(), jobs._now()
  from generate_series(1, 20000) g;
select jobs_test.enqueue(queue => 'q-reads') \g /dev/null
select jobs_test.claim_one(queue => 'q-reads', visibility => '1 day') \g /dev/null
select jobs_test.enqueue(queue => 'q-reads') as r_dead \gset
select * from jobs_test.claim_one(queue => 'q-reads') \gset rd_
select jobs.nack_v1(id => :'r_dead', worker_id => 'w1', claim => :'rd_claim', next_state => 'dead') \g /dev/null
select jobs_test.enqueue(queue => 'q-reads') \g /dev/null
analyze jobs.jobs_live, jobs.jobs_history;

select results_eq(
  $$select ready, running, dead from jobs.queue_stats(array['q-reads'])$$,
  $$values (1::bigint, 1::bigint, 1::bigint)$$,
  'the counts of a queue with 20,000 finished rows are those of its live and dead rows');

select jobs_test.mark();
select count(*) from jobs.queue_stats(array['q-reads']) \g /dev/null
select cmp_ok(jobs_test.read_since_mark(), '<', 2000::bigint,
              'the stats of one queue read its few live and dead rows, not its 20,000 finished');
select jobs_test.mark();
select count(*) from jobs.queue_stats() \g /dev/null
select cmp_ok(jobs_test.read_since_mark(), '<', 2000::bigint,
              'the stats of every queue read no finished row either');

select * from finish();
rollback;
