-- 190_purge: retention (R69, R70, R71, R73, items 113, 134, 183, 185). jobs.purge deletes what
-- has outlived its window, a batch a call: done jobs after done_after, failed, dead and cancelled
-- ones after ended_after (from finished_at), the steps of runs whose last row went, outbox rows
-- published more than published_after ago and expired events; never a live job, an unpublished
-- outbox row, or a finished job an unpublished outbox row names. One clock reading serves every
-- target of a call.
begin;
\ir fixtures/factory.sql
select plan(94);

-- local helpers (in jobs_test, so the rollback removes them) ----------------------------------

-- a job run to a finished (or waiting) state on `queue`, as in 130_operator
create function jobs_test.finished(
  state text,
  queue text,
  run_id uuid default null,
  id uuid default null,
  with_step boolean default true
)
returns uuid
language plpgsql
volatile
as $$
declare
  v_id uuid;
  v_claimed jobs.claimed_job;
begin
  v_id := jobs_test.enqueue(queue => finished.queue, run_id => finished.run_id, id => finished.id);
  v_claimed := jobs_test.claim_one(queue => finished.queue, worker_id => 'w-fin');
  if v_claimed.id is distinct from v_id then
    raise exception 'jobs_test.finished: claimed % instead of %', v_claimed.id, v_id;
  end if;
  if finished.with_step then
    perform jobs_test.record_step(v_id, v_claimed.claim, name => 'step-of-' || v_id::text,
                                  worker_id => 'w-fin');
  end if;
  if finished.state = 'done' then
    perform jobs.ack_v1(id => v_id, worker_id => 'w-fin', claim => v_claimed.claim);
  elsif finished.state = 'cancelled' then
    perform jobs.cancel(id => v_id);
  elsif finished.state = 'running' then
    null;
  else
    perform jobs.nack_v1(id => v_id, worker_id => 'w-fin', claim => v_claimed.claim,
                         next_state => finished.state, delay => interval '1 hour',
                         error => 'boom', error_code => 'E_BOOM');
  end if;
  return v_id;
end;
$$;

create function jobs_test.purged(
  done_after interval default interval '14 days',
  ended_after interval default interval '90 days',
  published_after interval default interval '7 days',
  batch_size integer default 1000
)
returns text
language sql
volatile
as $$
  select format('%s/%s/%s/%s', p.jobs, p.steps, p.outbox, p.events)
    from jobs.purge(done_after => purged.done_after, ended_after => purged.ended_after,
                    published_after => purged.published_after,
                    batch_size => purged.batch_size) p
$$;

create function jobs_test.exists(id uuid)
returns boolean
language sql
stable
as $$
  select exists (select 1 from jobs.jobs j where j.id = exists.id)
$$;

create function jobs_test.steps_of(id uuid)
returns bigint
language sql
stable
as $$
  select count(*) from jobs.steps s
   where s.run_id = (select j.run_id from jobs.jobs j where j.id = steps_of.id)
$$;

-- =============================================================================================
-- arguments

select throws_ok($$ select jobs.purge(done_after => interval '-1 second') $$, 'JQ001',
                 'X_ARGUMENT_INVALID: jobs.purge: done_after must be an interval from 00:00:00 to 100 years, got -00:00:01',
                 'a negative done_after is refused');
select throws_ok($$ select jobs.purge(ended_after => null) $$, 'JQ001',
                 'X_ARGUMENT_INVALID: jobs.purge: ended_after must be an interval from 00:00:00 to 100 years, got NULL',
                 'a null ended_after is refused');
select throws_ok($$ select jobs.purge(published_after => interval '-1 day') $$, 'JQ001',
                 'X_ARGUMENT_INVALID: jobs.purge: published_after must be an interval from 00:00:00 to 100 years, got -1 days',
                 'a negative published_after is refused');
select throws_ok($$ select jobs.purge(batch_size => 0) $$, 'JQ001',
                 'X_ARGUMENT_INVALID: jobs.purge: batch_size must be between 1 and 10000',
                 'a batch_size of 0 is refused');
select throws_ok($$ select jobs.purge(batch_size => 10001) $$, 'JQ001',
                 'X_ARGUMENT_INVALID: jobs.purge: batch_size must be between 1 and 10000',
                 'a batch_size over 10000 is refused');
select is(jobs_test.purged(), '0/0/0/0', 'an empty schema purges nothing');

-- =============================================================================================
-- the windows: every state, finished at the same moment

set local durajobs.now = '2026-01-01 00:00:00+00';
select jobs_test.finished('done', 'q-win') as w_done \gset
select jobs_test.finished('failed', 'q-win') as w_failed \gset
select jobs_test.finished('dead', 'q-win') as w_dead \gset
select jobs_test.finished('cancelled', 'q-win') as w_cancelled \gset
select jobs_test.finished('running', 'q-win') as w_running \gset
select jobs_test.finished('suspended', 'q-win') as w_suspended \gset
select jobs_test.finished('ready', 'q-win') as w_ready \gset
select jobs_test.enqueue(queue => 'q-win', run_at => '2027-01-01 00:00:00+00') as w_delayed \gset
select jobs_test.enqueue(queue => 'q-win') as w_waiting \gset

select set_config('durajobs.now', '2026-01-15 00:00:00+00', true) \g /dev/null
select is(jobs_test.purged(), '0/0/0/0', 'a done job exactly 14 days finished stays');
select jobs_test.advance(interval '1 second') \g /dev/null
select is(jobs_test.purged(), '1/1/0/0', 'past 14 days: the done job and its step go');
select ok(not jobs_test.exists(:'w_done'), 'the done job is gone');
select ok(jobs_test.exists(:'w_failed') and jobs_test.exists(:'w_dead')
          and jobs_test.exists(:'w_cancelled'),
          'failed, dead and cancelled jobs stay for their own window');
select is(jobs_test.purged(), '0/0/0/0', 'a second call finds nothing more');

select set_config('durajobs.now', '2026-04-01 00:00:01+00', true) \g /dev/null
select is(jobs_test.purged(), '3/3/0/0', 'past 90 days: failed, dead and cancelled jobs go');
select ok(not jobs_test.exists(:'w_failed') and not jobs_test.exists(:'w_dead')
          and not jobs_test.exists(:'w_cancelled'), 'the three ended jobs are gone');

select set_config('durajobs.now', '2030-01-01 00:00:00+00', true) \g /dev/null
select is(jobs_test.purged(done_after => interval '0', ended_after => interval '0'), '0/0/0/0',
          'years later, nothing live is ever purged');
select ok(jobs_test.exists(:'w_running') and jobs_test.exists(:'w_suspended')
          and jobs_test.exists(:'w_ready') and jobs_test.exists(:'w_delayed')
          and jobs_test.exists(:'w_waiting'),
          'running, suspended, ready (backing off), delayed and waiting jobs all stay');
select is(jobs_test.steps_of(:'w_running'), 1::bigint, 'a live run keeps its steps');
delete from jobs.jobs;
delete from jobs.steps;

-- =============================================================================================
-- windows chosen by the caller; a window of 0 takes everything finished before now

set local durajobs.now = '2026-02-01 00:00:00+00';
select jobs_test.finished('done', 'q-own') as o_done \gset
select jobs_test.finished('dead', 'q-own') as o_dead \gset
select jobs_test.advance(interval '2 hours') \g /dev/null
select is(jobs_test.purged(done_after => interval '3 hours', ended_after => interval '1 hour'),
          '1/1/0/0', 'the caller''s windows: a dead job past 1 hour goes');
select ok(jobs_test.exists(:'o_done') and not jobs_test.exists(:'o_dead'),
          'the done job within its 3 hours stays');
select is(jobs_test.purged(done_after => interval '0'), '1/1/0/0',
          'a window of 0 takes what finished before now');
select is(jobs_test.job_count(), 0::bigint, 'nothing left');

-- =============================================================================================
-- batches: at most batch_size jobs of each window a call, oldest finished first

set local durajobs.now = '2026-03-01 00:00:00+00';
select jobs_test.finished('done', 'q-batch') as b1 \gset
select jobs_test.advance(interval '1 minute') \g /dev/null
select jobs_test.finished('done', 'q-batch') as b2 \gset
select jobs_test.advance(interval '1 minute') \g /dev/null
select jobs_test.finished('done', 'q-batch') as b3 \gset
select jobs_test.finished('failed', 'q-batch') as b4 \gset
select jobs_test.advance(interval '100 days') \g /dev/null
select is(jobs_test.purged(batch_size => 2), '3/3/0/0',
          'batch_size 2: two done jobs and the one failed job');
select ok(not jobs_test.exists(:'b1') and not jobs_test.exists(:'b2') and jobs_test.exists(:'b3'),
          'the oldest finished go first');
select is(jobs_test.purged(batch_size => 2), '1/1/0/0', 'the next call takes the rest');
select is(jobs_test.purged(batch_size => 2), '0/0/0/0', 'and then nothing: "call until 0" ends');

-- =============================================================================================
-- steps go only with the run's last row (R73)

set local durajobs.now = '2026-05-01 00:00:00+00';
select gen_random_uuid() as shared_run \gset
select jobs_test.finished('done', 'q-run', run_id => :'shared_run') as r_old \gset
select jobs_test.finished('suspended', 'q-run', run_id => :'shared_run') as r_live \gset
select jobs_test.advance(interval '15 days') \g /dev/null
select is(jobs_test.purged(), '1/0/0/0', 'a done row of a run with a live row goes, its steps not');
select is((select count(*) from jobs.steps s where s.run_id = :'shared_run'), 2::bigint,
          'the run keeps both steps while a row of it stands');
update jobs.jobs set state = 'done', finished_at = jobs._now() - interval '15 days'
 where id = :'r_live';
select is(jobs_test.purged(), '1/2/0/0', 'the run''s last row goes with every step of the run');
select is((select count(*) from jobs.steps s where s.run_id = :'shared_run'), 0::bigint,
          'no step of the run is left');

-- a job that continues another's run (enqueued with the first job's id as its run_id): the
-- run's steps stay while either stands, found through the first job's own row, then through
-- jobs_run_shared_idx
select jobs_test.finished('done', 'q-cont') as c_first \gset
select jobs_test.advance(interval '1 day') \g /dev/null
select jobs_test.finished('done', 'q-cont', run_id => :'c_first') as c_next \gset
select is((select run_id from jobs.jobs where id = :'c_first'), :'c_first'::uuid,
          'a job enqueued without a run_id has its own id as run_id');
select jobs_test.advance(interval '14 days') \g /dev/null
select is(jobs_test.purged(), '1/0/0/0',
          'the first job goes; its run''s steps stay for the job continuing it');
select jobs_test.advance(interval '1 day') \g /dev/null
select is(jobs_test.purged(), '1/2/0/0', 'with the second job, both steps of the run go');
-- the other order: the continuing job ages first and the run's own job still stands
select jobs_test.finished('done', 'q-cont2', id => gen_random_uuid()) as d_first \gset
select jobs_test.finished('done', 'q-cont2', run_id => :'d_first') as d_next \gset
update jobs.jobs set finished_at = jobs._now() - interval '20 days' where id = :'d_next';
select is(jobs_test.purged(), '1/0/0/0',
          'the continuing job goes; the steps stay while the run''s own job stands');
select is((select count(*) from jobs.steps where run_id = :'d_first'), 2::bigint,
          'both steps of the run are still there');
delete from jobs.jobs;
delete from jobs.steps;

-- the default run_id everywhere a job is made
select jobs_test.enqueue(queue => 'q-rid') as rid \gset
select is((select run_id from jobs.jobs where id = :'rid'), :'rid'::uuid,
          'jobs.enqueue: a run_id not given is the job''s id');
select ok((select bool_and(r.run_id = r.id)
             from jobs.enqueue_many('[{"name": "r", "input": {}, "idempotency_key": "rid-1"},
                                      {"name": "r", "input": {}, "idempotency_key": "rid-2",
                                       "id": "01900000-0000-7000-8000-0000000000aa"}]') r),
          'jobs.enqueue_many: a run_id not given is the job''s id, made or given');
select ok((select s.run_id = s.id
             from jobs.outbox_stage(name => 'r', input => '{}', idempotency_key => 'rid-3') s),
          'jobs.outbox_stage: a run_id not given is the staged row''s (the job''s) id');
select is((select count(*) from jobs.jobs where run_id <> id), 0::bigint,
          'so no job made without a run_id is in jobs_run_shared_idx');
delete from jobs.jobs;
delete from jobs.outbox;

-- =============================================================================================
-- the outbox (item 113): published rows after their window; never an unpublished one, nor a job
-- an unpublished row names

set local durajobs.now = '2026-06-01 00:00:00+00';
select (jobs.outbox_stage(name => 'ob', input => '{}', idempotency_key => 'ob-pub',
                          queue => 'q-ob')).id as ob_pub \gset
select count(*) from jobs.outbox_relay('relay-1') \g /dev/null
select (jobs.outbox_stage(name => 'ob', input => '{}', idempotency_key => 'ob-unmarked',
                          queue => 'q-ob')).id as ob_unmarked \gset
-- the relay published the second one and stopped before marking it
select (jobs._publish(r)).id from jobs.outbox_claim('relay-2', 1) r \g /dev/null
select (jobs.outbox_stage(name => 'ob', input => '{}', idempotency_key => 'ob-waiting',
                          queue => 'q-ob')).id as ob_waiting \gset
select is((select count(*) from jobs.jobs where queue = 'q-ob'), 2::bigint,
          'two of the three staged rows were published as jobs');
-- run both jobs to done
select jobs_test.claim_one(queue => 'q-ob', worker_id => 'w-ob') as ob_c1 \gset
select jobs.ack_v1(id => (:'ob_c1'::jobs.claimed_job).id, worker_id => 'w-ob',
                   claim => (:'ob_c1'::jobs.claimed_job).claim) \g /dev/null
select jobs_test.claim_one(queue => 'q-ob', worker_id => 'w-ob') as ob_c2 \gset
select jobs.ack_v1(id => (:'ob_c2'::jobs.claimed_job).id, worker_id => 'w-ob',
                   claim => (:'ob_c2'::jobs.claimed_job).claim) \g /dev/null

select jobs_test.advance(interval '7 days') \g /dev/null
select is(jobs_test.purged(), '0/0/0/0', 'a row published exactly 7 days ago stays');
select jobs_test.advance(interval '8 days') \g /dev/null
select is(jobs_test.purged(), '1/0/1/0',
          'past the windows: the marked row and its done job go');
select ok(not jobs_test.exists(:'ob_pub')
          and not exists (select 1 from jobs.outbox where id = :'ob_pub'),
          'the published row and its job are gone');
select ok(jobs_test.exists(:'ob_unmarked'),
          'a done job an unpublished outbox row names stays, to meet the next publish');
select is((select count(*) from jobs.outbox where published_at is null), 2::bigint,
          'unpublished rows are never purged');
-- the relay comes back: the publish meets the job, which does not run again
select is((select bool_and(r.deduped) from jobs.outbox_relay('relay-3') r
            where r.id = :'ob_unmarked'), true,
          'the re-publish meets the kept job (deduped), so it does not run twice');
select is((select state from jobs.jobs where id = :'ob_unmarked'), 'done',
          'the kept job is still done');
select jobs_test.advance(interval '8 days') \g /dev/null
select is(jobs_test.purged(), '1/0/2/0',
          'once marked and past the window, the row and then its job go');

-- =============================================================================================
-- events (item 134): expired ones go

set local durajobs.now = '2026-08-01 00:00:00+00';
select jobs.publish_event(name => 'ev', ttl => interval '1 hour') as ev_short \gset
select jobs.publish_event(name => 'ev', ttl => interval '7 days') as ev_long \gset
select jobs_test.advance(interval '1 hour') \g /dev/null
select is(jobs_test.purged(), '0/0/0/1', 'an event at its expiry goes');
select is(array(select id from jobs.events), array[:'ev_long'::uuid], 'the other stays');

-- =============================================================================================
-- one clock reading a call (item 183, R71): every target measures its window from the same
-- instant, the caller's clock (here the test clock, months behind the server's), never the
-- server's now(). A target that read now() would delete the rows below that are live on the
-- caller's clock: all of them are past every window by the server's.

delete from jobs.jobs;
delete from jobs.steps;
delete from jobs.events;
delete from jobs.outbox;
set local durajobs.now = '2026-03-01 00:00:00+00';
select jobs_test.finished('done', 'q-clock') as ck_done_old \gset
select jobs_test.finished('dead', 'q-clock') as ck_dead_old \gset
select (jobs.outbox_stage(name => 'ob', input => '{}', idempotency_key => 'ck-old',
                          queue => 'q-clock-ob')).id as ck_ob_old \gset
select count(*) from jobs.outbox_relay('relay-ck') \g /dev/null
select jobs.publish_event(name => 'ev', ttl => interval '90 days') as ck_ev_old \gset
select jobs_test.advance(interval '1 day') \g /dev/null
select jobs_test.finished('done', 'q-clock') as ck_done_new \gset
select jobs_test.finished('dead', 'q-clock') as ck_dead_new \gset
select (jobs.outbox_stage(name => 'ob', input => '{}', idempotency_key => 'ck-new',
                          queue => 'q-clock-ob')).id as ck_ob_new \gset
select count(*) from jobs.outbox_relay('relay-ck') \g /dev/null
select jobs.publish_event(name => 'ev', ttl => interval '90 days') as ck_ev_new \gset
-- 90 days and 12 hours after the first rows, 89 days and 12 hours after the second
select set_config('durajobs.now', '2026-05-30 12:00:00+00', true) \g /dev/null

select is(jobs_test.purged(done_after => interval '90 days', ended_after => interval '90 days',
                           published_after => interval '90 days'),
          '2/2/1/1', 'one call: each target removes just its row past the window on one clock');
select ok(not jobs_test.exists(:'ck_done_old') and not jobs_test.exists(:'ck_dead_old')
          and not exists (select 1 from jobs.outbox where id = :'ck_ob_old')
          and not exists (select 1 from jobs.events where id = :'ck_ev_old'),
          'the four rows past the window are gone');
select ok(jobs_test.exists(:'ck_done_new') and jobs_test.exists(:'ck_dead_new')
          and jobs_test.steps_of(:'ck_done_new') = 1 and jobs_test.steps_of(:'ck_dead_new') = 1
          and exists (select 1 from jobs.outbox where id = :'ck_ob_new')
          and exists (select 1 from jobs.events where id = :'ck_ev_new'),
          'the rows inside the window on the caller''s clock stay, though the server''s has passed it');

-- =============================================================================================
-- what a call reads: the done window never walks the failed and dead rows kept for 90 days, and
-- asking whether a run with steps has a row left is two index probes, not a read of the table

-- (a year before every other file's clock: rows those files made and rolled back leave index
-- entries that every scan still returns until a vacuum, and none of them is older than this)
set local durajobs.now = '2025-01-01 00:00:00+00';
delete from jobs.jobs;
delete from jobs.steps;
delete from jobs.events;
select count(jobs_test.finished('dead', 'q-read')) from generate_series(1, 200) \g /dev/null
select jobs_test.advance(interval '30 days') \g /dev/null
select jobs_test.finished('done', 'q-read') as rd_done \gset
select jobs_test.advance(interval '15 days') \g /dev/null
analyze jobs.jobs_live, jobs.jobs_history;
-- a table of 201 rows is one the planner may rather scan whole for the delete by id; at any
-- size that matters it never would, and what this checks is the windows' and probes' reads
set local enable_seqscan = off;
-- the orphan sweep's walk (below) is measured on its own: here it starts past the last run
update jobs.purge_cursor set steps_after = 'ffffffff-ffff-ffff-ffff-ffffffffffff';
select jobs_test.mark();
select is(jobs_test.purged(), '1/1/0/0',
          'the one done job of age goes with its step, the 200 dead stay');
select cmp_ok(jobs_test.read_since_mark(), '<', 50::bigint,
              'the call read a handful of index entries, not the 200 dead rows nor the table');
reset enable_seqscan;
select is((select count(*) from jobs.jobs where state = 'dead'), 200::bigint,
          'every dead row is still there');

-- jobs.remove and jobs.remove_many find a run's rows the same way (jobs._run_stands)
select jobs_test.finished('done', 'q-read') as rm_one \gset
select jobs_test.mark();
select ok(jobs.remove(:'rm_one'), 'remove answers true');
select cmp_ok(jobs_test.read_since_mark(), '<', 50::bigint,
              'a remove of a job with a step reads a handful of entries, not the table');
select is((select count(*) from jobs.steps where run_id = :'rm_one'), 0::bigint,
          'its run''s step went with it');
select jobs_test.finished('done', 'q-rm-many') as rm_many \gset
select jobs_test.mark();
select is((jobs.remove_many(state => 'done', queue => 'q-rm-many')).affected, 1,
          'remove_many removes the one done job of its queue');
select cmp_ok(jobs_test.read_since_mark(), '<', 100::bigint,
              'remove_many reads its batch and the count of what is left, not the table');
select is((select count(*) from jobs.steps where run_id = :'rm_many'), 0::bigint,
          'and its run''s step');

-- =============================================================================================
-- a day of done jobs goes whole: its partition is dropped, not its rows deleted one by one

set local durajobs.now = '2027-03-01 12:00:00+00';
delete from jobs.jobs;
delete from jobs.steps;
delete from jobs.outbox;
select throws_ok($$ select jobs.prepare_history(days => 32) $$, 'JQ001',
                 'X_ARGUMENT_INVALID: jobs.prepare_history: days must be between 0 and 31',
                 'prepare_history refuses more than 31 days ahead');
select is(jobs.prepare_history(), 3, 'prepare_history makes the partitions of today and the next two days');
select is(jobs.prepare_history(), 0, 'a second call makes none');
select jobs_test.finished('done', 'q-day') as day_a \gset
select jobs_test.finished('done', 'q-day') as day_b \gset
select jobs_test.finished('dead', 'q-day') as day_dead \gset
select is((select tableoid::regclass::text from jobs.jobs_history where id = :'day_a'),
          'jobs.jobs_history_done_p20270301', 'a job done today is kept in today''s partition');
select is((select tableoid::regclass::text from jobs.jobs_history where id = :'day_dead'),
          'jobs.jobs_history_ended', 'a dead job is kept with the ended rows');

-- the window is measured from the end of the day: rows done at noon wait for the whole day
select set_config('durajobs.now', '2027-03-15 23:59:59+00', true) \g /dev/null
select is(jobs_test.purged(), '0/0/0/0',
          'rows past their window in a day not yet wholly past it stay, not deleted one by one');
select jobs_test.advance(interval '1 second') \g /dev/null
select is(jobs_test.purged(), '2/2/0/0', 'once the day is past the window, its jobs and their steps go');
select ok(to_regclass('jobs.jobs_history_done_p20270301') is null,
          'by dropping the day''s partition');
select ok(not jobs_test.exists(:'day_a') and not jobs_test.exists(:'day_b'), 'so are its jobs');
select ok(jobs_test.exists(:'day_dead'), 'the dead job stays for its own window');
select is(jobs_test.purged(), '0/0/0/0', 'a second call finds nothing more');

-- a day holding a job an unpublished outbox row names: the partition stays, its other rows go
select set_config('durajobs.now', '2027-05-01 08:00:00+00', true) \g /dev/null
select jobs.prepare_history(days => 0) \g /dev/null
select jobs_test.finished('done', 'q-day') as day_kept \gset
select jobs_test.finished('done', 'q-day') as day_other \gset
-- the row its relay published and did not mark
insert into jobs.outbox (id, run_id, staged_at, request)
values (:'day_kept', :'day_kept', jobs._now(), '{}');
select set_config('durajobs.now', '2027-05-20 00:00:00+00', true) \g /dev/null
select is(jobs_test.purged(), '1/1/0/0', 'a day with an awaited job loses its other rows');
select ok(jobs_test.exists(:'day_kept') and not jobs_test.exists(:'day_other'),
          'the job the outbox row names stays');
select ok(to_regclass('jobs.jobs_history_done_p20270501') is not null, 'and so does its partition');
select is(jobs_test.purged(), '0/0/0/0', 'a second call leaves it');
update jobs.outbox set published_at = jobs._now() where id = :'day_kept';
select is(jobs_test.purged(), '1/1/0/0', 'once the row is published, the day goes');
select ok(to_regclass('jobs.jobs_history_done_p20270501') is null, 'partition and all');

-- =============================================================================================
-- the orphan sweep (Q185): steps whose run has no row left go, batch_size runs a call from where
-- the last call stopped; a standing run's steps stay

delete from jobs.steps;
update jobs.purge_cursor set steps_after = null;
select jobs_test.enqueue(queue => 'sweep', idempotency_key => 'sweep-kept') as kept_id \gset
insert into jobs.steps (run_id, name, status, attempts, started_at, updated_at)
values ('00000000-0000-7000-8000-000000000001', 'lost-1', 'completed', 1, jobs._now(), jobs._now()),
       ('00000000-0000-7000-8000-000000000001', 'lost-2', 'completed', 1, jobs._now(), jobs._now()),
       ('00000000-0000-7000-8000-000000000002', 'lost-3', 'completed', 1, jobs._now(), jobs._now()),
       (:'kept_id', 'kept', 'completed', 1, jobs._now(), jobs._now());

select is((jobs.purge(batch_size => 1)).steps, 2, 'a call of batch 1 sweeps the first run''s two orphan steps');
select is((select steps_after from jobs.purge_cursor), '00000000-0000-7000-8000-000000000001'::uuid,
          'and the cursor stands after it');
select is((jobs.purge(batch_size => 1)).steps, 1, 'the next call sweeps the next run');
select is((jobs.purge(batch_size => 1)).steps, 0, 'a standing run''s steps are not orphans');
select is((select count(*)::integer from jobs.steps where name = 'kept'), 1,
          'the live job''s step stays');
select is((jobs.purge(batch_size => 1)).steps, 0, 'a call past the last run sweeps nothing');
select is((select steps_after from jobs.purge_cursor), null,
          'and the next starts again from the first run');
select is((select count(*)::integer from jobs.steps), 1, 'only the standing run''s step is left');

-- R92: by default a published outbox row goes before the job it made (7 days, then 14), so no
-- outbox row outlives its job: a re-publish always meets the job and dedupes onto it
select cmp_ok(
  substring(pg_get_function_arguments('jobs.purge'::regproc)
            from $r$published_after interval DEFAULT '([^']+)'$r$)::interval,
  '<',
  substring(pg_get_function_arguments('jobs.purge'::regproc)
            from $r$done_after interval DEFAULT '([^']+)'$r$)::interval,
  'R92: the default outbox window is shorter than the default done window');

-- =============================================================================================
-- the indexes the purge walks

select is((select indexdef from pg_indexes where indexname = 'jobs_done_idx'),
          'CREATE INDEX jobs_done_idx ON jobs.jobs_history_done_default USING btree (finished_at)',
          'the done rows of the default partition are indexed by finished_at');
select is((select indexdef from pg_indexes where indexname = 'jobs_ended_idx'),
          'CREATE INDEX jobs_ended_idx ON jobs.jobs_history_ended USING btree (finished_at)',
          'failed, dead and cancelled rows by finished_at, in their own partition');
select is((select indexdef from pg_indexes where indexname = 'jobs_run_shared_idx'),
          'CREATE INDEX jobs_run_shared_idx ON jobs.jobs_live USING btree (run_id) WHERE (run_id <> id)',
          'the live jobs continuing another''s run, by run');
select is((select indexdef from pg_indexes where indexname = 'jobs_history_run_shared_idx'),
          'CREATE INDEX jobs_history_run_shared_idx ON ONLY jobs.jobs_history USING btree (run_id) WHERE (run_id <> id)',
          'the finished jobs continuing another''s run, by run');

-- R104: the starts a rate counted for tenants that went quiet are swept past their window, and
-- webhook attempts past ended_after; nothing newer
select jobs.set_limit(every_tenant => true, rate => 5, per => interval '1 minute');
select id as rate_rule from jobs.limit_rules where every_tenant and rate = 5 \gset
insert into jobs.limit_starts (rule_id, tenant_id, started_at)
select :rate_rule, 't' || g, jobs._now() - interval '2 minutes' from generate_series(1, 30) g;
insert into jobs.limit_starts (rule_id, tenant_id, started_at)
values (:rate_rule, 'recent', jobs._now() - interval '10 seconds');
insert into jobs.webhook_attempts (webhook, tenant_key, endpoint_id, event_id, topic, job_id,
                                   attempt, outcome, at)
values ('h', '', 'ep', 'old', 't', gen_random_uuid(), 1, 'failed', jobs._now() - interval '91 days'),
       ('h', '', 'ep', 'new', 't', gen_random_uuid(), 1, 'delivered',
        jobs._now() - interval '1 day');
select jobs.purge(batch_size => 20);
select is((select count(*)::int from jobs.limit_starts where rule_id = :rate_rule), 11,
          'a purge sweeps a batch of the starts past their rule''s window');
select jobs.purge(batch_size => 20);
select is(array(select tenant_id from jobs.limit_starts where rule_id = :rate_rule), array['recent'],
          'the next sweeps the rest, never a start inside the window');
select is(array(select event_id from jobs.webhook_attempts where webhook = 'h'), array['new'],
          'webhook attempts go after ended_after, the newer stay');
select is((select count(*)::int from jobs.limit_rules where id = :rate_rule), 1,
          'the rule itself stays');

select * from finish();
rollback;
