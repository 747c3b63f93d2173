-- 016_limit_rules: the contract of jobs.set_limit and jobs.clear_limit: the arguments they
-- refuse, the rule they answer, an upsert per selector, what each kind of clear removes, the
-- capped flag of the live rows following the rules, and which rule groups a row counts in
-- (jobs._rule_groups: a tenant's own rule overrides an every_tenant rule, kind by kind).
-- (What the claim does under the rules: 030_claim_rules.)
begin;
\ir fixtures/factory.sql
select plan(74);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- a live row of `queue` and `tenant`, known by its idempotency key
create function pg_temp.put(key text, queue text, tenant text default null,
                            name text default 'j')
returns uuid
language sql
volatile
as $$
  select (jobs.enqueue(name => put.name, input => '{}', idempotency_key => put.key,
                       queue => put.queue, tenant_id => put.tenant)).id
$$;

create function pg_temp.capped(key text)
returns boolean
language sql
stable
as $$
  select j.capped from jobs.jobs j where j.idempotency_key = capped.key
$$;

-- ---------------------------------------------------------------------------------------------
-- set_limit refuses a selector no rule could have, and a limit that means nothing

select throws_ok($$select jobs.set_limit(queue => '', concurrency => 1)$$,
                 'JQ001', null, 'set_limit: an empty queue raises JQ001');
select throws_ok($$select jobs.set_limit(queue => '   ', concurrency => 1)$$,
                 'JQ001', null, 'set_limit: a blank queue raises JQ001');
select throws_ok(format('select jobs.set_limit(queue => %L, concurrency => 1)', repeat('q', 201)),
                 'JQ001', null, 'set_limit: a queue of 201 characters raises JQ001');
select throws_ok($$select jobs.set_limit(tenant_id => '', concurrency => 1)$$,
                 'JQ001', null, 'set_limit: an empty tenant_id raises JQ001');
select throws_ok($$select jobs.set_limit(tenant_id => ' ', concurrency => 1)$$,
                 'JQ001', null, 'set_limit: a blank tenant_id raises JQ001');
select throws_ok(format('select jobs.set_limit(tenant_id => %L, concurrency => 1)',
                        repeat('t', 201)),
                 'JQ001', null, 'set_limit: a tenant_id of 201 characters raises JQ001');
select throws_ok($$select jobs.set_limit(tenant_id => 'acme', every_tenant => true,
                                         concurrency => 1)$$,
                 'JQ001', null,
                 'set_limit: every_tenant with a tenant_id raises JQ001 (one tenant or each)');
select throws_ok($$select jobs.set_limit(queue => 'q', every_tenant => null, concurrency => 1)$$,
                 'JQ001', null, 'set_limit: a NULL every_tenant raises JQ001');
select throws_ok($$select jobs.set_limit(queue => 'q')$$,
                 'JQ001', null, 'set_limit: neither concurrency nor rate raises JQ001');
select throws_ok($$select jobs.set_limit(queue => 'q', per => '1 minute')$$,
                 'JQ001', null, 'set_limit: a per alone (no concurrency, no rate) raises JQ001');
select throws_ok($$select jobs.set_limit(queue => 'q', concurrency => -1)$$,
                 'JQ001', null, 'set_limit: a negative concurrency raises JQ001');
select throws_ok($$select jobs.set_limit(queue => 'q', rate => -1, per => '1 minute')$$,
                 'JQ001', null, 'set_limit: a negative rate raises JQ001');
select throws_ok($$select jobs.set_limit(queue => 'q', rate => 10)$$,
                 'JQ001', null, 'set_limit: a rate without per raises JQ001');
select throws_ok($$select jobs.set_limit(queue => 'q', concurrency => 1, per => '1 minute')$$,
                 'JQ001', null, 'set_limit: a per without rate raises JQ001');
select throws_ok($$select jobs.set_limit(queue => 'q', rate => 10, per => '0 seconds')$$,
                 'JQ001', null, 'set_limit: a per of 0 raises JQ001');
select throws_ok($$select jobs.set_limit(queue => 'q', rate => 10, per => '-1 minute')$$,
                 'JQ001', null, 'set_limit: a negative per raises JQ001');
select throws_ok($$select jobs.set_limit(queue => 'q', rate => 10, per => '1 day 1 second')$$,
                 'JQ001', null, 'set_limit: a per longer than 1 day raises JQ001');
select is((select count(*) from jobs.limit_rules), 0::bigint, 'the refused calls stored no rule');

-- the bounds themselves are valid
select lives_ok(format('select jobs.set_limit(queue => %L, concurrency => 0)', repeat('q', 200)),
                'set_limit: a queue of 200 characters and concurrency 0 are accepted');
select lives_ok(format('select jobs.set_limit(tenant_id => %L, rate => 0, per => %L)',
                       repeat('t', 200), '1 day'),
                'set_limit: a tenant_id of 200 characters, rate 0 and a per of 1 day are accepted');
delete from jobs.limit_rules;

-- ---------------------------------------------------------------------------------------------
-- clear_limit refuses what set_limit refuses of a selector, and an unknown kind

select throws_ok($$select jobs.clear_limit(queue => ' ')$$,
                 'JQ001', null, 'clear_limit: a blank queue raises JQ001');
select throws_ok($$select jobs.clear_limit(tenant_id => '')$$,
                 'JQ001', null, 'clear_limit: an empty tenant_id raises JQ001');
select throws_ok(format('select jobs.clear_limit(tenant_id => %L)', repeat('t', 201)),
                 'JQ001', null, 'clear_limit: a tenant_id of 201 characters raises JQ001');
select throws_ok($$select jobs.clear_limit(tenant_id => 'acme', every_tenant => true)$$,
                 'JQ001', null, 'clear_limit: every_tenant with a tenant_id raises JQ001');
select throws_ok($$select jobs.clear_limit(queue => 'q', every_tenant => null)$$,
                 'JQ001', null, 'clear_limit: a NULL every_tenant raises JQ001');
select throws_ok($$select jobs.clear_limit(queue => 'q', kind => 'speed')$$,
                 'JQ001', null, 'clear_limit: an unknown kind raises JQ001');
select throws_ok($$select jobs.clear_limit(queue => 'q', kind => null)$$,
                 'JQ001', null, 'clear_limit: a NULL kind raises JQ001');

-- ---------------------------------------------------------------------------------------------
-- the answer, and one rule per selector: a kind left NULL keeps what the rule has

select results_eq(
  $$select * from jobs.set_limit(queue => 'q-up', concurrency => 3, set_by => 'alice')$$,
  $$values ('q-up', null::text, false, 3, null::integer, null::interval, 'alice',
            '2026-01-01 00:00:00+00'::timestamptz)$$,
  'set_limit answers the rule as it now stands, stamped with who and when');
set local durajobs.now = '2026-01-01 00:05:00+00';
select results_eq(
  $$select * from jobs.set_limit(queue => 'q-up', rate => 10, per => '1 minute', set_by => 'bob')$$,
  $$values ('q-up', null::text, false, 3, 10, interval '1 minute', 'bob',
            '2026-01-01 00:05:00+00'::timestamptz)$$,
  'a rate set on the same selector keeps its concurrency; set_by and set_at are the new ones');
select is((select count(*) from jobs.limit_rules where queue = 'q-up'), 1::bigint,
          'one selector holds one rule');
select results_eq(
  $$select concurrency, rate, per from jobs.set_limit(queue => 'q-up', concurrency => 5)$$,
  $$values (5, 10, interval '1 minute')$$,
  'a new concurrency replaces the old one and keeps the rate');
select results_eq(
  $$select (jobs.set_limit(queue => 'q-up', rate => 20, per => '1 hour')).set_by$$,
  $$values (null::text)$$, 'set_by is what the latest call says, NULL included');
select results_eq(
  $$select queue, tenant_id, every_tenant from jobs.set_limit(tenant_id => 'acme', concurrency => 1)
    union all
    select queue, tenant_id, every_tenant
      from jobs.set_limit(every_tenant => true, concurrency => 1)
    union all
    select queue, tenant_id, every_tenant from jobs.set_limit(concurrency => 1)
    union all
    select queue, tenant_id, every_tenant
      from jobs.set_limit(queue => 'q-up', tenant_id => 'acme', concurrency => 1)$$,
  $$values (null::text, 'acme', false), (null, null, true), (null, null, false),
           ('q-up', 'acme', false)$$,
  'a tenant, every tenant, the fleet and a tenant within a queue are selectors of their own');
select is((select count(*) from jobs.limit_rules), 5::bigint,
          'five selectors, five rules (the fleet''s NULLs are one selector too)');
select is((jobs.set_limit(concurrency => 7)).concurrency, 7,
          'the fleet rule is updated in place, not duplicated');
select is((select count(*) from jobs.limit_rules), 5::bigint, 'still five rules');
delete from jobs.limit_rules;
set local durajobs.now = '2026-01-01 00:00:00+00';

-- ---------------------------------------------------------------------------------------------
-- clear_limit: kind by kind; false when nothing matched

select jobs.set_limit(queue => 'q-clr', concurrency => 2, rate => 5, per => '1 minute') \g /dev/null
select is(jobs.clear_limit(queue => 'q-other'), false,
          'clear_limit of a selector with no rule: false');
select is(jobs.clear_limit(queue => 'q-clr', tenant_id => 'acme'), false,
          'clear_limit matches the selector exactly: a tenant within the queue is another rule');
select is(jobs.clear_limit(queue => 'q-clr', kind => 'concurrency'), true,
          'clear_limit concurrency of a rule that has one: true');
select results_eq($$select concurrency, rate, per from jobs.limit_rules where queue = 'q-clr'$$,
                  $$values (null::integer, 5, interval '1 minute')$$,
                  'clearing the concurrency keeps the rate');
select is(jobs.clear_limit(queue => 'q-clr', kind => 'concurrency'), false,
          'clear_limit concurrency of a rule without one: false');

-- a rate's starts go with it
select jobs.set_limit(queue => 'q-clr', concurrency => 2) \g /dev/null
insert into jobs.limit_starts (rule_id, tenant_id, started_at)
  select id, '', jobs._now() from jobs.limit_rules where queue = 'q-clr';
select is(jobs.clear_limit(queue => 'q-clr', kind => 'rate'), true, 'clear_limit rate: true');
select results_eq($$select concurrency, rate, per from jobs.limit_rules where queue = 'q-clr'$$,
                  $$values (2, null::integer, null::interval)$$,
                  'clearing the rate keeps the concurrency and drops per');
select is((select count(*) from jobs.limit_starts), 0::bigint,
          'clearing the rate drops its starts');
select is(jobs.clear_limit(queue => 'q-clr', kind => 'rate'), false,
          'clear_limit rate of a rule without one: false');
select is(jobs.clear_limit(queue => 'q-clr', kind => 'concurrency'), true,
          'clearing the last kind of a rule: true');
select is((select count(*) from jobs.limit_rules where queue = 'q-clr'), 0::bigint,
          'a rule left with no limit is deleted');
select jobs.set_limit(queue => 'q-clr', concurrency => 2, rate => 5, per => '1 minute') \g /dev/null
insert into jobs.limit_starts (rule_id, tenant_id, started_at)
  select id, '', jobs._now() from jobs.limit_rules where queue = 'q-clr';
select is(jobs.clear_limit(queue => 'q-clr'), true, 'clear_limit all (the default): true');
select is((select count(*) from jobs.limit_rules), 0::bigint, 'the rule is deleted');
select is((select count(*) from jobs.limit_starts), 0::bigint, 'and its starts with it');
select is(jobs.clear_limit(queue => 'q-clr', kind => 'all'), false, 'clear_limit all again: false');

-- ---------------------------------------------------------------------------------------------
-- the capped flag of the live rows follows the rules

select pg_temp.put('a1', 'q-a', 'acme'), pg_temp.put('a2', 'q-a'), pg_temp.put('b1', 'q-b', 'acme'),
       pg_temp.put('b2', 'q-b', 'zeta') \g /dev/null
select is((select count(*) from jobs.jobs where capped), 0::bigint, 'no limit: no row is capped');

select jobs.set_limit(queue => 'q-a', concurrency => 1) \g /dev/null
select results_eq($$select pg_temp.capped('a1'), pg_temp.capped('a2'), pg_temp.capped('b1')$$,
                  $$values (true, true, false)$$,
                  'a queue rule caps every live row of its queue and no row of another');
select jobs.clear_limit(queue => 'q-a') \g /dev/null
select is((select count(*) from jobs.jobs where capped), 0::bigint, 'clearing it uncaps them');

select jobs.set_limit(tenant_id => 'acme', rate => 1, per => '1 minute') \g /dev/null
select results_eq(
  $$select pg_temp.capped('a1'), pg_temp.capped('a2'), pg_temp.capped('b1'), pg_temp.capped('b2')$$,
  $$values (true, false, true, false)$$,
  'a tenant rule caps the tenant''s rows in every queue, not a row without a tenant or of another');
select jobs.set_limit(queue => 'q-b', tenant_id => 'zeta', concurrency => 1) \g /dev/null
select jobs.clear_limit(tenant_id => 'acme') \g /dev/null
select results_eq(
  $$select pg_temp.capped('a1'), pg_temp.capped('a2'), pg_temp.capped('b1'), pg_temp.capped('b2')$$,
  $$values (false, false, false, true)$$,
  'clearing one tenant''s rule uncaps its rows and leaves another tenant''s rule''s rows capped');
select jobs.clear_limit(queue => 'q-b', tenant_id => 'zeta') \g /dev/null

select jobs.set_limit(queue => 'q-a', every_tenant => true, concurrency => 1) \g /dev/null
select results_eq($$select pg_temp.capped('a1'), pg_temp.capped('a2'), pg_temp.capped('b1')$$,
                  $$values (true, false, false)$$,
                  'an every_tenant rule caps the rows with a tenant in its queue, never one '
                  'without');
select jobs.set_limit(concurrency => 10) \g /dev/null
select is((select count(*) from jobs.jobs where not capped), 0::bigint,
          'a fleet rule caps every live row, with a tenant or without');
select jobs.clear_limit() \g /dev/null
select results_eq($$select pg_temp.capped('a1'), pg_temp.capped('a2'), pg_temp.capped('b1')$$,
                  $$values (true, false, false)$$,
                  'clearing the fleet rule uncaps only the rows no other rule counts');
select jobs.clear_limit(queue => 'q-a', every_tenant => true) \g /dev/null

-- a row capped by its declaration stays capped when a rule goes
select jobs.declare_job(name => 'decl', queue => 'q-a', max_attempts => 3, priority => 0,
                        tenant_required => false, declared_by => 'd', concurrency => 2) \g /dev/null
select pg_temp.put('d1', 'q-a', 'acme', name => 'decl') \g /dev/null
select jobs.set_limit(queue => 'q-a', concurrency => 1) \g /dev/null
select jobs.clear_limit(queue => 'q-a') \g /dev/null
select results_eq($$select pg_temp.capped('d1'), pg_temp.capped('a1')$$, $$values (true, false)$$,
                  'after clear_limit a row its declaration limits stays capped, the others do not');

-- a rule set while a row is enqueued caps it at once; one set after a row finished caps it
-- when requeue brings it back
select jobs.set_limit(queue => 'q-a', concurrency => 1) \g /dev/null
select pg_temp.put('a3', 'q-a') \g /dev/null
select ok(pg_temp.capped('a3'), 'a row enqueued while a rule counts it is capped');
select jobs.clear_limit(queue => 'q-a') \g /dev/null
select jobs_test.done_job(queue => 'q-done') as done_id \gset
select jobs.set_limit(queue => 'q-done', concurrency => 1) \g /dev/null
select is((jobs_test.job(:'done_id')).capped, false, 'set_limit leaves a finished row alone');
select jobs.requeue(id => :'done_id') \g /dev/null
select is((jobs_test.job(:'done_id')).capped, true, 'requeue caps a row a rule now counts');
select jobs.clear_limit(queue => 'q-done') \g /dev/null

-- ---------------------------------------------------------------------------------------------
-- jobs._rule_groups: the groups a row counts in; a tenant's own rule overrides an every_tenant
-- rule of the same queue scope for that tenant, kind by kind

select (jobs.set_limit(queue => 'q-g', every_tenant => true, concurrency => 2, rate => 10,
                       per => '1 minute')).queue \g /dev/null
select id as each_id from jobs.limit_rules where every_tenant \gset
select results_eq(
  $$select grp, cap, rate, per, stamp_tenant, scope_queue, scope_tenant
      from jobs._rule_groups('q-g', 'acme')$$,
  format($$values (%L, 2, 10, interval '1 minute', 'acme', 'q-g', 'acme')$$,
         'r:' || :'each_id' || E'\x1f' || 'acme'),
  'an every_tenant rule counts each tenant in a group of its own, stamped under the tenant');
select isnt((select grp from jobs._rule_groups('q-g', 'zeta')),
            (select grp from jobs._rule_groups('q-g', 'acme')),
            'two tenants of an every_tenant rule are two groups');
select is_empty($$select * from jobs._rule_groups('q-g', null)$$,
                'a row without a tenant counts in no group of an every_tenant rule');
select is_empty($$select * from jobs._rule_groups('q-other', 'acme')$$,
                'a rule of one queue counts no row of another');

select (jobs.set_limit(queue => 'q-g', tenant_id => 'acme', concurrency => 5)).queue \g /dev/null
select id as acme_id from jobs.limit_rules where tenant_id = 'acme' \gset
select results_eq(
  $$select rule_id, cap, rate, per, stamp_tenant, scope_queue, scope_tenant
      from jobs._rule_groups('q-g', 'acme') order by rule_id$$,
  format($$values (%s::bigint, null::integer, 10, interval '1 minute', 'acme', 'q-g', 'acme'),
                  (%s::bigint, 5, null::integer, null::interval, '', 'q-g', 'acme')$$,
         :'each_id', :'acme_id'),
  'a tenant''s own concurrency overrides the every_tenant concurrency; the every_tenant rate '
  'holds');
select results_eq(
  $$select cap, rate from jobs._rule_groups('q-g', 'zeta')$$, $$values (2, 10)$$,
  'another tenant keeps both limits of the every_tenant rule');
select jobs.set_limit(queue => 'q-g', tenant_id => 'acme', rate => 100, per => '1 hour')
  \g /dev/null
select results_eq(
  $$select rule_id, cap, rate, per from jobs._rule_groups('q-g', 'acme')$$,
  format($$values (%s::bigint, 5, 100, interval '1 hour')$$, :'acme_id'),
  'a tenant rule with both kinds overrides the every_tenant rule entirely');
select jobs.clear_limit(queue => 'q-g', tenant_id => 'acme', kind => 'concurrency') \g /dev/null
select results_eq(
  $$select rule_id, cap, rate from jobs._rule_groups('q-g', 'acme') order by rule_id$$,
  format($$values (%s::bigint, 2, null::integer), (%s::bigint, null::integer, 100)$$,
         :'each_id', :'acme_id'),
  'with only its rate left, the tenant takes the every_tenant concurrency back');
select jobs.clear_limit(queue => 'q-g', tenant_id => 'acme') \g /dev/null

-- a tenant rule of another queue scope does not override; the fleet and queue rules add up
select jobs.set_limit(tenant_id => 'acme', concurrency => 1) \g /dev/null
select jobs.set_limit(queue => 'q-g', concurrency => 8) \g /dev/null
select jobs.set_limit(concurrency => 50) \g /dev/null
select results_eq(
  $$select scope_queue, scope_tenant, cap from jobs._rule_groups('q-g', 'acme')
     order by scope_queue nulls first, scope_tenant nulls first$$,
  $$values (null::text, null::text, 50), (null, 'acme', 1), ('q-g', null, 8), ('q-g', 'acme', 2)$$,
  'a tenant rule of every queue does not override the every_tenant rule of one queue: all count');
select results_eq(
  $$select scope_queue, scope_tenant, cap from jobs._rule_groups('q-g', null)
     order by scope_queue nulls first$$,
  $$values (null::text, null::text, 50), ('q-g', null, 8)$$,
  'a row without a tenant counts in the fleet and queue rules only, never a tenant rule');
select jobs.clear_limit() \g /dev/null
select results_eq(
  $$select jobs._rules_cap('q-other', null), jobs._rules_cap('q-other', 'acme'),
           jobs._rules_cap('q-other', 'zeta'), jobs._rules_cap('q-g', null)$$,
  $$values (false, true, false, true)$$,
  '_rules_cap: whether any rule counts a row of that queue and tenant');

select * from finish();
rollback;
