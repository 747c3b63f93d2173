-- 018_limits_standing: jobs.limits_standing counts the limits that stand (declared
-- concurrencies plus limit rules) through every way the two tables change: a declaration added,
-- replaced, changed by hand and forgotten; a rule set, changed, half cleared and cleared; either
-- table truncated (a recount, which also mends a count a trigger-less restore left wrong). The
-- claim reads it: a limit set while a worker claims holds at its next claim, and a cleared one
-- stops holding. (The limits themselves: 030_claim_limits and 030_claim_rules.)
begin;
select plan(25);

set local durajobs.now = '2026-01-01 00:00:00+00';

-- first, before anything here touches the limit tables (a SQL function naming them, made
-- below, locks them as it is checked): a claim with nothing standing reads
-- the one row, not the two tables (an empty queue: the claim ends after its first statement)
select is((select count(*) from jobs.claim_v1(queues => array['nothing-here'], worker_id => 'w0',
                                              recover_lapsed => false)),
          0::bigint, 'a claim of an empty queue hands out nothing');
select is(array(select l.relation::regclass::text from pg_locks l
                 where l.pid = pg_backend_pid()
                   and l.relation in ('jobs.declarations'::regclass, 'jobs.limit_rules'::regclass,
                                      'jobs.limits_standing'::regclass)
                 order by 1),
          array['jobs.limits_standing'],
          'it locked jobs.limits_standing, and neither jobs.declarations nor jobs.limit_rules');

create function pg_temp.standing()
returns bigint
language sql
stable
as $$
  select l.standing from jobs.limits_standing l
$$;

-- what the row must say: the two tables counted now
create function pg_temp.counted()
returns bigint
language sql
stable
as $$
  select (select count(*) from jobs.declarations d where d.concurrency is not null)
         + (select count(*) from jobs.limit_rules)
$$;

create function pg_temp.declare(name text, concurrency integer, replace boolean default true)
returns void
language sql
volatile
as $$
  select from jobs.declare_job(name => declare.name, queue => 'lq', max_attempts => 3,
                               priority => 0, tenant_required => false, declared_by => 'test',
                               concurrency => declare.concurrency, replace => declare.replace)
$$;

\ir fixtures/factory.sql

select is((select count(*) from jobs.limits_standing), 1::bigint, 'limits_standing holds one row');
select is(pg_temp.standing(), pg_temp.counted(), 'it starts at the count of both tables');

create temp table base as select pg_temp.counted() as n;

-- ---------------------------------------------------------------------------------------------
-- declarations

select pg_temp.declare('free', null);
select is(pg_temp.standing(), (select n from base),
          'a declaration without a concurrency counts nothing');

select pg_temp.declare('capped', 2);
select is(pg_temp.standing(), (select n from base) + 1, 'a declared concurrency counts one');

select pg_temp.declare('capped', 3);
select is(pg_temp.standing(), (select n from base) + 1,
          'a declaration replaced with another concurrency still counts one');

select pg_temp.declare('capped', null);
select is(pg_temp.standing(), (select n from base),
          'a declaration replaced without a concurrency counts none');

update jobs.declarations set concurrency = 4 where name = 'free';
select is(pg_temp.standing(), (select n from base) + 1,
          'a concurrency written by hand counts one');

update jobs.declarations set queue = 'other' where name = 'free';
select is(pg_temp.standing(), (select n from base) + 1,
          'an update that leaves the concurrency alone changes nothing');

select jobs.forget_job_type('free');
select is(pg_temp.standing(), (select n from base),
          'a forgotten declaration with a concurrency takes its count away');

delete from jobs.declarations where name = 'capped';
select is(pg_temp.standing(), (select n from base),
          'a deleted declaration without a concurrency takes nothing away');

-- ---------------------------------------------------------------------------------------------
-- limit rules

select jobs.set_limit(queue => 'lq', concurrency => 1);
select is(pg_temp.standing(), (select n from base) + 1, 'a rule set counts one');

select jobs.set_limit(queue => 'lq', rate => 5, per => interval '1 second');
select is(pg_temp.standing(), (select n from base) + 1,
          'a rate added to the same selector is the same rule');

select jobs.set_limit(tenant_id => 't1', concurrency => 2);
select is(pg_temp.standing(), (select n from base) + 2, 'a second selector counts one more');

select jobs.clear_limit(queue => 'lq', kind => 'concurrency');
select is(pg_temp.standing(), (select n from base) + 2,
          'a rule with its rate left still stands');

select jobs.clear_limit(queue => 'lq');
select is(pg_temp.standing(), (select n from base) + 1, 'a cleared rule takes its count away');

select jobs.clear_limit(tenant_id => 't1');
select is(pg_temp.standing(), (select n from base), 'and the last one takes it back to the base');
select is(pg_temp.standing(), pg_temp.counted(), 'the row agrees with the tables');

-- ---------------------------------------------------------------------------------------------
-- a truncate counts again, and mends a count written wrong

set local client_min_messages = warning;  -- the cascade to limit_starts says so

select jobs.set_limit(queue => 'lq', concurrency => 1);
update jobs.limits_standing set standing = 99;
truncate jobs.limit_rules cascade;
select is(pg_temp.standing(), pg_temp.counted(),
          'a truncate of limit_rules counts both tables again');

select pg_temp.declare('capped', 2);
update jobs.limits_standing set standing = 0;
truncate jobs.declarations cascade;
select is(pg_temp.standing(), pg_temp.counted(),
          'a truncate of declarations counts both tables again');
select is(pg_temp.standing(), 0::bigint, 'with both tables empty, nothing stands');

-- ---------------------------------------------------------------------------------------------
-- the claim reads it

-- two waiting rows of one queue, and a rule of 1 set after them
select jobs.enqueue(name => 'plain', input => '{}', idempotency_key => 'r1', queue => 'lq');
select jobs.enqueue(name => 'plain', input => '{}', idempotency_key => 'r2', queue => 'lq');
select jobs.set_limit(queue => 'lq', concurrency => 1);
select is((select count(*) from jobs.claim_v1(queues => array['lq'], worker_id => 'w1',
                                              batch_size => 10, recover_lapsed => false)),
          1::bigint, 'a rule set after the rows were enqueued holds at the next claim');
select is((select count(*) from jobs.claim_v1(queues => array['lq'], worker_id => 'w2',
                                              batch_size => 10, recover_lapsed => false)),
          0::bigint, 'and at the claim after it');
select jobs.clear_limit(queue => 'lq');
select is((select count(*) from jobs.claim_v1(queues => array['lq'], worker_id => 'w2',
                                              batch_size => 10, recover_lapsed => false)),
          1::bigint, 'once cleared, the claim hands out the row it held back');

select * from finish();
rollback;
