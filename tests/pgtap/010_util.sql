-- 010_util: the clock, ids, vocabularies, the error registry and the schema version.
begin;
\ir fixtures/factory.sql
select plan(42);

-- jobs.version: the installed schema version is the newest revision's number
select is(jobs.version(), 26, 'jobs.version() answers 26, the tenant-run and capped-row fixes revision');

-- jobs._now honours durajobs.now, and follows it when it changes mid-transaction
set local durajobs.now = '2026-01-01 00:00:00+00';
select is(jobs._now(), '2026-01-01 00:00:00+00'::timestamptz, '_now() answers the pinned clock');
set local durajobs.now = '2026-03-04 05:06:07.5+00';
select is(jobs._now(), '2026-03-04 05:06:07.5+00'::timestamptz, '_now() follows a re-pinned clock');
select is(jobs_test.advance(interval '90 seconds'), '2026-03-04 05:07:37.5+00'::timestamptz,
          'jobs_test.advance moves the pinned clock');
-- unset (empty), the clock is the transaction's now()
set local durajobs.now = '';
select is(jobs._now(), now(), '_now() falls back to now() when durajobs.now is empty');

-- the test clock is the owner's opt-in: off, no session variable moves the clock, and a role
-- that does not own jobs._now cannot switch it on (R: any role may set durajobs.now)
select is(jobs.use_test_clock(false), false, 'the owner switches the test clock off');
set local durajobs.now = '2000-01-01 00:00:00+00';
select is(jobs._now(), now(), 'off (as on install), durajobs.now moves nothing');
create role jobs_test_clock_mover;
grant usage on schema jobs to jobs_test_clock_mover;
-- EXECUTE as jobs.grant_roles gives it to every role it makes (PUBLIC has none)
grant execute on function jobs.use_test_clock(boolean), jobs._now() to jobs_test_clock_mover;
set local role jobs_test_clock_mover;
select throws_ok($$ select jobs.use_test_clock() $$, 'JQ018',
                 'X_PERMISSION_DENIED: jobs.use_test_clock: only the owner of schema jobs (postgres) may switch the test clock, not jobs_test_clock_mover',
                 'another role cannot switch it on');
select is(jobs._now(), now(), 'a role that sets durajobs.now still reads the real clock');
reset role;
select throws_ok($$ select jobs.use_test_clock(null) $$, 'JQ001', null,
                 'use_test_clock(null) is refused');
select is(jobs.use_test_clock(), true, 'the owner switches it on again');
select is(jobs._now(), '2000-01-01 00:00:00+00'::timestamptz, 'and the pinned clock is read');
set local durajobs.now = '';

-- jobs._now is inlined into its callers (no set clause) and its body is bound when it is made
-- (begin atomic): a caller's search_path with a now() of its own first moves neither form
create schema jobs_test_shadow;
create function jobs_test_shadow.now() returns timestamptz language sql
  as $$ select '1999-01-01 00:00:00+00'::timestamptz $$;
set local search_path = jobs_test_shadow, pg_catalog, public;
select is(jobs._now(), pg_catalog.now(), 'a shadowing now() on the search_path moves no test clock');
select is(jobs.use_test_clock(false), false, 'the owner switches the test clock off again');
select is(jobs._now(), pg_catalog.now(), 'nor the plain clock');
select is((select array[p.proconfig is null, p.prosqlbody is not null]
             from pg_proc p where p.oid = 'jobs._now()'::regprocedure),
          array[true, true], 'the plain clock has no set clause and a body bound when made');
select is(jobs.use_test_clock(), true, 'on again');
select is((select array[p.proconfig is null, p.prosqlbody is not null]
             from pg_proc p where p.oid = 'jobs._now()'::regprocedure),
          array[true, true], 'and so has the test clock');
reset search_path;

-- jobs._uuid_v7: version 7 (13th hex digit), RFC variant (17th hex digit 8-b)
select ok(
  bool_and(substr(replace(u::text, '-', ''), 13, 1) = '7'),
  '_uuid_v7() sets the version nibble to 7 (100 samples)')
  from (select jobs._uuid_v7() as u from generate_series(1, 100)) s;
select ok(
  bool_and(substr(replace(u::text, '-', ''), 17, 1) in ('8', '9', 'a', 'b')),
  '_uuid_v7() keeps the RFC 9562 variant bits (100 samples)')
  from (select jobs._uuid_v7() as u from generate_series(1, 100)) s;
select is(count(distinct u), 100::bigint, '_uuid_v7() answers distinct ids')
  from (select jobs._uuid_v7() as u from generate_series(1, 100)) s;

-- jobs._uuid_v7_many: the same ids, n of them from one statement
select is(cardinality(jobs._uuid_v7_many(500)), 500, '_uuid_v7_many(500) answers 500 ids');
select is(jobs._uuid_v7_many(0), '{}'::uuid[], '_uuid_v7_many(0) answers none');
select ok(
  bool_and(substr(replace(u::text, '-', ''), 13, 1) = '7'
           and substr(replace(u::text, '-', ''), 17, 1) in ('8', '9', 'a', 'b')),
  '_uuid_v7_many sets the version and variant bits')
  from unnest(jobs._uuid_v7_many(100)) u;
select is(count(distinct u), 500::bigint, '_uuid_v7_many answers distinct ids')
  from unnest(jobs._uuid_v7_many(500)) u;
-- bracketed by clock reads in statements of their own: two calls in one expression may run in
-- either order, and a millisecond that turns between them failed the older form of this test
create temp table v7_clock (step integer primary key, unix_ms bigint not null);
insert into v7_clock values (1, floor(extract(epoch from clock_timestamp()) * 1000)::bigint);
insert into v7_clock
  select 2, ('x' || substr(replace((jobs._uuid_v7_many(1))[1]::text, '-', ''), 1, 12))::bit(48)::bigint;
insert into v7_clock values (3, floor(extract(epoch from clock_timestamp()) * 1000)::bigint);
select ok(
  (select unix_ms from v7_clock where step = 1) <= (select unix_ms from v7_clock where step = 2)
  and (select unix_ms from v7_clock where step = 2) <= (select unix_ms from v7_clock where step = 3),
  '_uuid_v7_many stamps the current millisecond: between the clock read before and after it');

-- jobs._uuid_v7: the first 48 bits are the creation time in unix milliseconds
select ok(
  abs(('x' || substr(replace(jobs._uuid_v7()::text, '-', ''), 1, 12))::bit(48)::bigint
      - floor(extract(epoch from clock_timestamp()) * 1000)::bigint) < 1000,
  '_uuid_v7() carries the creation time in its first 48 bits');

-- jobs._uuid_v7: ids created later sort later
create temporary table uuid_sequence (n integer, u uuid) on commit drop;
insert into uuid_sequence values (1, jobs._uuid_v7());
select pg_sleep(0.005) \g /dev/null
insert into uuid_sequence values (2, jobs._uuid_v7());
select pg_sleep(0.005) \g /dev/null
insert into uuid_sequence values (3, jobs._uuid_v7());
select results_eq(
  'select n from uuid_sequence order by u',
  'values (1), (2), (3)',
  '_uuid_v7() ids sort by creation time');

-- every function of schema jobs pins its search_path
select cmp_ok(
  (select count(*) from pg_proc p where p.pronamespace = 'jobs'::regnamespace)::integer, '>=', 25,
  'schema jobs holds the functions under test');
select is_empty(
  $$select p.oid::regprocedure::text
      from pg_proc p
     where p.pronamespace = 'jobs'::regnamespace
       and not coalesce('search_path=pg_catalog, pg_temp' = any(p.proconfig), false)
       and p.prosqlbody is null$$,
  'every function in schema jobs sets search_path = pg_catalog, pg_temp or has a body bound when made');

-- the error registry: every code has a distinct SQLSTATE in class JQ
select is_empty(
  $$select code from jobs.error_codes where sqlstate not like 'JQ%' or code not like 'X\_%'$$,
  'every registered code is an X_* code with a JQ sqlstate');
select is(
  (select count(distinct sqlstate) from jobs.error_codes),
  (select count(*) from jobs.error_codes),
  'no two codes share a sqlstate');
select results_eq(
  $$select code, sqlstate::text from jobs.error_codes order by sqlstate$$,
  $$values ('X_ARGUMENT_INVALID', 'JQ001'), ('X_JOB_INPUT_INVALID', 'JQ002'),
           ('X_IDEMPOTENCY_REQUIRED', 'JQ003'), ('X_JOB_DUPLICATE', 'JQ004'),
           ('X_DRIVER_UNAVAILABLE', 'JQ005'), ('X_JOB_CLAIM_QUEUES_EMPTY', 'JQ006'),
           ('X_JOB_LEASE_LOST', 'JQ007'), ('X_JOB_CANCELLED', 'JQ008'),
           ('X_STEP_DUPLICATE', 'JQ009'), ('X_JOB_ROW_STATUS_UNKNOWN', 'JQ010'),
           ('X_JOB_NOT_FOUND', 'JQ011'), ('X_JOB_NOT_REQUEUEABLE', 'JQ012'),
           ('X_JOB_NOT_CANCELLABLE', 'JQ013'), ('X_JOB_PAGE_INVALID', 'JQ014'),
           ('X_JOB_NOT_REMOVABLE', 'JQ015'), ('X_JOB_NOT_PROMOTABLE', 'JQ016'),
           ('X_JOB_TENANT_REQUIRED', 'JQ017'), ('X_PERMISSION_DENIED', 'JQ018'),
           ('X_JOB_TENANT_MISMATCH', 'JQ019'), ('X_JOB_NOT_DRAINABLE', 'JQ020')$$,
  'each X_* code maps to its documented sqlstate');
select is_empty(
  $$select code from jobs.error_codes where btrim(fix) = ''$$,
  'every code carries a fix for the hint');

-- jobs._raise raises the code's sqlstate; an unregistered code is a bug in durajobs (JQ000)
select throws_ok(
  $$select jobs._raise('X_JOB_NOT_FOUND', 'no such job')$$, 'JQ011', null,
  '_raise raises the sqlstate registered for the code');
select throws_ok(
  $$select jobs._raise('X_NO_SUCH_CODE', 'oops')$$, 'JQ000', null,
  '_raise of an unregistered code raises JQ000');
select throws_ok(
  $$select jobs._invalid('f', 'arg', 'is wrong')$$, 'JQ001', null,
  '_invalid raises X_ARGUMENT_INVALID');

-- the vocabularies
select is(
  jobs.job_states(),
  array['ready', 'delayed', 'running', 'suspended', 'done', 'failed', 'dead', 'cancelled'],
  'job_states() lists every state in lifecycle order');
select is(
  jobs.live_states(), array['ready', 'delayed', 'running', 'suspended'],
  'live_states() lists the states that hold an idempotency key');
select ok(jobs.live_states() <@ jobs.job_states(), 'every live state is a job state');
select is(
  jobs.step_statuses(), array['completed', 'sleeping', 'waiting', 'failed'],
  'step_statuses() lists every step status');

-- the dedupe index is on jobs.jobs_live, whose check admits exactly the live states
select ok(
  (select pg_get_constraintdef(c.oid) from pg_constraint c
    where c.conname = 'jobs_live_state_check')
  like '%' || (select string_agg(quote_literal(s) || '::text', ', ') from unnest(jobs.live_states()) s) || '%',
  'the dedupe index covers exactly jobs.live_states(): the only states of jobs.jobs_live');

select * from finish();
rollback;
