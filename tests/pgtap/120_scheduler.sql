-- 120_scheduler: cron tasks fire once per occurrence. The task row's watermark is the fence
-- (a second or racing fire of one occurrence enqueues nothing, R50), it rides the fire so
-- run-once passes the dropped occurrences (R49), arming keeps it across restarts, and
-- leadership is a lease row with an expiry, never a session lock (R51, R55, R98).
begin;
\ir fixtures/factory.sql
select plan(118);

set local durajobs.now = '2026-01-01 10:00:00+00';
-- the session's zone is not UTC, so an occurrence key written in local time would show
set local timezone = 'Asia/Kolkata';

-- ---------------------------------------------------------------------------------------------
-- arm: a new task starts at the given watermark; an armed one keeps its own

select is(jobs.scheduler_arm(task => 'nightly', watermark => '2026-01-01 00:00:00+00'),
          row('nightly', '2026-01-01 00:00:00+00'::timestamptz, null::timestamptz,
              null::timestamptz, false)::jobs.task_state,
          'arm registers a new task at the given watermark and answers its task_state');
select is((jobs.scheduler_arm(task => 'nightly', watermark => '2026-01-01 09:00:00+00')).watermark,
          '2026-01-01 00:00:00+00'::timestamptz,
          'arming again answers the stored watermark, not the one passed');
select is((select watermark from jobs.scheduler_tasks where task = 'nightly'),
          '2026-01-01 00:00:00+00'::timestamptz,
          'arming again keeps the stored watermark, so a restart catches up from it');
select is((select count(*) from jobs.scheduler_tasks where task = 'nightly'), 1::bigint,
          'arming again adds no second row');
select is((select last_fired_at from jobs.scheduler_tasks where task = 'nightly'), null,
          'arming records no fire');

select throws_ok($$select jobs.scheduler_arm(task => '  ', watermark => '2026-01-01 00:00:00+00')$$,
                 'JQ001', null, 'arm with a blank task raises JQ001');
select throws_ok($$select jobs.scheduler_arm(task => null, watermark => '2026-01-01 00:00:00+00')$$,
                 'JQ001', null, 'arm with a NULL task raises JQ001');
select throws_ok($$select jobs.scheduler_arm(task => 'a-null', watermark => null)$$,
                 'JQ001', null, 'arm with a NULL watermark raises JQ001');
select throws_ok($$select jobs.scheduler_arm(task => 'a-inf', watermark => 'infinity')$$,
                 'JQ001', null, 'arm with an infinite watermark raises JQ001');
select throws_ok($$select jobs.scheduler_arm(task => 'a-inf', watermark => '-infinity')$$,
                 'JQ001', null, 'arm with a -infinite watermark raises JQ001');
select is((select count(*) from jobs.scheduler_tasks where task in ('a-null', 'a-inf')), 0::bigint,
          'a refused arm registers nothing');

-- ---------------------------------------------------------------------------------------------
-- fire: watermark, jobs with occurrence-scoped keys and the fire record, in one call

-- a manual enqueue of the same entry holds the bare key; the scheduled fire must not dedupe to it
select jobs_test.enqueue(name => 'report', idempotency_key => 'k1', queue => 'q-sched') as manual_id \gset
select jobs_test.job_count() as jobs_before_fire \gset
select jobs_test.advance(interval '5 minutes') \g /dev/null

create temporary table fire_1 on commit drop as
  select f.ord, f.id, f.run_id, f.deduped
    from jobs.scheduler_fire(task => 'nightly', occurrence => '2026-01-01 09:30:00+00',
                             requests => $$[
      {"name": "report", "input": {"n": 1}, "idempotency_key": "k1", "queue": "q-sched"},
      {"name": "report", "input": {"n": 2}, "idempotency_key": "k2", "queue": "q-sched"},
      {"name": "report", "input": {"n": 3}, "idempotency_key": "k1", "queue": "q-sched"}
    ]$$) with ordinality as f(id, run_id, deduped, ord);

select results_eq(
  $$select ord, deduped from fire_1 order by ord$$,
  $$values (1::bigint, false), (2, false), (3, true)$$,
  'fire answers one (id, run_id, deduped) per request, in request order');
select results_eq(
  $$select f.ord, j.idempotency_key, j.input from fire_1 f join jobs.jobs j on j.id = f.id order by f.ord$$,
  $$values (1::bigint, 'nightly@2026-01-01T09:30:00Z:k1', '{"n": 1}'::jsonb),
           (2, 'nightly@2026-01-01T09:30:00Z:k2', '{"n": 2}'::jsonb),
           (3, 'nightly@2026-01-01T09:30:00Z:k1', '{"n": 1}'::jsonb)$$,
  'the stored keys are <task>@<occurrence in UTC>:<key>, and each answer names its request''s job');
select is((select count(*) from fire_1 f join jobs.jobs j on j.id = f.id and j.run_id = f.run_id),
          3::bigint, 'fire answers each job''s run_id');
select results_eq(
  $$select j.name, j.queue, j.state from fire_1 f join jobs.jobs j on j.id = f.id order by f.ord$$,
  $$values ('report', 'q-sched', 'ready'), ('report', 'q-sched', 'ready'), ('report', 'q-sched', 'ready')$$,
  'the fired jobs carry the requests'' fields');
select is((select count(*) from fire_1 where id = :'manual_id'), 0::bigint,
          'the scheduled key is distinct from a manual enqueue''s bare key');
select is(jobs_test.job_count(), (:jobs_before_fire + 2)::bigint, 'the fire inserted one row per distinct key');
select is((jobs_test.job(:'manual_id')).idempotency_key, 'k1', 'the manual job keeps its own key');
select is((select watermark from jobs.scheduler_tasks where task = 'nightly'),
          '2026-01-01 09:30:00+00'::timestamptz, 'fire moves the watermark to the occurrence');
select is((select last_fired_occurrence from jobs.scheduler_tasks where task = 'nightly'),
          '2026-01-01 09:30:00+00'::timestamptz, 'fire records the occurrence as the last fire');
select is((select last_fired_at from jobs.scheduler_tasks where task = 'nightly'),
          '2026-01-01 10:05:00+00'::timestamptz, 'fire records last_fired_at = jobs._now()');
select is((jobs.scheduler_arm(task => 'nightly', watermark => '2026-01-01 10:05:00+00')),
          row('nightly', '2026-01-01 09:30:00+00'::timestamptz, '2026-01-01 09:30:00+00'::timestamptz,
              '2026-01-01 10:05:00+00'::timestamptz, false)::jobs.task_state,
          'arming a fired task answers its watermark and last fire');

-- R50: a second fire of the same occurrence (a retry, another node) is fenced
select jobs_test.advance(interval '1 minute') \g /dev/null
select jobs_test.job_count() as jobs_before_refire \gset
select is(
  (select count(*) from jobs.scheduler_fire(task => 'nightly', occurrence => '2026-01-01 09:30:00+00',
                                            requests => $$[
     {"name": "report", "input": {"n": 1}, "idempotency_key": "k1", "queue": "q-sched"},
     {"name": "report", "input": {"n": 4}, "idempotency_key": "k3", "queue": "q-sched"}
   ]$$)),
  0::bigint, 'a second fire of the same occurrence answers nothing (R50)');
select is(jobs_test.job_count(), :jobs_before_refire::bigint,
          'a second fire of the same occurrence enqueues nothing, even a request the first lacked');
select is((select count(*) from jobs.jobs where idempotency_key = 'nightly@2026-01-01T09:30:00Z:k3'),
          0::bigint, 'no job holds the refused request''s key');
select results_eq(
  $$select watermark, last_fired_occurrence, last_fired_at from jobs.scheduler_tasks where task = 'nightly'$$,
  $$values ('2026-01-01 09:30:00+00'::timestamptz, '2026-01-01 09:30:00+00'::timestamptz,
            '2026-01-01 10:05:00+00'::timestamptz)$$,
  'a second fire leaves the watermark and the last fire unchanged');

-- an occurrence before the watermark is fenced too, and never moves it back
select is(
  (select count(*) from jobs.scheduler_fire(task => 'nightly', occurrence => '2026-01-01 09:00:00+00',
                                            requests => '[{"name": "report", "input": {}, "idempotency_key": "k1"}]')),
  0::bigint, 'a fire for an occurrence before the watermark answers nothing');
select is((select count(*) from jobs.jobs where idempotency_key like 'nightly@2026-01-01T09:00:00Z:%'),
          0::bigint, 'a fire for an occurrence before the watermark enqueues nothing');
select results_eq(
  $$select watermark, last_fired_occurrence, last_fired_at from jobs.scheduler_tasks where task = 'nightly'$$,
  $$values ('2026-01-01 09:30:00+00'::timestamptz, '2026-01-01 09:30:00+00'::timestamptz,
            '2026-01-01 10:05:00+00'::timestamptz)$$,
  'a fire for an earlier occurrence does not move the watermark back or record a fire');

-- an occurrence equal to an armed watermark has been passed already
select jobs.scheduler_arm(task => 'at-mark', watermark => '2026-01-01 09:00:00+00') \g /dev/null
select is(
  (select count(*) from jobs.scheduler_fire(task => 'at-mark', occurrence => '2026-01-01 09:00:00+00',
                                            requests => '[{"name": "m", "input": {}, "idempotency_key": "k"}]')),
  0::bigint, 'a fire for the occurrence at the watermark answers nothing');
select is((select count(*) from jobs.jobs where idempotency_key like 'at-mark@%'), 0::bigint,
          'a fire for the occurrence at the watermark enqueues nothing');
select is((select last_fired_occurrence from jobs.scheduler_tasks where task = 'at-mark'), null,
          'a fire for the occurrence at the watermark records no fire');

-- the next occurrence fires again, under its own keys
select is(
  (select count(*) from jobs.scheduler_fire(task => 'nightly', occurrence => '2026-01-02 09:30:00+00',
                                            requests => '[{"name": "report", "input": {}, "idempotency_key": "k1", "queue": "q-sched"}]')),
  1::bigint, 'the next occurrence fires');
select is((select count(*) from jobs.jobs where idempotency_key = 'nightly@2026-01-02T09:30:00Z:k1'),
          1::bigint, 'the next occurrence''s job holds its own occurrence-scoped key');

-- R49: run-once fires the earliest missed occurrence and its watermark passes the dropped ones
select jobs.scheduler_arm(task => 'hourly', watermark => '2025-12-31 10:00:00+00') \g /dev/null
select is(
  (select count(*) from jobs.scheduler_fire(task => 'hourly', occurrence => '2025-12-31 11:00:00+00',
                                            requests => '[{"name": "tick", "input": {}, "idempotency_key": "h"}]',
                                            watermark => '2026-01-01 10:00:00+00')),
  1::bigint, 'run-once fires the earliest missed occurrence');
select results_eq(
  $$select watermark, last_fired_occurrence from jobs.scheduler_tasks where task = 'hourly'$$,
  $$values ('2026-01-01 10:00:00+00'::timestamptz, '2025-12-31 11:00:00+00'::timestamptz)$$,
  'the watermark rides the fire past the dropped occurrences; the fire records the occurrence (R49)');
select is((select idempotency_key from jobs.jobs where idempotency_key like 'hourly@%'),
          'hourly@2025-12-31T11:00:00Z:h', 'the run-once job is keyed by the occurrence, not the watermark');
select is(
  (select count(*) from jobs.scheduler_fire(task => 'hourly', occurrence => '2025-12-31 12:00:00+00',
                                            requests => '[{"name": "tick", "input": {}, "idempotency_key": "h"}]')),
  0::bigint, 'a dropped occurrence does not fire afterwards');
select is(
  (select count(*) from jobs.scheduler_fire(task => 'hourly', occurrence => '2026-01-01 11:00:00+00',
                                            requests => '[{"name": "tick", "input": {}, "idempotency_key": "h"}]')),
  1::bigint, 'the next real occurrence fires');
select is((select count(*) from jobs.jobs where idempotency_key like 'hourly@%'), 2::bigint,
          'run-once after a day down: two fires in all, not one per missed hour');

-- an unknown (unarmed) task fires nothing
select jobs_test.job_count() as jobs_before_ghost \gset
select is(
  (select count(*) from jobs.scheduler_fire(task => 'ghost', occurrence => '2026-01-01 09:30:00+00',
                                            requests => '[{"name": "g", "input": {}, "idempotency_key": "g"}]')),
  0::bigint, 'a fire of an unarmed task answers nothing');
select is(jobs_test.job_count(), :jobs_before_ghost::bigint, 'a fire of an unarmed task enqueues nothing');
select is((select count(*) from jobs.scheduler_tasks where task = 'ghost'), 0::bigint,
          'a fire of an unarmed task does not arm it');

-- a paused task: it fires nothing and keeps its watermark, so on resume what it missed is owed
-- (which of it fires is the catch-up policy's, applied by the scheduler as after an outage)
select jobs.scheduler_arm(task => 'paused-task', watermark => '2026-01-01 09:00:00+00') \g /dev/null
select jobs.pause_task(task => 'paused-task') \g /dev/null
select jobs_test.job_count() as jobs_before_paused \gset
select is(
  (select count(*) from jobs.scheduler_fire(task => 'paused-task', occurrence => '2026-01-01 09:30:00+00',
                                            requests => '[{"name": "p", "input": {}, "idempotency_key": "p"}]')),
  0::bigint, 'a paused task''s fire answers nothing');
select is(jobs_test.job_count(), :jobs_before_paused::bigint, 'a paused task''s fire enqueues nothing');
select results_eq(
  $$select watermark, last_fired_occurrence, last_fired_at from jobs.scheduler_tasks where task = 'paused-task'$$,
  $$values ('2026-01-01 09:00:00+00'::timestamptz, null::timestamptz, null::timestamptz)$$,
  'a paused task''s fire keeps its watermark and records no fire');
select is(jobs.scheduler_skip(task => 'paused-task', watermark => '2026-01-01 10:00:00+00'), false,
          'a skip does not move a paused task''s watermark either');
select jobs.resume_task(task => 'paused-task') \g /dev/null
select is(
  (select count(*) from jobs.scheduler_fire(task => 'paused-task', occurrence => '2026-01-01 09:30:00+00',
                                            requests => '[{"name": "p", "input": {}, "idempotency_key": "p"}]')),
  1::bigint, 'after a resume the occurrence missed while paused is owed and fires');
select is(
  (select count(*) from jobs.scheduler_fire(task => 'paused-task', occurrence => '2026-01-01 10:00:00+00',
                                            requests => '[{"name": "p", "input": {}, "idempotency_key": "p"}]')),
  1::bigint, 'a resumed task fires its next occurrence');

-- validation: nothing moves when a fire is refused
select jobs.scheduler_arm(task => 'strict', watermark => '2026-01-01 09:00:00+00') \g /dev/null
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'strict', occurrence => '2026-01-01 09:30:00+00',
                                      requests => '[]', watermark => '2026-01-01 09:15:00+00')$$,
  'JQ001', null, 'a watermark before the occurrence raises JQ001');
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'strict', occurrence => '2026-01-01 09:30:00+00',
                                      requests => '{"name": "s", "input": {}, "idempotency_key": "s"}')$$,
  'JQ001', null, 'a requests object (not an array) raises JQ001');
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'strict', occurrence => '2026-01-01 09:30:00+00',
                                      requests => null)$$,
  'JQ001', null, 'NULL requests raise JQ001');
select throws_ok(
  $$select * from jobs.scheduler_fire(task => ' ', occurrence => '2026-01-01 09:30:00+00')$$,
  'JQ001', null, 'fire with a blank task raises JQ001');
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'strict', occurrence => 'infinity')$$,
  'JQ001', null, 'fire with an infinite occurrence raises JQ001');
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'strict', occurrence => null)$$,
  'JQ001', null, 'fire with a NULL occurrence raises JQ001');

-- bad requests raise what enqueue_many raises, and the whole call rolls back
select jobs_test.job_count() as jobs_before_bad \gset
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'strict', occurrence => '2026-01-01 09:30:00+00',
                                      requests => '[{"name": "s", "input": {}, "idempotency_key": "s1"},
                                                    {"name": "s", "input": [1], "idempotency_key": "s2"}]')$$,
  'JQ002', null, 'a request with a non-object input raises X_JOB_INPUT_INVALID');
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'strict', occurrence => '2026-01-01 09:30:00+00',
                                      requests => '[{"name": "", "input": {}, "idempotency_key": "s1"}]')$$,
  'JQ001', null, 'a request with a blank name raises X_ARGUMENT_INVALID');
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'strict', occurrence => '2026-01-01 09:30:00+00',
                                      requests => '[{"name": "s", "input": {}, "idempotency_key": "s1", "colour": "red"}]')$$,
  'JQ001', null, 'a request with an unknown field raises X_ARGUMENT_INVALID');
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'strict', occurrence => '2026-01-01 09:30:00+00',
                                      requests => '["not a request"]')$$,
  'JQ001', null, 'a request that is not an object raises X_ARGUMENT_INVALID');
select results_eq(
  $$select watermark, last_fired_occurrence, last_fired_at from jobs.scheduler_tasks where task = 'strict'$$,
  $$values ('2026-01-01 09:00:00+00'::timestamptz, null::timestamptz, null::timestamptz)$$,
  'a refused fire leaves the watermark and the last fire as they were');
select is(jobs_test.job_count(), :jobs_before_bad::bigint, 'a refused fire enqueues nothing');

-- a request without an idempotency key must raise X_IDEMPOTENCY_REQUIRED as enqueue_many does,
-- not be stored under the bare occurrence prefix '<task>@<occurrence>:'
select jobs.scheduler_arm(task => 'keyless', watermark => '2026-01-01 09:00:00+00') \g /dev/null
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'keyless', occurrence => '2026-01-01 09:30:00+00',
                                      requests => '[{"name": "nokey", "input": {}}]')$$,
  'JQ003', null, 'a request without an idempotency_key raises X_IDEMPOTENCY_REQUIRED');
select throws_ok(
  $$select * from jobs.scheduler_fire(task => 'keyless', occurrence => '2026-01-01 09:45:00+00',
                                      requests => '[{"name": "nokey", "input": {}, "idempotency_key": "  "}]')$$,
  'JQ003', null, 'a request with a blank idempotency_key raises X_IDEMPOTENCY_REQUIRED');
select is((select watermark from jobs.scheduler_tasks where task = 'keyless'),
          '2026-01-01 09:00:00+00'::timestamptz, 'a keyless request leaves the watermark unmoved');
select is((select count(*) from jobs.jobs where name = 'nokey'), 0::bigint,
          'a keyless request enqueues nothing');

-- ---------------------------------------------------------------------------------------------
-- skip: forward only, without a fire

select jobs.scheduler_arm(task => 'skipper', watermark => '2026-01-01 09:00:00+00') \g /dev/null
select is(jobs.scheduler_skip(task => 'skipper', watermark => '2026-01-01 09:30:00+00'), true,
          'skip forward answers true');
select is((select watermark from jobs.scheduler_tasks where task = 'skipper'),
          '2026-01-01 09:30:00+00'::timestamptz, 'skip moves the watermark forward');
select is((select last_fired_occurrence from jobs.scheduler_tasks where task = 'skipper'), null,
          'skip records no fire');
select is(jobs.scheduler_skip(task => 'skipper', watermark => '2026-01-01 09:15:00+00'), false,
          'skip back answers false');
select is((select watermark from jobs.scheduler_tasks where task = 'skipper'),
          '2026-01-01 09:30:00+00'::timestamptz, 'skip never moves the watermark back');
select is(jobs.scheduler_skip(task => 'skipper', watermark => '2026-01-01 09:30:00+00'), false,
          'skip to the watermark itself answers false');
select is(jobs.scheduler_skip(task => 'ghost', watermark => '2026-01-01 09:30:00+00'), false,
          'skip of an unarmed task answers false');
select is((select count(*) from jobs.scheduler_tasks where task = 'ghost'), 0::bigint,
          'skip does not arm an unknown task');
select throws_ok($$select jobs.scheduler_skip(task => 'skipper', watermark => null)$$,
                 'JQ001', null, 'skip to a NULL watermark raises JQ001');
select throws_ok($$select jobs.scheduler_skip(task => 'skipper', watermark => 'infinity')$$,
                 'JQ001', null, 'skip to an infinite watermark raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- lead / resign: one holder per lease name, until its expiry (R51, R55, R98)

set local durajobs.now = '2026-01-01 12:00:00+00';

select is(jobs.scheduler_lead(holder => 'node-a'), true, 'the first holder gets the lease');
select results_eq(
  $$select holder, expires_at from jobs.scheduler_leases where name = 'scheduler'$$,
  $$values ('node-a', '2026-01-01 12:00:30+00'::timestamptz)$$,
  'the lease runs until now + ttl (30 s by default)');
select is(jobs.scheduler_lead(holder => 'node-b'), false, 'another holder is refused while it is live (R51)');
select results_eq(
  $$select holder, expires_at from jobs.scheduler_leases where name = 'scheduler'$$,
  $$values ('node-a', '2026-01-01 12:00:30+00'::timestamptz)$$,
  'a refused take-over leaves the holder and the expiry as they were');

select jobs_test.advance(interval '10 seconds') \g /dev/null
select is(jobs.scheduler_lead(holder => 'node-a'), true, 'the holder renews');
select is((select expires_at from jobs.scheduler_leases where name = 'scheduler'),
          '2026-01-01 12:00:40+00'::timestamptz, 'a renewal moves expires_at to now + ttl');

-- an abandoned round never resigns; the lease still stops a standby until it runs out (R55)
select jobs_test.advance(interval '29 seconds') \g /dev/null
select is(jobs.scheduler_lead(holder => 'node-b'), false,
          'a standby is refused one second before the expiry (R55)');
select jobs_test.advance(interval '2 seconds') \g /dev/null
select is(jobs.scheduler_lead(holder => 'node-b'), true, 'once expired, another holder takes over');
select results_eq(
  $$select holder, expires_at from jobs.scheduler_leases where name = 'scheduler'$$,
  $$values ('node-b', '2026-01-01 12:01:11+00'::timestamptz)$$,
  'the take-over holds the lease until its own now + ttl');
select is(jobs.scheduler_lead(holder => 'node-a'), false,
          'the lapsed holder is refused: it is demoted (R98)');
select is((select count(*) from jobs.scheduler_leases where name = 'scheduler'), 1::bigint,
          'one lease row per name');

select is(jobs.scheduler_resign(holder => 'node-a'), false, 'resign by a non-holder answers false');
select is((select holder from jobs.scheduler_leases where name = 'scheduler'), 'node-b',
          'resign by a non-holder leaves the lease');
select is(jobs.scheduler_resign(holder => 'node-b'), true, 'resign by the holder answers true');
select is((select count(*) from jobs.scheduler_leases where name = 'scheduler'), 0::bigint,
          'resign by the holder deletes the lease');
select is(jobs.scheduler_resign(holder => 'node-b'), false, 'a second resign answers false');
select is(jobs.scheduler_lead(holder => 'node-a'), true, 'after a resign another holder leads at once');

-- ttl is honoured; two lease names are independent
select is(jobs.scheduler_lead(holder => 'node-b', ttl => interval '5 minutes', name => 'other'), true,
          'another lease name is free while scheduler is held');
select is((select expires_at from jobs.scheduler_leases where name = 'other'),
          jobs._now() + interval '5 minutes', 'the lease runs for the ttl given');
select is(jobs.scheduler_lead(holder => 'node-a', name => 'other'), false,
          'the holder of one name does not hold another');
select is(jobs.scheduler_resign(holder => 'node-a', name => 'other'), false,
          'resign names the lease: node-a does not hold other');
select is(jobs.scheduler_resign(holder => 'node-b', name => 'other'), true, 'node-b resigns other');
select is((select holder from jobs.scheduler_leases where name = 'scheduler'), 'node-a',
          'resigning one name leaves the other held');
select is(jobs.scheduler_lead(holder => 'node-c', ttl => interval '1 hour', name => 'hour'), true,
          'a ttl of exactly an hour is accepted');

select throws_ok($$select jobs.scheduler_lead(holder => '  ')$$, 'JQ001', null,
                 'lead with a blank holder raises JQ001');
select throws_ok($$select jobs.scheduler_lead(holder => null)$$, 'JQ001', null,
                 'lead with a NULL holder raises JQ001');
select throws_ok($$select jobs.scheduler_lead(holder => 'node-x', ttl => interval '0')$$, 'JQ001', null,
                 'lead with a zero ttl raises JQ001');
select throws_ok($$select jobs.scheduler_lead(holder => 'node-x', ttl => interval '-1 second')$$, 'JQ001', null,
                 'lead with a negative ttl raises JQ001');
select throws_ok($$select jobs.scheduler_lead(holder => 'node-x', ttl => interval '1 hour 1 second')$$,
                 'JQ001', null, 'lead with a ttl over an hour raises JQ001');
select throws_ok($$select jobs.scheduler_lead(holder => 'node-x', ttl => null)$$, 'JQ001', null,
                 'lead with a NULL ttl raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- pause / resume / task_fires

select jobs.scheduler_arm(task => 'weekly', watermark => '2026-01-01 00:00:00+00') \g /dev/null
select is(jobs.pause_task(task => 'weekly'), true, 'pause_task answers true when it pauses');
select is((select paused_at from jobs.scheduler_tasks where task = 'weekly'), jobs._now(),
          'the pause is stamped with jobs._now()');
select is(jobs.pause_task(task => 'weekly'), false, 'pause_task answers false when already paused');
select is((jobs.scheduler_arm(task => 'weekly', watermark => '2026-01-01 00:00:00+00')).paused, true,
          'a paused task''s state says paused');
select is(jobs.resume_task(task => 'weekly'), true, 'resume_task answers true when it resumes');
select is(jobs.resume_task(task => 'weekly'), false, 'resume_task answers false when not paused');
select is((select paused_at from jobs.scheduler_tasks where task = 'weekly'), null,
          'resume clears the pause');
select throws_ok($$select jobs.pause_task(task => 'ghost')$$, 'JQ001', null,
                 'pause_task of an unknown task raises JQ001');
select throws_ok($$select jobs.resume_task(task => 'ghost')$$, 'JQ001', null,
                 'resume_task of an unknown task raises JQ001');

select jobs.pause_task(task => 'at-mark') \g /dev/null
select results_eq(
  $$select task from jobs.task_fires()$$,
  $$values ('at-mark'), ('hourly'), ('keyless'), ('nightly'), ('paused-task'), ('skipper'), ('strict'),
           ('weekly')$$,
  'task_fires answers every task, ordered by name');
select results_eq(
  $$select * from jobs.task_fires() where task in ('at-mark', 'nightly', 'skipper')$$,
  $$values ('at-mark', '2026-01-01 09:00:00+00'::timestamptz, null::timestamptz, null::timestamptz, true),
           ('nightly', '2026-01-02 09:30:00+00'::timestamptz, '2026-01-02 09:30:00+00'::timestamptz,
            '2026-01-01 10:06:00+00'::timestamptz, false),
           ('skipper', '2026-01-01 09:30:00+00'::timestamptz, null::timestamptz, null::timestamptz, false)$$,
  'task_fires answers each task''s watermark, last fire and paused flag');

-- a scoped key over 200 characters (a long task name and a long key) goes as its digest, so
-- the occurrence fires (written out, every tick would be refused) and a refire still dedupes
select jobs.scheduler_arm(task => repeat('t', 60), watermark => '2026-01-01 00:00:00+00')
  \g /dev/null
create temporary table long_fire on commit drop as
  select f.id
    from jobs.scheduler_fire(task => repeat('t', 60), occurrence => '2026-01-01 09:00:00+00',
                             requests => jsonb_build_array(jsonb_build_object(
                               'name', 'report', 'input', '{}'::jsonb,
                               'idempotency_key', repeat('k', 150), 'queue', 'q-long'))) f;
select is((select j.idempotency_key from long_fire f join jobs.jobs j on j.id = f.id),
          'sha256:' || encode(sha256(convert_to(repeat('t', 60) || '@2026-01-01T09:00:00Z:'
                                                || repeat('k', 150), 'UTF8')), 'hex'),
          'a scoped key over 200 characters is stored as sha256: and its digest');
select is((select count(*)::integer from jobs.enqueue_many(jsonb_build_array(jsonb_build_object(
             'name', 'report', 'input', '{}'::jsonb, 'queue', 'q-long',
             'idempotency_key', (select j.idempotency_key from long_fire f
                                   join jobs.jobs j on j.id = f.id))))
            where deduped),
          1, 'the digest is the key: the same occurrence and key dedupe to the fired job');

select * from finish();
rollback;
