-- 130_operator: the operator surface. jobs.list_jobs pages newest first by (created_at, id) on
-- the cursor row's own created_at (R89); jobs.remove and jobs.promote act on one job; the bulk
-- calls (requeue_many, remove_many, promote_many) move at most 1,000 rows a call and answer
-- (affected, remaining) so "call until zero" ends.
begin;
\ir fixtures/factory.sql
select plan(131);

-- local helpers (in jobs_test, so the rollback removes them) ----------------------------------

-- one page of jobs.list_jobs as its ids, in the order answered
create function jobs_test.page(
  queue text default null,
  page_size integer default 100,
  after uuid default null,
  before uuid default null,
  name text default null,
  state text default null,
  tenant_id text default null,
  id_prefix text default null,
  created_from timestamptz default null,
  created_to timestamptz default null
)
returns uuid[]
language sql
stable
as $$
  select coalesce(array_agg(p.id order by p.ordinality), '{}')
    from jobs.list_jobs(queue => page.queue, name => page.name, state => page.state,
                        tenant_id => page.tenant_id, id_prefix => page.id_prefix,
                        created_from => page.created_from, created_to => page.created_to,
                        page_size => page.page_size, after => page.after,
                        before => page.before) with ordinality p
$$;

-- a job run to a finished (or suspended) state on `queue`: enqueue, claim, then ack, cancel or
-- nack it; raises if the claim hands out another row
create function jobs_test.finished(
  state text,
  queue text,
  name text default 'j',
  idempotency_key text default null,
  tenant_id text default null,
  id uuid default null,
  run_id uuid default null,
  delay interval default interval '0'
)
returns uuid
language plpgsql
volatile
as $$
declare
  v_id uuid;
  v_claimed jobs.claimed_job;
begin
  v_id := jobs_test.enqueue(name => finished.name, idempotency_key => finished.idempotency_key,
                            queue => finished.queue, tenant_id => finished.tenant_id,
                            id => finished.id, run_id => finished.run_id);
  v_claimed := jobs_test.claim_one(queue => finished.queue, worker_id => 'w-fin');
  if v_claimed.id is distinct from v_id then
    raise exception 'jobs_test.finished: claimed % instead of %', v_claimed.id, v_id;
  end if;
  if finished.state = 'done' then
    perform jobs.ack_v1(id => v_id, worker_id => 'w-fin', claim => v_claimed.claim);
  elsif finished.state = 'cancelled' then
    perform jobs.cancel(id => v_id);
  else
    perform jobs.nack_v1(id => v_id, worker_id => 'w-fin', claim => v_claimed.claim,
                         next_state => finished.state, delay => finished.delay,
                         error => 'boom', error_code => 'E_BOOM');
  end if;
  if (jobs_test.job(v_id)).state is distinct from finished.state then
    raise exception 'jobs_test.finished: % ended %, not %', v_id, (jobs_test.job(v_id)).state,
      finished.state;
  end if;
  return v_id;
end;
$$;

-- =============================================================================================
-- list_jobs: order. Ids are supplied so that id order disagrees with created_at order.

set local durajobs.now = '2026-03-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-list', id => 'ffffffff-0000-7000-8000-00000000000a') as la \gset
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.enqueue(queue => 'q-list', id => '80000000-0000-7000-8000-00000000000b') as lb \gset
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.enqueue(queue => 'q-list', id => '10000000-0000-7000-8000-00000000000c') as lc \gset
select jobs_test.enqueue(queue => 'q-list', id => '20000000-0000-7000-8000-00000000000d') as ld \gset

select is(jobs_test.page(queue => 'q-list'), array[:'ld', :'lc', :'lb', :'la']::uuid[],
          'list_jobs answers newest first by created_at, then id (newest first on a tie)');

-- after / before
select is(jobs_test.page(queue => 'q-list', page_size => 2), array[:'ld', :'lc']::uuid[],
          'page_size 2 answers the two newest');
select is(jobs_test.page(queue => 'q-list', page_size => 2, after => :'lc'),
          array[:'lb', :'la']::uuid[],
          'after = the last row of a page answers the next older page');
select is(jobs_test.page(queue => 'q-list', page_size => 2, after => :'la'), '{}'::uuid[],
          'after the oldest row there is nothing');
select is(jobs_test.page(queue => 'q-list', page_size => 2, before => :'lb'),
          array[:'ld', :'lc']::uuid[],
          'before = the first row of a page answers the page before it, newest first');
select is(jobs_test.page(queue => 'q-list', page_size => 1, before => :'la'), array[:'lb']::uuid[],
          'before answers the newer row nearest the cursor, not the newest');
select is(jobs_test.page(queue => 'q-list', page_size => 2, before => :'la'),
          array[:'lc', :'lb']::uuid[],
          'before answers the nearest newer rows, still newest first');
select is(jobs_test.page(queue => 'q-list', page_size => 2, before => :'ld'), '{}'::uuid[],
          'before the newest row there is nothing');

-- cursor and page_size errors
select throws_ok(format($$select * from jobs.list_jobs(after => %L, before => %L)$$, :'la', :'lb'),
                 'JQ014', null, 'after and before together raise JQ014');
select throws_ok(format($$select * from jobs.list_jobs(after => %L)$$, gen_random_uuid()),
                 'JQ014', null, 'an after naming no job raises JQ014');
select throws_ok(format($$select * from jobs.list_jobs(before => %L)$$, gen_random_uuid()),
                 'JQ014', null, 'a before naming no job raises JQ014');
select throws_ok($$select * from jobs.list_jobs(page_size => 0)$$, 'JQ014', null,
                 'page_size 0 raises JQ014');
select throws_ok($$select * from jobs.list_jobs(page_size => 201)$$, 'JQ014', null,
                 'page_size 201 raises JQ014');
select throws_ok($$select * from jobs.list_jobs(page_size => null)$$, 'JQ014', null,
                 'a NULL page_size raises JQ014');
select throws_ok($$select * from jobs.list_jobs(state => 'bogus')$$, 'JQ001', null,
                 'an unknown state raises JQ001');

-- page_size: default 100, from 1 to 200
select count(jobs_test.enqueue(queue => 'q-list-many')) from generate_series(1, 201) \g /dev/null
select is(cardinality(jobs_test.page(queue => 'q-list-many')), 100, 'page_size defaults to 100');
select is((select count(*) from jobs.list_jobs(queue => 'q-list-many')), 100::bigint,
          'list_jobs with no page_size answers 100 rows');
select is(cardinality(jobs_test.page(queue => 'q-list-many', page_size => 200)), 200,
          'page_size 200 is allowed and answers 200 rows');
select is(cardinality(jobs_test.page(queue => 'q-list-many', page_size => 1)), 1,
          'page_size 1 is allowed and answers 1 row');

-- the summary carries the row's own fields
select jobs_test.finished('dead', 'q-list-summary', tenant_id => 't-sum') as lsum \gset
select results_eq(
  format($$select * from jobs.list_jobs(id_prefix => %L)$$, :'lsum'),
  format($$select id, run_id, name, queue, state, tenant_id, attempt, max_attempts, priority, run_at,
                  created_at, updated_at, finished_at, last_error, last_error_code
             from jobs.jobs where id = %L$$, :'lsum'),
  'a job_summary carries the row''s fields');

-- ---------------------------------------------------------------------------------------------
-- R89: five rows created in the same instant, paged two at a time, are seen exactly once,
-- in order, in both directions

set local durajobs.now = '2026-03-02 00:00:00+00';
select jobs_test.enqueue(queue => 'q-r89-anchor') as r89_anchor \gset
select jobs_test.advance(interval '1 second') \g /dev/null
select count(jobs_test.enqueue(queue => 'q-r89')) from generate_series(1, 5) \g /dev/null
select is((select count(distinct created_at) from jobs.jobs where queue = 'q-r89'), 1::bigint,
          'R89 fixture: five rows share one created_at');
select array_agg(id order by created_at desc, id desc) as r89_all
  from jobs.jobs where queue = 'q-r89' \gset

select jobs_test.page(queue => 'q-r89', page_size => 2) as r89_f1 \gset
select jobs_test.page(queue => 'q-r89', page_size => 2, after => (:'r89_f1'::uuid[])[2]) as r89_f2 \gset
select jobs_test.page(queue => 'q-r89', page_size => 2, after => (:'r89_f2'::uuid[])[2]) as r89_f3 \gset
select is(:'r89_f1'::uuid[] || :'r89_f2'::uuid[] || :'r89_f3'::uuid[], :'r89_all'::uuid[],
          'R89: paging forward (after) sees all 5 same-instant rows exactly once, newest first');
select is(cardinality(:'r89_f3'::uuid[]), 1, 'R89: the third page is short');
select is(jobs_test.page(queue => 'q-r89', page_size => 2, after => (:'r89_f3'::uuid[])[1]),
          '{}'::uuid[], 'a short page is the last one: after it nothing is left');

-- backward from a row older than all five (it may be of another queue: the cursor names a row)
select jobs_test.page(queue => 'q-r89', page_size => 2, before => :'r89_anchor') as r89_b1 \gset
select jobs_test.page(queue => 'q-r89', page_size => 2, before => (:'r89_b1'::uuid[])[1]) as r89_b2 \gset
select jobs_test.page(queue => 'q-r89', page_size => 2, before => (:'r89_b2'::uuid[])[1]) as r89_b3 \gset
select is(:'r89_b3'::uuid[] || :'r89_b2'::uuid[] || :'r89_b1'::uuid[], :'r89_all'::uuid[],
          'R89: paging backward (before) sees all 5 same-instant rows exactly once, each page newest first');
select is(jobs_test.page(queue => 'q-r89', page_size => 2, before => (:'r89_b3'::uuid[])[1]),
          '{}'::uuid[], 'R89: before the newest of the five nothing is left');

-- ---------------------------------------------------------------------------------------------
-- list_jobs: filters

set local durajobs.now = '2026-04-01 00:00:00+00';
select jobs_test.enqueue(name => 'fa', queue => 'q-f', tenant_id => 't1',
                         id => 'f1f1f1f1-0000-7000-8000-000000000001') as f1 \gset
select jobs_test.advance(interval '1 hour') \g /dev/null
select jobs_test.enqueue(name => 'fb', queue => 'q-f', tenant_id => 't1',
                         id => 'f2f2f2f2-0000-7000-8000-000000000002') as f2 \gset
select jobs_test.enqueue(name => 'fa', queue => 'q-f-other', tenant_id => 't1',
                         id => 'f4f4f4f4-0000-7000-8000-000000000004') as f4 \gset
select jobs_test.advance(interval '1 hour') \g /dev/null
select jobs_test.enqueue(name => 'fa', queue => 'q-f', tenant_id => 't2',
                         run_at => jobs._now() + interval '1 day',
                         id => 'f3f3f3f3-0000-7000-8000-000000000003') as f3 \gset

select is(jobs_test.page(queue => 'q-f'), array[:'f3', :'f2', :'f1']::uuid[],
          'the queue filter narrows to the queue');
select is(jobs_test.page(queue => 'q-f', name => 'fa'), array[:'f3', :'f1']::uuid[],
          'the name filter narrows to the name');
select is(jobs_test.page(queue => 'q-f', state => 'delayed'), array[:'f3']::uuid[],
          'the state filter narrows to the state');
select is(jobs_test.page(queue => 'q-f', tenant_id => 't1'), array[:'f2', :'f1']::uuid[],
          'the tenant_id filter narrows to the tenant');
select is(jobs_test.page(queue => 'q-f', id_prefix => 'f1f1'), array[:'f1']::uuid[],
          'the id_prefix filter narrows to ids starting with it');
select is(jobs_test.page(id_prefix => 'f2f2f2f2-0000'), array[:'f2']::uuid[],
          'id_prefix alone finds the job by the start of its id');
select is(jobs_test.page(queue => 'q-f', created_from => '2026-04-01 01:00:00+00'),
          array[:'f3', :'f2']::uuid[], 'created_from narrows, inclusive');
select is(jobs_test.page(queue => 'q-f', created_to => '2026-04-01 01:00:00+00'),
          array[:'f2', :'f1']::uuid[], 'created_to narrows, inclusive');
select is(jobs_test.page(queue => 'q-f', created_from => '2026-04-01 01:00:00+00',
                         created_to => '2026-04-01 01:00:00+00'),
          array[:'f2']::uuid[], 'created_from and created_to together bound both ends');
select is(jobs_test.page(queue => 'q-f', name => 'fa', page_size => 1, after => :'f3'),
          array[:'f1']::uuid[], 'filters apply with an after cursor');
select results_eq(
  format($$
    select 'queue', jobs_test.page(queue => 'q-f', before => %1$L)
    union all select 'name', jobs_test.page(queue => 'q-f', before => %1$L, name => 'fa')
    union all select 'state', jobs_test.page(queue => 'q-f', before => %1$L, state => 'ready')
    union all select 'tenant', jobs_test.page(queue => 'q-f', before => %1$L, tenant_id => 't1')
    union all select 'id_prefix', jobs_test.page(queue => 'q-f', before => %1$L, id_prefix => 'f3f3')
    union all select 'from', jobs_test.page(queue => 'q-f', before => %1$L,
                                            created_from => '2026-04-01 02:00:00+00')
    union all select 'to', jobs_test.page(queue => 'q-f', before => %1$L,
                                          created_to => '2026-04-01 01:00:00+00')$$, :'f1'),
  format($$values ('queue', array[%2$L, %1$L]::uuid[]), ('name', array[%2$L]::uuid[]),
                  ('state', array[%1$L]::uuid[]), ('tenant', array[%1$L]::uuid[]),
                  ('id_prefix', array[%2$L]::uuid[]), ('from', array[%2$L]::uuid[]),
                  ('to', array[%1$L]::uuid[])$$, :'f2', :'f3'),
  'every filter applies with a before cursor too');

-- =============================================================================================
-- remove

set local durajobs.now = '2026-05-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-rm-ready') as rm_ready \gset
select jobs_test.enqueue(queue => 'q-rm-delayed', run_at => jobs._now() + interval '1 day') as rm_delayed \gset
select jobs_test.finished('suspended', 'q-rm-suspended', delay => interval '1 hour') as rm_suspended \gset
select jobs_test.finished('done', 'q-rm-done') as rm_done \gset
select jobs_test.finished('dead', 'q-rm-dead') as rm_dead \gset
select jobs_test.finished('failed', 'q-rm-failed') as rm_failed \gset
select jobs_test.finished('cancelled', 'q-rm-cancelled') as rm_cancelled \gset
select is((jobs_test.job(:'rm_delayed')).state, 'delayed', 'remove fixture: a delayed row');

select is(jobs.remove(id => :'rm_ready'), true, 'remove of a ready job answers true');
select is(jobs.remove(id => :'rm_delayed'), true, 'remove of a delayed job answers true');
select is(jobs.remove(id => :'rm_suspended'), true, 'remove of a suspended job answers true');
select is(jobs.remove(id => :'rm_done'), true, 'remove of a done job answers true');
select is(jobs.remove(id => :'rm_dead'), true, 'remove of a dead job answers true');
select is(jobs.remove(id => :'rm_failed'), true, 'remove of a failed job answers true');
select is(jobs.remove(id => :'rm_cancelled'), true, 'remove of a cancelled job answers true');
select is((select count(*) from jobs.jobs
            where id in (:'rm_ready', :'rm_delayed', :'rm_suspended', :'rm_done', :'rm_dead',
                         :'rm_failed', :'rm_cancelled')), 0::bigint,
          'every removed row is gone');

select jobs_test.enqueue(queue => 'q-rm-running') as rm_running \gset
select jobs_test.claim_one(queue => 'q-rm-running') \g /dev/null
select jobs_test.job(:'rm_running') as rm_running_before \gset
select throws_ok(format($$select jobs.remove(id => %L)$$, :'rm_running'), 'JQ015', null,
                 'remove of a running job raises JQ015');
select is(jobs_test.job(:'rm_running')::text, :'rm_running_before', 'the running row is untouched');
select throws_ok(format($$select jobs.remove(id => %L)$$, gen_random_uuid()), 'JQ011', null,
                 'remove of an unknown id raises JQ011');

-- steps go once no row of the run is left; another run's steps stay
select gen_random_uuid() as rm_run \gset
select jobs_test.enqueue(queue => 'q-rm-run-c') as rm_c \gset
select (jobs_test.job(:'rm_c')).run_id as rm_c_run \gset
select * from jobs_test.claim_one(queue => 'q-rm-run-c') \gset rmc_
select jobs_test.record_step(:'rm_c', :'rmc_claim', name => 's1') \g /dev/null
select jobs_test.enqueue(queue => 'q-rm-run-a', run_id => :'rm_run') as rm_a \gset
select * from jobs_test.claim_one(queue => 'q-rm-run-a') \gset rma_
select jobs_test.record_step(:'rm_a', :'rma_claim', name => 's1') \g /dev/null
select jobs_test.record_step(:'rm_a', :'rma_claim', name => 's2') \g /dev/null
select jobs.ack_v1(id => :'rm_a', worker_id => 'w1', claim => :'rma_claim') \g /dev/null
select jobs_test.enqueue(queue => 'q-rm-run-b', run_id => :'rm_run') as rm_b \gset

select is(jobs.remove(id => :'rm_a'), true, 'remove of one of two rows of a run answers true');
select is((select count(*) from jobs.steps where run_id = :'rm_run'), 2::bigint,
          'the run''s steps stay while another row of the run remains');
select is(jobs.remove(id => :'rm_b'), true, 'remove of the run''s last row answers true');
select is((select count(*) from jobs.steps where run_id = :'rm_run'), 0::bigint,
          'the run''s steps go with its last row');
select is((select count(*) from jobs.steps where run_id = :'rm_c_run'), 1::bigint,
          'another run''s steps are untouched');

-- =============================================================================================
-- promote

set local durajobs.now = '2026-06-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-pr', run_at => jobs._now() + interval '1 hour') as pr_delayed \gset
select jobs_test.enqueue(queue => 'q-pr-backoff') as pr_backoff \gset
select * from jobs_test.claim_one(queue => 'q-pr-backoff') \gset prb_
select jobs.nack_v1(id => :'pr_backoff', worker_id => 'w1', claim => :'prb_claim',
                    delay => interval '10 minutes') \g /dev/null
select results_eq(
  format($$select state, run_at from jobs.jobs where id = %L$$, :'pr_backoff'),
  $$values ('ready', '2026-06-01 00:10:00+00'::timestamptz)$$,
  'promote fixture: a ready row backing off');
select jobs_test.advance(interval '1 minute') \g /dev/null

select is(jobs.promote(id => :'pr_delayed'), true, 'promote of a delayed job answers true');
select results_eq(
  format($$select state, run_at, updated_at from jobs.jobs where id = %L$$, :'pr_delayed'),
  $$values ('ready', '2026-06-01 00:01:00+00'::timestamptz, '2026-06-01 00:01:00+00'::timestamptz)$$,
  'the delayed job is ready and due now');
select is(jobs.promote(id => :'pr_backoff'), true, 'promote of a ready job backing off answers true');
select results_eq(
  format($$select state, run_at from jobs.jobs where id = %L$$, :'pr_backoff'),
  $$values ('ready', '2026-06-01 00:01:00+00'::timestamptz)$$,
  'the backing-off job is due now');

select jobs_test.enqueue(queue => 'q-pr-running') as pr_running \gset
select jobs_test.claim_one(queue => 'q-pr-running') \g /dev/null
select jobs_test.finished('done', 'q-pr-done') as pr_done \gset
select jobs_test.enqueue(queue => 'q-pr-due') as pr_due \gset
select jobs_test.finished('suspended', 'q-pr-suspended', delay => interval '1 hour') as pr_susp \gset
select jobs_test.advance(interval '1 minute') \g /dev/null
select string_agg(j::text, ';' order by j.id) as pr_before
  from jobs.jobs j where j.id in (:'pr_running', :'pr_done', :'pr_due', :'pr_susp') \gset
select throws_ok(format($$select jobs.promote(id => %L)$$, :'pr_running'), 'JQ016', null,
                 'promote of a running job raises JQ016');
select throws_ok(format($$select jobs.promote(id => %L)$$, :'pr_done'), 'JQ016', null,
                 'promote of a done job raises JQ016');
select throws_ok(format($$select jobs.promote(id => %L)$$, :'pr_due'), 'JQ016', null,
                 'promote of a ready job already due raises JQ016');
select throws_ok(format($$select jobs.promote(id => %L)$$, :'pr_susp'), 'JQ016', null,
                 'promote of a suspended job raises JQ016');
select is(
  (select string_agg(j::text, ';' order by j.id)
     from jobs.jobs j where j.id in (:'pr_running', :'pr_done', :'pr_due', :'pr_susp')),
  :'pr_before', 'the refused promotes left every row unchanged');
select throws_ok(format($$select jobs.promote(id => %L)$$, gen_random_uuid()), 'JQ011', null,
                 'promote of an unknown id raises JQ011');

-- =============================================================================================
-- requeue_many

set local durajobs.now = '2026-07-01 00:00:00+00';
select jobs_test.finished('dead', 'q-rqm') as rqm_d1 \gset
select jobs_test.finished('dead', 'q-rqm') as rqm_d2 \gset
select jobs_test.finished('done', 'q-rqm') as rqm_done \gset
select jobs_test.finished('dead', 'q-rqm-other') as rqm_other \gset
select claims as rqm_d1_claims, run_id as rqm_d1_run from jobs.jobs where id = :'rqm_d1' \gset
select results_eq(
  format($$select state, attempt, last_error, claims from jobs.jobs where id = %L$$, :'rqm_d1'),
  $$values ('dead', 1, 'boom', 1::bigint)$$,
  'requeue_many fixture: a dead row, attempt 1, with a last error');
select string_agg(j::text, ';' order by j.id) as rqm_untouched
  from jobs.jobs j where j.id in (:'rqm_done', :'rqm_other') \gset
select jobs_test.advance(interval '1 hour') \g /dev/null

select is(jobs.requeue_many(state => 'dead', queue => 'q-rqm'), row(2, 0)::jobs.bulk_result,
          'requeue_many answers (2, 0) for two dead rows of the queue');
select results_eq(
  format($$select state, attempt, last_error, last_error_code, last_error_stack, run_at,
                  finished_at, lease_expires_at, updated_at, claims, run_id
             from jobs.jobs where id = %L$$, :'rqm_d1'),
  format($$values ('ready', 0, null::text, null::text, null::text,
                   '2026-07-01 01:00:00+00'::timestamptz, null::timestamptz, null::timestamptz,
                   '2026-07-01 01:00:00+00'::timestamptz, %s::bigint, %L::uuid)$$,
         :'rqm_d1_claims', :'rqm_d1_run'),
  'a requeued row is ready, attempt 0, no last error, due now, claims and run_id kept');
select is((jobs_test.job(:'rqm_d2')).state, 'ready', 'the second dead row is ready too');
select is(
  (select string_agg(j::text, ';' order by j.id) from jobs.jobs j
    where j.id in (:'rqm_done', :'rqm_other')),
  :'rqm_untouched', 'a row of another state or another queue is untouched');

-- name and tenant narrow
select jobs_test.finished('dead', 'q-rqm-nt', name => 'n1', tenant_id => 't1') as rqm_nt_a \gset
select jobs_test.finished('dead', 'q-rqm-nt', name => 'n2', tenant_id => 't1') as rqm_nt_b \gset
select jobs_test.finished('dead', 'q-rqm-nt', name => 'n1', tenant_id => 't2') as rqm_nt_c \gset
select is(jobs.requeue_many(state => 'dead', queue => 'q-rqm-nt', name => 'n1', tenant_id => 't1'),
          row(1, 0)::jobs.bulk_result, 'requeue_many with name and tenant answers (1, 0)');
select is(array[(jobs_test.job(:'rqm_nt_a')).state, (jobs_test.job(:'rqm_nt_b')).state,
                (jobs_test.job(:'rqm_nt_c')).state],
          array['ready', 'dead', 'dead'], 'only the row of that name and tenant is requeued');

-- a row whose key a live job holds is neither moved nor counted
select jobs_test.finished('dead', 'q-rqm-held', name => 'rk', idempotency_key => 'k-rqm-held') as rqm_held \gset
select jobs_test.finished('dead', 'q-rqm-held') as rqm_free \gset
select jobs_test.enqueue(name => 'rk', idempotency_key => 'k-rqm-held', queue => 'q-rqm-held-live') \g /dev/null
select is(jobs.requeue_many(state => 'dead', queue => 'q-rqm-held'), row(1, 0)::jobs.bulk_result,
          'a row whose key a live job holds is not moved and not counted in remaining');
select is(array[(jobs_test.job(:'rqm_held')).state, (jobs_test.job(:'rqm_free')).state],
          array['dead', 'ready'], 'the held row stays dead, the free one is ready');
select is(jobs.requeue_many(state => 'dead', queue => 'q-rqm-held'), row(0, 0)::jobs.bulk_result,
          'call until zero ends with the held row left');

-- of finished rows sharing a key, only the oldest (by created_at, whatever the ids) is requeued
select jobs_test.finished('dead', 'q-rqm-share', name => 'sk', idempotency_key => 'k-rqm-share',
                          id => 'ffffffff-0000-7000-8000-0000000000e1') as rqm_old \gset
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.finished('dead', 'q-rqm-share', name => 'sk', idempotency_key => 'k-rqm-share',
                          id => '00000000-0000-7000-8000-0000000000e2') as rqm_new \gset
select is(jobs.requeue_many(state => 'dead', queue => 'q-rqm-share'), row(1, 0)::jobs.bulk_result,
          'of two dead rows sharing a key one is requeued and none remains');
select is(array[(jobs_test.job(:'rqm_old')).state, (jobs_test.job(:'rqm_new')).state],
          array['ready', 'dead'], 'the oldest of the rows sharing a key is the one requeued');
select throws_ok(
  $$select jobs.enqueue(name => 'sk', input => '{}', idempotency_key => 'k-rqm-share',
                        queue => 'q-rqm-share', on_conflict => 'error')$$,
  'JQ004', null, 'the requeued row holds its key: a new enqueue of it raises JQ004');
select is(jobs.requeue_many(state => 'dead', queue => 'q-rqm-share'), row(0, 0)::jobs.bulk_result,
          'the newer row sharing the key is not counted once the oldest holds it');

-- every finished state requeues
select jobs_test.finished('done', 'q-rqm-states') as rqm_s_done \gset
select jobs_test.finished('failed', 'q-rqm-states') as rqm_s_failed \gset
select jobs_test.finished('cancelled', 'q-rqm-states') as rqm_s_cancelled \gset
select is(jobs.requeue_many(state => 'failed', queue => 'q-rqm-states'), row(1, 0)::jobs.bulk_result,
          'requeue_many of failed rows answers (1, 0)');
select is(jobs.requeue_many(state => 'cancelled', queue => 'q-rqm-states'), row(1, 0)::jobs.bulk_result,
          'requeue_many of cancelled rows answers (1, 0)');
select is(jobs.requeue_many(state => 'done', queue => 'q-rqm-states'), row(1, 0)::jobs.bulk_result,
          'requeue_many of done rows answers (1, 0)');
select is((select count(*) from jobs.jobs where queue = 'q-rqm-states' and state = 'ready'), 3::bigint,
          'the failed, cancelled and done rows are ready');

-- only a finished state
select throws_ok($$select jobs.requeue_many(state => 'running')$$, 'JQ001', null,
                 'requeue_many of running raises JQ001');
select throws_ok($$select jobs.requeue_many(state => null)$$, 'JQ001', null,
                 'requeue_many of a NULL state raises JQ001');
select throws_ok($$select jobs.requeue_many(state => 'ready')$$, 'JQ001', null,
                 'requeue_many of ready (a live state) raises JQ001');
select throws_ok($$select jobs.requeue_many(state => 'bogus')$$, 'JQ001', null,
                 'requeue_many of an unknown state raises JQ001');

-- at most 1,000 a call
select count(jobs_test.finished('dead', 'q-bulk')) from generate_series(1, 1005) \g /dev/null
select is(jobs.requeue_many(state => 'dead', queue => 'q-bulk'), row(1000, 5)::jobs.bulk_result,
          'requeue_many moves at most 1,000 rows: (1000, 5)');
select is((select count(*) from jobs.jobs where queue = 'q-bulk' and state = 'ready'), 1000::bigint,
          '1,000 rows are ready after the first call');
select is(jobs.requeue_many(state => 'dead', queue => 'q-bulk'), row(5, 0)::jobs.bulk_result,
          'the second call moves the rest: (5, 0)');
select is(jobs.requeue_many(state => 'dead', queue => 'q-bulk'), row(0, 0)::jobs.bulk_result,
          'the third call answers (0, 0)');

-- remaining past the limit, with shared and held keys: 1,002 keys, two of them on a newer row
-- too, one held by a live job, so 1,001 rows are movable
select count(jobs_test.finished('dead', 'q-bulk-mix', name => 'mx', idempotency_key => 'k-mx-' || g))
  from generate_series(1, 1002) g \g /dev/null
select jobs_test.advance(interval '1 second') \g /dev/null
select jobs_test.finished('dead', 'q-bulk-mix', name => 'mx', idempotency_key => 'k-mx-1') \g /dev/null
select jobs_test.finished('dead', 'q-bulk-mix', name => 'mx', idempotency_key => 'k-mx-2') \g /dev/null
select jobs_test.enqueue(name => 'mx', idempotency_key => 'k-mx-3', queue => 'q-bulk-mix-live') \g /dev/null
select is(jobs.requeue_many(state => 'dead', queue => 'q-bulk-mix'), row(1000, 1)::jobs.bulk_result,
          'requeue_many counts one movable row a key, none of a held key: (1000, 1)');
select is(jobs.requeue_many(state => 'dead', queue => 'q-bulk-mix'), row(1, 0)::jobs.bulk_result,
          'the next call moves the last movable row: (1, 0)');
select is((select count(*) from jobs.jobs where queue = 'q-bulk-mix' and state = 'dead'), 3::bigint,
          'the held key''s row and the two newer rows of requeued keys stay dead');

-- =============================================================================================
-- remove_many

set local durajobs.now = '2026-08-01 00:00:00+00';
select is(jobs.remove_many(state => 'ready', queue => 'q-bulk'), row(1000, 5)::jobs.bulk_result,
          'remove_many deletes at most 1,000 rows: (1000, 5)');
select is((select count(*) from jobs.jobs where queue = 'q-bulk'), 5::bigint,
          '5 rows are left after the first call');
select is(jobs.remove_many(state => 'ready', queue => 'q-bulk'), row(5, 0)::jobs.bulk_result,
          'the second call deletes the rest: (5, 0)');
select is(jobs.remove_many(state => 'ready', queue => 'q-bulk'), row(0, 0)::jobs.bulk_result,
          'the third call answers (0, 0)');

-- state and queue narrow
select jobs_test.finished('done', 'q-rmm') as rmm_done1 \gset
select jobs_test.finished('done', 'q-rmm') as rmm_done2 \gset
select jobs_test.finished('dead', 'q-rmm') as rmm_dead \gset
select jobs_test.finished('done', 'q-rmm-other') as rmm_other \gset
select is(jobs.remove_many(state => 'done', queue => 'q-rmm'), row(2, 0)::jobs.bulk_result,
          'remove_many answers (2, 0) for two done rows of the queue');
select is(array(select id from jobs.jobs where id in (:'rmm_done1', :'rmm_done2', :'rmm_dead', :'rmm_other')
                 order by id),
          array(select unnest(array[:'rmm_dead', :'rmm_other']::uuid[]) order by 1),
          'the dead row of the queue and the done row of another queue stay');

-- name and tenant narrow
select jobs_test.finished('done', 'q-rmm-nt', name => 'n1', tenant_id => 't1') as rmm_nt_a \gset
select jobs_test.finished('done', 'q-rmm-nt', name => 'n2', tenant_id => 't1') as rmm_nt_b \gset
select jobs_test.finished('done', 'q-rmm-nt', name => 'n1', tenant_id => 't2') as rmm_nt_c \gset
select is(jobs.remove_many(state => 'done', queue => 'q-rmm-nt', name => 'n1', tenant_id => 't1'),
          row(1, 0)::jobs.bulk_result, 'remove_many with name and tenant answers (1, 0)');
select is(array(select id from jobs.jobs where queue = 'q-rmm-nt' order by id),
          array(select unnest(array[:'rmm_nt_b', :'rmm_nt_c']::uuid[]) order by 1),
          'only the row of that name and tenant is deleted');

-- a suspended row can be removed in bulk
select jobs_test.finished('suspended', 'q-rmm-susp', delay => interval '1 hour') \g /dev/null
select is(jobs.remove_many(state => 'suspended', queue => 'q-rmm-susp'), row(1, 0)::jobs.bulk_result,
          'remove_many of suspended rows answers (1, 0)');

-- steps go with runs left with no row
select gen_random_uuid() as rmm_run \gset
select jobs_test.enqueue(queue => 'q-rmm-steps') as rmm_c \gset
select (jobs_test.job(:'rmm_c')).run_id as rmm_c_run \gset
select * from jobs_test.claim_one(queue => 'q-rmm-steps') \gset rmmc_
select jobs_test.record_step(:'rmm_c', :'rmmc_claim', name => 's1') \g /dev/null
select jobs.ack_v1(id => :'rmm_c', worker_id => 'w1', claim => :'rmmc_claim') \g /dev/null
select jobs_test.enqueue(queue => 'q-rmm-steps', run_id => :'rmm_run') as rmm_a \gset
select * from jobs_test.claim_one(queue => 'q-rmm-steps') \gset rmma_
select jobs_test.record_step(:'rmm_a', :'rmma_claim', name => 's1') \g /dev/null
select jobs.ack_v1(id => :'rmm_a', worker_id => 'w1', claim => :'rmma_claim') \g /dev/null
select jobs_test.enqueue(queue => 'q-rmm-steps', run_id => :'rmm_run') as rmm_b \gset
select is(jobs.remove_many(state => 'done', queue => 'q-rmm-steps'), row(2, 0)::jobs.bulk_result,
          'remove_many of the done rows answers (2, 0)');
select is((select count(*) from jobs.steps where run_id = :'rmm_c_run'), 0::bigint,
          'the steps of a run left with no row are deleted');
select is((select count(*) from jobs.steps where run_id = :'rmm_run'), 1::bigint,
          'the steps of a run with a row left stay');
select is(jobs.remove_many(state => 'ready', queue => 'q-rmm-steps'), row(1, 0)::jobs.bulk_result,
          'remove_many of the run''s last row answers (1, 0)');
select is((select count(*) from jobs.steps where run_id = :'rmm_run'), 0::bigint,
          'the run''s steps go with its last row');

-- never running
select throws_ok($$select jobs.remove_many(state => 'running')$$, 'JQ001', null,
                 'remove_many of running raises JQ001');
select throws_ok($$select jobs.remove_many(state => null)$$, 'JQ001', null,
                 'remove_many of a NULL state raises JQ001');
select throws_ok($$select jobs.remove_many(state => 'bogus')$$, 'JQ001', null,
                 'remove_many of an unknown state raises JQ001');

-- =============================================================================================
-- promote_many

set local durajobs.now = '2026-09-01 00:00:00+00';
select jobs_test.enqueue(queue => 'q-pm') as pm_b \gset
select * from jobs_test.claim_one(queue => 'q-pm') \gset pmb_
select jobs.nack_v1(id => :'pm_b', worker_id => 'w1', claim => :'pmb_claim',
                    delay => interval '10 minutes') \g /dev/null
select jobs_test.enqueue(queue => 'q-pm', run_at => jobs._now() + interval '1 hour') as pm_d1 \gset
select jobs_test.enqueue(queue => 'q-pm', run_at => jobs._now() + interval '2 hours') as pm_d2 \gset
select jobs_test.enqueue(queue => 'q-pm') as pm_r \gset
select jobs_test.enqueue(queue => 'q-pm-other', run_at => jobs._now() + interval '1 hour') as pm_o \gset
select jobs_test.advance(interval '1 minute') \g /dev/null
select string_agg(j::text, ';' order by j.id) as pm_untouched
  from jobs.jobs j where j.id in (:'pm_r', :'pm_o') \gset

select is(jobs.promote_many(state => 'delayed', queue => 'q-pm'), row(2, 0)::jobs.bulk_result,
          'promote_many of delayed rows answers (2, 0)');
select results_eq(
  format($$select state, run_at from jobs.jobs where id in (%L, %L)$$, :'pm_d1', :'pm_d2'),
  $$values ('ready', '2026-09-01 00:01:00+00'::timestamptz), ('ready', '2026-09-01 00:01:00+00'::timestamptz)$$,
  'the delayed rows are ready and due now');
select results_eq(
  format($$select state, run_at from jobs.jobs where id = %L$$, :'pm_b'),
  $$values ('ready', '2026-09-01 00:10:00+00'::timestamptz)$$,
  'promote_many of delayed leaves a ready row backing off waiting');
select is(jobs.promote_many(state => 'ready', queue => 'q-pm'), row(1, 0)::jobs.bulk_result,
          'promote_many of ready rows moves only the one backing off: (1, 0)');
select results_eq(
  format($$select state, run_at from jobs.jobs where id = %L$$, :'pm_b'),
  $$values ('ready', '2026-09-01 00:01:00+00'::timestamptz)$$,
  'the backing-off row is due now');
select is(
  (select string_agg(j::text, ';' order by j.id) from jobs.jobs j where j.id in (:'pm_r', :'pm_o')),
  :'pm_untouched', 'a ready row already due and a delayed row of another queue are untouched');

-- name and tenant narrow
select jobs_test.enqueue(name => 'n1', tenant_id => 't1', queue => 'q-pm-nt',
                         run_at => jobs._now() + interval '1 hour') as pm_nt_a \gset
select jobs_test.enqueue(name => 'n2', tenant_id => 't1', queue => 'q-pm-nt',
                         run_at => jobs._now() + interval '1 hour') as pm_nt_b \gset
select jobs_test.enqueue(name => 'n1', tenant_id => 't2', queue => 'q-pm-nt',
                         run_at => jobs._now() + interval '1 hour') as pm_nt_c \gset
select is(jobs.promote_many(state => 'delayed', queue => 'q-pm-nt', name => 'n1', tenant_id => 't1'),
          row(1, 0)::jobs.bulk_result, 'promote_many with name and tenant answers (1, 0)');
select is(array[(jobs_test.job(:'pm_nt_a')).state, (jobs_test.job(:'pm_nt_b')).state,
                (jobs_test.job(:'pm_nt_c')).state],
          array['ready', 'delayed', 'delayed'], 'only the row of that name and tenant is promoted');

-- at most 1,000 a call; remaining counts the rows still waiting
select count(jobs_test.enqueue(queue => 'q-pm-bulk', run_at => jobs._now() + interval '1 day'))
  from generate_series(1, 1005) \g /dev/null
select is(jobs.promote_many(state => 'delayed', queue => 'q-pm-bulk'), row(1000, 5)::jobs.bulk_result,
          'promote_many moves at most 1,000 rows: (1000, 5)');
select is(jobs.promote_many(state => 'delayed', queue => 'q-pm-bulk'), row(5, 0)::jobs.bulk_result,
          'the second call promotes the rest: (5, 0)');
select is((select count(*) from jobs.jobs
            where queue = 'q-pm-bulk' and state = 'ready' and run_at = jobs._now()), 1005::bigint,
          'all 1,005 rows are ready and due now');

-- only delayed or ready
select throws_ok($$select jobs.promote_many(state => 'done')$$, 'JQ001', null,
                 'promote_many of done raises JQ001');
select throws_ok($$select jobs.promote_many(state => 'running')$$, 'JQ001', null,
                 'promote_many of running raises JQ001');
select throws_ok($$select jobs.promote_many(state => 'suspended')$$, 'JQ001', null,
                 'promote_many of suspended raises JQ001');
select throws_ok($$select jobs.promote_many(state => null)$$, 'JQ001', null,
                 'promote_many of a NULL state raises JQ001');


-- id_prefix is a plain prefix: any case, and no wildcards
select jobs_test.enqueue(name => 'prefixed', queue => 'q-prefix') as prefixed \gset
select is((select count(*) from jobs.list_jobs(queue => 'q-prefix',
                                               id_prefix => upper(left(:'prefixed'::text, 8)))),
          1::bigint, 'an uppercase id_prefix matches the lowercase id');
select is((select count(*) from jobs.list_jobs(queue => 'q-prefix', id_prefix => '%')), 0::bigint,
          'a % in id_prefix is a character, not a wildcard');

-- the idempotency key and the run filter: exact, and a run's jobs whatever their queue
select jobs_test.enqueue(queue => 'q-keyed', idempotency_key => 'invoice:7') as kid \gset
select jobs_test.enqueue(queue => 'q-keyed', idempotency_key => 'invoice:70') as k2 \gset
select jobs_test.enqueue(queue => 'q-keyed-too', idempotency_key => 'other',
                         run_id => :'kid') as kr \gset
select is(array(select id from jobs.list_jobs(idempotency_key => 'invoice:7')), array[:'kid'::uuid],
          'idempotency_key matches exactly, not as a prefix');
select is(array(select id from jobs.list_jobs(run_id => :'kid') order by id),
          array(select unnest(array[:'kid'::uuid, :'kr'::uuid]) order by 1),
          'run_id lists the jobs of one run across queues');
select is((select count(*) from jobs.list_jobs(run_id => :'kid', queue => 'q-keyed')), 1::bigint,
          'and combines with the other filters');

select * from finish();
rollback;
