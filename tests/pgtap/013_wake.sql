-- 013_wake: a wake names no queue. Any role that can connect may LISTEN on jobs_wake, whose
-- payloads named the queues (a tenant's payroll queue) before; now each is a token a worker
-- asks for, made from the name and a secret no application role can read.
begin;
\ir fixtures/factory.sql
select plan(9);

create temporary table tokens on commit drop as
  select * from jobs.wake_tokens(array['payroll', 'mail', 'payroll']);
select is((select count(*)::integer from tokens), 2, 'one token per distinct queue');
select ok((select bool_and(token ~ '^[0-9a-f]{32}$') from tokens), 'a token is 32 hex digits');
select ok((select bool_and(strpos(token, queue) = 0) from tokens), 'a token holds no name');
select isnt((select token from tokens where queue = 'payroll'),
            (select token from tokens where queue = 'mail'), 'queues have different tokens');
select is((select token from jobs.wake_tokens(array['payroll'])),
          (select token from tokens where queue = 'payroll'), 'a queue''s token does not change');
select is(jobs._wake_token('payroll'), (select token from tokens where queue = 'payroll'),
          'the functions wake with the token the workers asked for');
select isnt((select token from tokens where queue = 'payroll'),
            left(encode(sha256(convert_to('payroll', 'UTF8')), 'hex'), 32),
            'nor is it a hash anyone could make from a guessed name');

select jobs.grant_roles('w_enq', 'w_wrk', 'w_opr') \g /dev/null
select is(has_table_privilege('w_opr', 'jobs.wake_secret', 'select'), false,
          'not even the operator role may read the secret');
create role w_app; grant w_enq to w_app;
set local role w_app;
select throws_ok($$ select jobs.wake_tokens(array['payroll']) $$, 'JQ018', null,
                 'only a worker asks for tokens');
reset role;

select * from finish();
rollback;
