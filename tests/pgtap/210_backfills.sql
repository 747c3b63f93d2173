-- 210_backfills: the backfill ledger. One row a pass (a run); a retry adopts its row keeping
-- its start (R79); only a completed pass makes a start answer 'skipped' (R76); force starts a
-- new row; the counts are totals that never go back; jobs.backfills_v1 reads the pass's job
-- state with it.
begin;
\ir fixtures/factory.sql
select plan(24);

set local durajobs.now = '2026-01-01 00:00:00+00';

select jobs_test.enqueue(queue => 'q-bf') as job1 \gset
select run_id as run1 from jobs.jobs where id = :'job1' \gset

select * from jobs.backfill_start_v1(name => 'b', run_id => :'run1', job_id => :'job1',
                                     checksum => 'c1', environment => 'dev') \gset s_
select is(:'s_outcome'::text, 'started'::text, 'the first start of a run writes a new row');
select is((select count(*)::int from jobs.backfills), 1, 'one row');
select is((select status from jobs.backfills), 'running', 'the row is running');

select is(jobs.backfill_progress_v1(run_id => :'run1', batches => 2, rows_processed => 6), true,
          'progress on the running row lands');
select is(jobs.backfill_progress_v1(run_id => :'run1', batches => 1, rows_processed => 3), true,
          'an older total lands too');
select is((select (batches, rows_processed)::text from jobs.backfills), '(2,6)',
          'but the totals never go back: a replayed page counts nothing twice');
select is(jobs.backfill_finish_v1(run_id => :'run1', status => 'failed', error => 'boom'), true,
          'the pass fails');

set local durajobs.now = '2026-01-01 00:05:00+00';
select * from jobs.backfill_start_v1(name => 'b', run_id => :'run1', job_id => :'job1',
                                     checksum => 'c1', environment => 'dev') \gset a_
select is(:'a_outcome'::text, 'adopted'::text, 'a second start of the same run adopts its row');
select is(:'a_batches'::int, 2, 'and answers its counts');
select is((select (status, error, failed_at)::text from jobs.backfills), '(running,,)',
          'the adopted row is running again, its failure cleared');
select is((select started_at from jobs.backfills), '2026-01-01 00:00:00+00'::timestamptz,
          'its start is the pass''s, kept');
select is(jobs.backfill_finish_v1(run_id => :'run1', status => 'completed'), true,
          'the pass completes');
select is(jobs.backfill_finish_v1(run_id => :'run1', status => 'completed'), false,
          'a second finish finds no running pass');

select jobs_test.enqueue(queue => 'q-bf') as job2 \gset
select run_id as run2 from jobs.jobs where id = :'job2' \gset
select * from jobs.backfill_start_v1(name => 'b', run_id => :'run2', job_id => :'job2',
                                     checksum => 'c2', environment => 'dev') \gset k_
select is(:'k_outcome'::text, 'skipped'::text, 'a new run after a completed pass is skipped');
select is(:'k_previous_run_id'::uuid, :'run1'::uuid, 'naming the pass that completed');
select is(:'k_previous_checksum'::text, 'c1'::text, 'and its checksum, for the caller to compare');
select is((select count(*)::int from jobs.backfills), 1, 'a skipped start writes nothing');

select * from jobs.backfill_start_v1(name => 'b', run_id => :'run2', job_id => :'job2',
                                     checksum => 'c2', environment => 'dev', force => true) \gset f_
select is(:'f_outcome'::text, 'started'::text, 'force starts a new pass after a completed one');
select is((select forced from jobs.backfills where run_id = :'run2'), true, 'marked forced');

select is((select array_agg(run_id order by started_at desc, id desc)
             from jobs.backfills_v1(backfill => 'b')),
          array[:'run2'::uuid, :'run1'::uuid], 'backfills_v1 lists the passes newest first');
select is((select job_state from jobs.backfills_v1() where run_id = :'run2'), 'ready',
          'with the state of each pass''s job');

select throws_ok($$select jobs.backfill_finish_v1(run_id => gen_random_uuid(), status => 'done')$$,
                 'JQ001', null, 'a finish status other than completed or failed is refused');
select throws_ok($$select jobs.backfill_progress_v1(run_id => gen_random_uuid(), batches => -1,
                                                    rows_processed => 0)$$,
                 'JQ001', null, 'a negative count is refused');
select throws_ok($$select * from jobs.backfills_v1(max_rows => 0)$$, 'JQ001', null,
                 'max_rows 0 is refused');

select * from finish();
rollback;
