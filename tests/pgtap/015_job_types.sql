-- 015_job_types: the job catalogue. jobs.declare_job records a declaration (added, unchanged,
-- conflict, replaced), jobs.job_types lists it, and jobs.enqueue, jobs.enqueue_many and the
-- outbox take a declared name's queue, attempts, priority and tenant rule from it.
begin;
\ir fixtures/factory.sql
select plan(47);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- declare_job: the first declaration of a name is added as given

select results_eq(
  $$select name, outcome, differences, stored_by
      from jobs.declare_job(name => 'mail', queue => 'emails', max_attempts => 3, priority => 5,
                            tenant_required => false, declared_by => 'deploy-1',
                            retry => '{"backoff": "exponential"}', timeout => interval '1 minute',
                            input_schema => '{"type": "object"}')$$,
  $$values ('mail', 'added', null::jsonb, 'deploy-1')$$,
  'a first declaration is added');
select results_eq(
  $$select name, queue, max_attempts, priority, tenant_required, retry, timeout, input_schema,
           declared_by, declared_at, seen_at
      from jobs.job_types()$$,
  $$values ('mail', 'emails', 3, 5, false, '{"backoff": "exponential"}'::jsonb,
            interval '1 minute', '{"type": "object"}'::jsonb, 'deploy-1',
            '2026-01-01 00:00:00+00'::timestamptz, '2026-01-01 00:00:00+00'::timestamptz)$$,
  'jobs.job_types lists it with every field');

-- the same enforced fields again: shown fields refresh, seen_at moves, the declarer stays
set local durajobs.now = '2026-01-01 01:00:00+00';
select results_eq(
  $$select outcome, differences, stored_by
      from jobs.declare_job(name => 'mail', queue => 'emails', max_attempts => 3, priority => 5,
                            tenant_required => false, declared_by => 'deploy-2',
                            retry => '{"backoff": "fixed"}')$$,
  $$values ('unchanged', null::jsonb, 'deploy-1')$$,
  'the same declaration again is unchanged, and names who stored it');
select results_eq(
  $$select retry, timeout, declared_by, declared_at, seen_at from jobs.job_types()$$,
  $$values ('{"backoff": "fixed"}'::jsonb, null::interval, 'deploy-1',
            '2026-01-01 00:00:00+00'::timestamptz, '2026-01-01 01:00:00+00'::timestamptz)$$,
  'an unchanged declaration refreshes the shown fields and seen_at only');

-- a different declaration is reported, and the stored one is kept
select results_eq(
  $$select outcome, differences, stored_by
      from jobs.declare_job(name => 'mail', queue => 'mail-v2', max_attempts => 3, priority => 1,
                            tenant_required => false, declared_by => 'deploy-3')$$,
  $$values ('conflict',
            '{"queue": {"stored": "emails", "declared": "mail-v2"},
              "priority": {"stored": 5, "declared": 1}}'::jsonb,
            'deploy-1')$$,
  'a different declaration is a conflict naming each difference');
select results_eq(
  $$select queue, priority, declared_by, retry from jobs.job_types()$$,
  $$values ('emails', 5, 'deploy-1', '{"backoff": "fixed"}'::jsonb)$$,
  'a conflict changes nothing stored');

-- replace => true: the operator's word, this declaration wins
set local durajobs.now = '2026-01-01 02:00:00+00';
select results_eq(
  $$select outcome, differences, stored_by
      from jobs.declare_job(name => 'mail', queue => 'mail-v2', max_attempts => 3, priority => 1,
                            tenant_required => false, declared_by => 'deploy-3',
                            replace => true)$$,
  $$values ('replaced',
            '{"queue": {"stored": "emails", "declared": "mail-v2"},
              "priority": {"stored": 5, "declared": 1}}'::jsonb,
            'deploy-1')$$,
  'replace => true replaces, naming what changed and whose it was');
select results_eq(
  $$select queue, priority, declared_by, declared_at, seen_at from jobs.job_types()$$,
  $$values ('mail-v2', 1, 'deploy-3', '2026-01-01 02:00:00+00'::timestamptz,
            '2026-01-01 02:00:00+00'::timestamptz)$$,
  'a replaced declaration is the new declarer''s');
select results_eq(
  $$select outcome from jobs.declare_job(name => 'mail', queue => 'mail-v2', max_attempts => 3,
                                         priority => 1, tenant_required => false,
                                         declared_by => 'deploy-3', replace => true)$$,
  $$values ('unchanged')$$,
  'replace => true on an equal declaration is unchanged');

-- bad arguments raise X_ARGUMENT_INVALID and store nothing
select throws_ok($$select jobs.declare_job(name => '', queue => 'q', max_attempts => 1, priority => 0, tenant_required => false, declared_by => 'd')$$,
                 'JQ001', null, 'declare_job: an empty name raises JQ001');
select throws_ok($$select jobs.declare_job(name => 'x', queue => null, max_attempts => 1, priority => 0, tenant_required => false, declared_by => 'd')$$,
                 'JQ001', null, 'declare_job: a NULL queue raises JQ001');
select throws_ok($$select jobs.declare_job(name => 'x', queue => 'q', max_attempts => 0, priority => 0, tenant_required => false, declared_by => 'd')$$,
                 'JQ001', null, 'declare_job: max_attempts 0 raises JQ001');
select throws_ok($$select jobs.declare_job(name => 'x', queue => 'q', max_attempts => 1, priority => null, tenant_required => false, declared_by => 'd')$$,
                 'JQ001', null, 'declare_job: a NULL priority raises JQ001');
select throws_ok($$select jobs.declare_job(name => 'x', queue => 'q', max_attempts => 1, priority => 0, tenant_required => null, declared_by => 'd')$$,
                 'JQ001', null, 'declare_job: a NULL tenant_required raises JQ001');
select throws_ok($$select jobs.declare_job(name => 'x', queue => 'q', max_attempts => 1, priority => 0, tenant_required => false, declared_by => ' ')$$,
                 'JQ001', null, 'declare_job: a blank declared_by raises JQ001');
select throws_ok($$select jobs.declare_job(name => 'x', queue => 'q', max_attempts => 1, priority => 0, tenant_required => false, declared_by => 'd', replace => null)$$,
                 'JQ001', null, 'declare_job: a NULL replace raises JQ001');
select is((select count(*) from jobs.declarations where name = 'x'), 0::bigint,
          'a refused declaration stores nothing');

-- the listing is in code-point order, whatever the collation
select jobs.declare_job(name => n, queue => 'q', max_attempts => 1, priority => 0,
                        tenant_required => false, declared_by => 'd')
  from unnest(array['b', 'B', 'a', 'é', 'e']) n \g /dev/null
select is((select array_agg(name) from jobs.job_types()),
          array['B', 'a', 'b', 'e', 'mail', 'é'],
          'jobs.job_types lists names in code-point order');

-- ---------------------------------------------------------------------------------------------
-- jobs.enqueue: a declared name takes its declaration; an argument still wins

select jobs.declare_job(name => 'report', queue => 'reports', max_attempts => 4, priority => 7,
                        tenant_required => false, declared_by => 'd') \g /dev/null
select (jobs.enqueue(name => 'report', input => '{}', idempotency_key => 'r-1')).id as r1 \gset
select results_eq(
  format($$select queue, max_attempts, priority from jobs.jobs where id = %L$$, :'r1'),
  $$values ('reports', 4, 7)$$,
  'an enqueue from SQL of a declared job lands in its queue with its attempts and priority');
select (jobs.enqueue(name => 'report', input => '{}', idempotency_key => 'r-2', queue => 'urgent',
                     max_attempts => 1, priority => -1)).id as r2 \gset
select results_eq(
  format($$select queue, max_attempts, priority from jobs.jobs where id = %L$$, :'r2'),
  $$values ('urgent', 1, -1)$$,
  'an explicit argument wins over the declaration');
select (jobs.enqueue(name => 'report', input => '{}', idempotency_key => 'r-3', queue => null,
                     max_attempts => null, priority => null)).id as r3 \gset
select results_eq(
  format($$select queue, max_attempts, priority from jobs.jobs where id = %L$$, :'r3'),
  $$values ('reports', 4, 7)$$,
  'an explicit NULL takes the declaration, as a left-out argument does');
select (jobs.enqueue(name => 'undeclared', input => '{}', idempotency_key => 'u-1')).id as u1 \gset
select results_eq(
  format($$select queue, max_attempts, priority from jobs.jobs where id = %L$$, :'u1'),
  $$values ('default', 20, 0)$$,
  'an undeclared name takes the built-in defaults, as before the catalogue');
select (jobs.enqueue(name => 'undeclared', input => '{}', idempotency_key => 'u-2', queue => null,
                     max_attempts => null, priority => null)).id as u2 \gset
select results_eq(
  format($$select queue, max_attempts, priority from jobs.jobs where id = %L$$, :'u2'),
  $$values ('default', 20, 0)$$,
  'an undeclared name with explicit NULLs takes the built-in defaults');

-- a tenant the declaration requires: refused without one, with its code and a fix
select jobs.declare_job(name => 'invoice', queue => 'billing', max_attempts => 5, priority => 0,
                        tenant_required => true, declared_by => 'd') \g /dev/null
select jobs_test.job_count() as tenant_before \gset
select throws_ok($$select jobs.enqueue(name => 'invoice', input => '{}', idempotency_key => 'i-1')$$,
                 'JQ017', 'X_JOB_TENANT_REQUIRED: jobs.enqueue: tenant_id is required: job invoice is declared with a tenant',
                 'an enqueue of a tenant job without a tenant raises X_JOB_TENANT_REQUIRED');
select is(jobs_test.job_count(), :'tenant_before'::bigint, 'the refused enqueue stores nothing');
select (jobs.enqueue(name => 'invoice', input => '{}', idempotency_key => 'i-1', tenant_id => 'acme')).id as i1 \gset
select results_eq(
  format($$select queue, max_attempts, tenant_id from jobs.jobs where id = %L$$, :'i1'),
  $$values ('billing', 5, 'acme')$$,
  'with a tenant it lands, in the declared queue');
select throws_ok($$select jobs.enqueue(name => 'invoice', input => '{}', idempotency_key => 'i-2', tenant_id => '')$$,
                 'JQ001', null, 'an empty tenant is still X_ARGUMENT_INVALID');
-- the hint is the fix a SQL caller can act on
select is(
  jobs_test.error_hint(
    $$select jobs.enqueue(name => 'invoice', input => '{}', idempotency_key => 'i-3')$$),
  'select jobs.enqueue(name => ''<job>'', input => ''<input>''::jsonb, idempotency_key => ''<key>'', tenant_id => ''<tenant>'')',
  'the refusal''s hint is the call to run, with tenant_id');

-- ---------------------------------------------------------------------------------------------
-- jobs.enqueue_many: each request takes its own name's declaration

select jobs.enqueue_many(requests => '[
         {"name": "report", "input": {}, "idempotency_key": "m-1"},
         {"name": "undeclared", "input": {}, "idempotency_key": "m-2"},
         {"name": "report", "input": {}, "idempotency_key": "m-3", "queue": "q-own", "max_attempts": 2},
         {"name": "invoice", "input": {}, "idempotency_key": "m-4", "tenant_id": "acme"}
       ]') \g /dev/null
select results_eq(
  $$select j.name, j.queue, j.max_attempts, j.priority
      from jobs.jobs j
     where j.idempotency_key in ('m-1', 'm-2', 'm-3', 'm-4')
     order by j.idempotency_key$$,
  $$values ('report', 'reports', 4, 7), ('undeclared', 'default', 20, 0),
           ('report', 'q-own', 2, 7), ('invoice', 'billing', 5, 0)$$,
  'enqueue_many takes each request''s declaration, and a given field wins');
select jobs_test.job_count() as many_before \gset
select throws_ok($$select jobs.enqueue_many(requests => '[
                     {"name": "report", "input": {}, "idempotency_key": "m-5"},
                     {"name": "invoice", "input": {}, "idempotency_key": "m-6"}]')$$,
                 'JQ017', 'X_JOB_TENANT_REQUIRED: jobs.enqueue_many: requests[2].tenant_id is required: job invoice is declared with a tenant',
                 'enqueue_many names the request without its required tenant');
select is(jobs_test.job_count(), :'many_before'::bigint, 'the refused batch stores nothing');
select throws_ok($$select jobs.enqueue_many(requests => '[{"name": "report", "input": {}, "idempotency_key": "m-7", "queue": null}]')$$,
                 'JQ001', null, 'enqueue_many still refuses an explicit JSON null queue');

-- ---------------------------------------------------------------------------------------------
-- the outbox: a stage refuses what the publish would, and the publish takes the declaration

select (jobs.outbox_stage(name => 'report', input => '{}', idempotency_key => 'o-1')).id as o1 \gset
select is((select request from jobs.outbox where id = :'o1'),
          '{"name": "report", "input": {}, "idempotency_key": "o-1"}'::jsonb,
          'a stage keeps left-out options out of the request');
select throws_ok($$select jobs.outbox_stage(name => 'invoice', input => '{}', idempotency_key => 'o-2')$$,
                 'JQ017', null, 'a stage of a tenant job without a tenant raises X_JOB_TENANT_REQUIRED');
select is((select count(*) from jobs.outbox where request ->> 'idempotency_key' = 'o-2'), 0::bigint,
          'the refused stage stores nothing');
select lives_ok($$select jobs.outbox_relay(relay_id => 'relay-1')$$, 'the relay publishes the staged row');
select results_eq(
  format($$select queue, max_attempts, priority from jobs.jobs where id = %L$$, :'o1'),
  $$values ('reports', 4, 7)$$,
  'the published job takes its declaration in the queue''s database');

-- ---------------------------------------------------------------------------------------------
-- jobs.forget_job_type: a name no deploy declares goes back to the built-in defaults

select is(jobs.forget_job_type(name => 'report'), true, 'forget_job_type answers true when a row went');
select is(jobs.forget_job_type(name => 'report'), false, 'and false when there was none');
select (jobs.enqueue(name => 'report', input => '{}', idempotency_key => 'r-after')).id as ra \gset
select results_eq(
  format($$select queue, max_attempts, priority from jobs.jobs where id = %L$$, :'ra'),
  $$values ('default', 20, 0)$$,
  'a forgotten name enqueues with the built-in defaults');
select is((select count(*) from jobs.jobs where name = 'report' and queue = 'reports'), 4::bigint,
          'its jobs are untouched');

-- a declaration made while a second session declares the same name cannot be lost: the insert
-- waits on the name's key and the loser compares against the winner (tests/python covers the
-- two sessions); here, the conflict target is the primary key
select col_is_pk('jobs', 'declarations', 'name', 'jobs.declarations is keyed by name');
select has_function('jobs', 'declare_job',
                    array['text', 'text', 'integer', 'integer', 'boolean', 'text', 'jsonb',
                          'interval', 'jsonb', 'boolean', 'integer', 'boolean', 'text'],
                    'jobs.declare_job has the documented arguments');
select function_returns('jobs', 'job_types', array[]::text[], 'setof jobs.job_type',
                        'jobs.job_types answers setof jobs.job_type');
select is((select prosecdef from pg_proc where oid = 'jobs.declare_job'::regproc), true,
          'declare_job runs as the schema''s owner (012_roles)');
select is(
  (select count(*) from jobs.declarations where name in ('mail', 'invoice', 'a', 'b', 'B', 'e', 'é')),
  7::bigint, 'every other declaration stays');
select is(
  (select proconfig from pg_proc where oid = 'jobs.job_types'::regproc),
  array['search_path=pg_catalog, pg_temp'], 'jobs.job_types pins its search_path');

select * from finish();
rollback;
