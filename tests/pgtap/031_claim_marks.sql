-- 031_claim_marks: a claim whose scan walked past many entries it could not hand out (here: the
-- old entries of rows this same transaction claimed, which no scan may mark dead while it is
-- open, as a held horizon keeps them) keeps a mark per queue in its session and starts after
-- it; a row that comes in behind a mark is handed out at the next read from the head; marks are
-- session state that a rollback takes back.
begin;
\ir fixtures/factory.sql
select plan(21);

create function jobs_test.marks()
returns jsonb
language sql
volatile
as $$
  select nullif(coalesce(current_setting('jobs.claim_marks', true), ''), '')::jsonb
$$;

-- the index entries an empty claim of queue mq walks
create function jobs_test.walked_by_empty_claim()
returns bigint
language plpgsql
volatile
as $$
declare
  v_before bigint := pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass);
  v_taken integer;
begin
  select count(*) into v_taken
    from jobs.claim_v1(array['mq'], 'w-m', 10, recover_lapsed => false);
  if v_taken <> 0 then
    raise exception 'the claim took % rows', v_taken;
  end if;
  return pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass) - v_before;
end;
$$;

-- the counts below are of jobs_claim_idx's entries, so the claim must read it: on a table this
-- small, statistics taken mid-file by autovacuum could otherwise make a sequential scan cheaper
set local enable_seqscan = off;
set local enable_bitmapscan = off;
-- planning a claim's statements reads index entries too (the planner's probe of the index
-- ends): plan them first, so the counts below are the scans' alone
select count(*) from jobs.claim_v1(array['mq'], 'w-m', 1000);
select set_config('jobs.claim_marks', '', false);

select count(*) from jobs.enqueue_many(
  (select jsonb_agg(jsonb_build_object('name', 'm', 'queue', 'mq', 'input', '{}'::jsonb,
                                       'idempotency_key', 'm' || n))
     from generate_series(1, 2000) n));

select is((select count(*)::integer from jobs.claim_v1(array['mq'], 'w-m', 1000)), 1000,
          'a first claim takes 1,000 rows from the head');
select is(jobs_test.marks(), null, 'walking only what it took, it keeps no mark');
select is((select count(*)::integer from jobs.claim_v1(array['mq'], 'w-m', 500)), 500,
          'the next claim walks the 1,000 entries left behind, then takes 500');
select is(jobs_test.marks(), null, 'at the walk limit (1,000), still no mark');
select is((select count(*)::integer from jobs.claim_v1(array['mq'], 'w-m', 500)), 500,
          'the next walks 1,500 entries left behind and takes the last 500');
select ok(jobs_test.marks() ? 'mq', 'past the walk limit, its session keeps a mark for the queue');
select is((jobs_test.marks() -> 'mq' ->> 'i')::uuid,
          (select id from jobs.jobs_live where queue = 'mq'
            order by priority desc, run_at desc, id desc limit 1),
          'the mark is the key of the last row handed out');
select cmp_ok(jobs_test.walked_by_empty_claim(), '<', 10::bigint,
              'an empty claim starts after the mark: it walks none of the 2,000 entries behind');

-- a row behind the mark: a lower priority number than the rows handed out so far
select jobs_test.enqueue(name => 'm', queue => 'mq', priority => -1) as behind_id \gset
select set_config('jobs.claim_marks',
                  jsonb_set(jobs_test.marks(), '{mq,until}',
                            to_jsonb(clock_timestamp() + interval '1 hour'))::text, false);
select is((select count(*)::integer from jobs.claim_v1(array['mq'], 'w-m', 10)), 0,
          'while the mark stands, a row behind it is not seen');
select set_config('jobs.claim_marks',
                  jsonb_set(jobs_test.marks(), '{mq,until}',
                            to_jsonb(clock_timestamp() - interval '1 second'))::text, false);
select is((select id from jobs.claim_v1(array['mq'], 'w-m', 10)), :'behind_id'::uuid,
          'once it lapses, the claim reads from the head and hands the row out');
select ok(jobs_test.marks() ? 'mq', 'that read walked far again, so the mark is kept');
select cmp_ok((jobs_test.marks() -> 'mq' ->> 'until')::timestamptz, '>', clock_timestamp(),
              'and stands for another rescan period');

-- a queue claimed from the head that walks little keeps no mark, and marks of other queues stay
select jobs_test.enqueue(name => 'm', queue => 'other') as other_id \gset
select is((select id from jobs.claim_v1(array['other'], 'w-m', 10)), :'other_id'::uuid,
          'another queue is read from its head');
select ok(not (jobs_test.marks() ? 'other') and jobs_test.marks() ? 'mq',
          'it gets no mark, and the first queue keeps its own');
select jobs._claim_marks_keep(jobs_test.marks(), array['mq'], false, clock_timestamp(),
                              '{}', '{}', '{}', '{}');
select is(jobs_test.marks(), null, 'a light read from the head drops the queue''s mark');

-- a rollback takes the marks back with the claim
savepoint before_claim;
select count(*) from jobs.enqueue_many(
  (select jsonb_agg(jsonb_build_object('name', 'm', 'queue', 'mq', 'input', '{}'::jsonb,
                                       'idempotency_key', 'r' || n))
     from generate_series(1, 1200) n));
select count(*) from jobs.claim_v1(array['mq'], 'w-m', 1000);
select count(*) from jobs.claim_v1(array['mq'], 'w-m', 1000);
select ok(jobs_test.marks() ? 'mq', 'a claim in the savepoint keeps a mark');
rollback to savepoint before_claim;
select is(jobs_test.marks(), null, 'rolled back, the mark is gone with it');

-- the key kept is the last one handed out of each queue with a standing mark: the arrays are in
-- hand-out order, one queue's (the claim of one queue) or several queues' interleaved
select set_config('jobs.claim_marks',
                  '{"a": {"until": "2999-01-01T00:00:00+00:00"}}', false);
select jobs._claim_marks_keep(jobs_test.marks(), '{}', false, clock_timestamp(),
                              array['a', 'a', 'a'], array[0, 0, 5],
                              array['2026-01-01', '2026-01-02', '2026-01-01']::timestamptz[],
                              array['00000000-0000-0000-0000-000000000001',
                                    '00000000-0000-0000-0000-000000000002',
                                    '00000000-0000-0000-0000-000000000003']::uuid[]);
select is(jobs_test.marks() -> 'a',
          jsonb_build_object('until', '2999-01-01T00:00:00+00:00', 'p', 5,
                             'r', '2026-01-01'::timestamptz,
                             'i', '00000000-0000-0000-0000-000000000003'),
          'one queue''s rows: its mark moves to the last key, and keeps its until');
select jobs._claim_marks_keep(jobs_test.marks(), '{}', false, clock_timestamp(),
                              array['b', 'b'], array[1, 2],
                              array['2026-01-01', '2026-01-01']::timestamptz[],
                              array['00000000-0000-0000-0000-00000000000b',
                                    '00000000-0000-0000-0000-00000000000c']::uuid[]);
select ok(not (jobs_test.marks() ? 'b') and (jobs_test.marks() -> 'a' ->> 'p') = '5',
          'a queue with no standing mark gets none from its rows');
select set_config('jobs.claim_marks',
                  '{"a": {"until": "2999-01-01T00:00:00+00:00"},'
                  ' "c": {"until": "2999-01-01T00:00:00+00:00"}}', false);
select jobs._claim_marks_keep(jobs_test.marks(), '{}', false, clock_timestamp(),
                              array['a', 'c', 'a', 'c', 'd'], array[0, 1, 2, 3, 4],
                              array['2026-01-01', '2026-01-01', '2026-01-01', '2026-01-01',
                                    '2026-01-01']::timestamptz[],
                              array['00000000-0000-0000-0000-0000000000a1',
                                    '00000000-0000-0000-0000-0000000000c1',
                                    '00000000-0000-0000-0000-0000000000a2',
                                    '00000000-0000-0000-0000-0000000000c2',
                                    '00000000-0000-0000-0000-0000000000d1']::uuid[]);
select is(array[jobs_test.marks() -> 'a' ->> 'i', jobs_test.marks() -> 'c' ->> 'i'],
          array['00000000-0000-0000-0000-0000000000a2', '00000000-0000-0000-0000-0000000000c2'],
          'several queues'' rows: each marked queue moves to its own last key');
select ok(not (jobs_test.marks() ? 'd'), 'and the queue without a mark still gets none');

select * from finish();
rollback;
