-- 910_listing: jobs.list_jobs without a queue reads a queue at a time through
-- jobs_queue_created_idx and merges them (there is no index on (created_at, id) alone: it would
-- cost every insert, claim and settle an entry), and the running rows, which no index orders by
-- queue (a claim writes no entry in jobs_queue_created_idx), from one read of them all. The
-- merged pages keep the order and the cursors of a single scan, and a page reads about a page of
-- index entries per queue and the running rows, not the table.
begin;
\ir fixtures/factory.sql
select plan(17);


-- every job, newest first, walked a page at a time with `after` (older) and, from the oldest
-- back, with `before` (newer pages, each still newest first)
create function jobs_test.walk_older(page_size integer)
returns uuid[]
language plpgsql
volatile
as $$
declare
  v_all uuid[] := '{}';
  v_page uuid[];
begin
  loop
    select coalesce(array_agg(p.id order by p.ordinality), '{}')
      into v_page
      from jobs.list_jobs(page_size => walk_older.page_size,
                          after => v_all[cardinality(v_all)]) with ordinality p;
    exit when cardinality(v_page) = 0;
    v_all := v_all || v_page;
  end loop;
  return v_all;
end;
$$;

create function jobs_test.walk_newer(oldest uuid, page_size integer)
returns uuid[]
language plpgsql
volatile
as $$
declare
  v_all uuid[] := array[oldest];
  v_page uuid[];
begin
  loop
    select coalesce(array_agg(p.id order by p.ordinality), '{}')
      into v_page
      from jobs.list_jobs(page_size => walk_newer.page_size, before => v_all[1]) with ordinality p;
    exit when cardinality(v_page) = 0;
    v_all := v_page || v_all;
  end loop;
  return v_all;
end;
$$;

-- =============================================================================================
-- order across queues: created_at interleaves the queues, ids disagree with created_at, and two
-- rows of different queues share a created_at (the id breaks the tie)

set local durajobs.now = '2026-04-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-b', id => 'f0000000-0000-7000-8000-000000000001') as r1 \gset
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.enqueue(queue => 'q-a', id => '10000000-0000-7000-8000-000000000002') as r2 \gset
select jobs_test.enqueue(queue => 'q-c', id => '20000000-0000-7000-8000-000000000003') as r3 \gset
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.enqueue(queue => 'q-b', id => '30000000-0000-7000-8000-000000000004') as r4 \gset
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.enqueue(queue => 'q-a', id => '00000000-0000-7000-8000-000000000005') as r5 \gset

select is((select array_agg(p.id order by p.ordinality) from jobs.list_jobs() with ordinality p),
          array[:'r5', :'r4', :'r3', :'r2', :'r1']::uuid[],
          'without a queue the page merges every queue newest first, the id breaking a tie');
select is(jobs_test.walk_older(2), array[:'r5', :'r4', :'r3', :'r2', :'r1']::uuid[],
          'pages of 2 with after walk every queue once, in order');
select is(jobs_test.walk_newer(:'r1', 2), array[:'r5', :'r4', :'r3', :'r2', :'r1']::uuid[],
          'pages of 2 with before walk back up every queue once, in order');
select is((select array_agg(p.id order by p.ordinality)
             from jobs.list_jobs(page_size => 2, before => :'r2') with ordinality p),
          array[:'r4', :'r3']::uuid[],
          'before answers the newer rows nearest the cursor across queues, newest first');
select is((select array_agg(p.id order by p.ordinality)
             from jobs.list_jobs(queue => 'q-a') with ordinality p),
          array[:'r5', :'r2']::uuid[], 'a queue''s listing answers only that queue');

-- a row may hold the greatest key there is (the enqueue refuses an infinite clock, but a row
-- written by other means may carry it): the seek without a cursor starts at that key inclusive,
-- and `after` still excludes the cursor row
insert into jobs.jobs (id, name, queue, input, idempotency_key, run_id, state, attempt,
                       max_attempts, run_at, created_at, updated_at, finished_at)
values ('ffffffff-ffff-ffff-ffff-ffffffffffff', 'j', 'q-c', '{}', 'max', gen_random_uuid(),
        'done', 1, 1, jobs._now(), 'infinity', jobs._now(), jobs._now())
returning id as rmax \gset
select is((select array_agg(p.id order by p.ordinality)
             from jobs.list_jobs(page_size => 2) with ordinality p),
          array[:'rmax', :'r5']::uuid[],
          'a row at the greatest key (created_at infinity, the last uuid) leads the newest page');
select is(jobs_test.walk_older(2), array[:'rmax', :'r5', :'r4', :'r3', :'r2', :'r1']::uuid[],
          'and a walk with after passes it once');

-- running rows: the queue listing index holds none (a claim writes no entry in it), and the
-- listing reads them through the lease index, each in its place
select (jobs_test.claim_one('q-a')).id = :'r2' as claimed_r2 \gset
select ok(:'claimed_r2', 'the oldest row of q-a is claimed');
select is((select array_agg(p.id || ' ' || p.state order by p.ordinality)
             from jobs.list_jobs(queue => 'q-a') with ordinality p),
          array[:'r5' || ' ready', :'r2' || ' running'],
          'a queue''s listing answers its running row in its place');
select is(jobs_test.walk_older(2), array[:'rmax', :'r5', :'r4', :'r3', :'r2', :'r1']::uuid[],
          'a walk with after passes the running row once, in order');
select is(jobs_test.walk_newer(:'r1', 2), array[:'rmax', :'r5', :'r4', :'r3', :'r2', :'r1']::uuid[],
          'and so does a walk with before');
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.enqueue(queue => 'q-0', id => '40000000-0000-7000-8000-000000000006') as r6 \gset
select jobs_test.claim_one('q-0') \g /dev/null
select is((select array_agg(p.id order by p.ordinality)
             from jobs.list_jobs(page_size => 3) with ordinality p),
          array[:'rmax', :'r6', :'r5']::uuid[],
          'a queue whose only row is running is listed without a queue named');
select is((select array_agg(p.id order by p.ordinality)
             from jobs.list_jobs(state => 'running') with ordinality p),
          array[:'r6', :'r2']::uuid[], 'the running rows of every queue, newest first');

-- =============================================================================================
-- reads: 3 queues of 3,000 rows each

select jobs.enqueue_many(
  (select jsonb_agg(jsonb_build_object('name', 'many', 'queue', 'q-many-' || (g % 3),
                                       'input', '{}'::jsonb, 'idempotency_key', 'k' || g))
     from generate_series(1, 9000) g));
-- and 100 of them running: the listing reads all running rows once for each queue
select count(*) from jobs.claim_v1(queues => array['q-many-1'], worker_id => 'w-list',
                                   batch_size => 100) \g /dev/null
analyze jobs.jobs_live, jobs.jobs_history;
-- what reading every running row twice costs (their queues' names, then their rows)
select 2 * count(*) + 300 as bound from jobs.jobs_live where state = 'running' \gset

select is(cardinality(jobs_test.walk_older(200)), 9007,
          'every one of 9,007 rows is walked once by pages of 200');

select jobs_test.mark();
select count(*) from jobs.list_jobs(page_size => 20) \g /dev/null
select cmp_ok(jobs_test.read_since_mark(), '<', :'bound'::bigint,
              'the first page of 20 over 3 queues of 3,000 rows reads a few dozen entries a '
              'queue, and the 102 running rows twice');

select p.id as deep
  from jobs.list_jobs(page_size => 1,
                      after => (select id from jobs.jobs order by created_at desc, id desc
                                 offset 4000 limit 1)) p \gset
select jobs_test.mark();
select count(*) from jobs.list_jobs(page_size => 20, after => :'deep') \g /dev/null
select cmp_ok(jobs_test.read_since_mark(), '<', :'bound'::bigint,
              'a page after a cursor 4,000 rows deep seeks to it, not through the rows before');

select jobs_test.mark();
select count(*) from jobs.list_jobs(page_size => 20, before => :'deep') \g /dev/null
select cmp_ok(jobs_test.read_since_mark(), '<', :'bound'::bigint,
              'a page before that cursor reads as little');

select * from finish();
rollback;
