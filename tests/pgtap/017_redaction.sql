-- 017_redaction: an operator's view of a job (jobs.inspect_job, and so the CLI's `jobs show`
-- and its --json) hides the values of input keys that look like secrets, at any depth; the row
-- keeps them, and the worker's claim gets them whole. Before, inspect_job answered the input as
-- stored, passwords and tokens included.
begin;
\ir fixtures/factory.sql
select plan(12);

select id from jobs.enqueue('signup', $j${"email": "a@b.c", "password": "hunter2",
                                  "nested": {"Api-Key": "k-1", "list": [{"client_secret": "s"}, 3]},
                                  "X-Auth-Token": "t", "authorization": "Bearer x",
                                  "ssn": "123-45-6789", "note": "keep"}$j$::jsonb, 'su-1')
  \gset job_
create temporary table shown on commit drop as
  select jobs.inspect_job(:'job_id') -> 'job' -> 'input' as input;

select is((select input ->> 'password' from shown), '[redacted]', 'a password is hidden');
select is((select input -> 'nested' ->> 'Api-Key' from shown), '[redacted]',
          'Api-Key, nested, in any case and with a dash, is hidden');
select is((select input -> 'nested' -> 'list' -> 0 ->> 'client_secret' from shown), '[redacted]',
          'a secret inside an array is hidden');
select is((select input -> 'nested' -> 'list' -> 1 from shown), '3'::jsonb,
          'other array elements stay');
select is((select input ->> 'X-Auth-Token' from shown), '[redacted]', 'a token is hidden');
select is((select input ->> 'authorization' from shown), '[redacted]',
          'an authorization is hidden');
select is((select input ->> 'note' from shown), 'keep', 'an ordinary key stays');
select is((select input ->> 'ssn' from shown), '123-45-6789',
          'a key the application has not declared stays');

select is(jobs.redact_keys(array['SSN', 'card-number', 'ssn']), 2,
          'redact_keys adds the application''s fragments, once each');
select is(jobs.inspect_job(:'job_id') -> 'job' -> 'input' ->> 'ssn', '[redacted]',
          'and a declared key is hidden from then on');
select is((select input ->> 'password' from jobs.jobs where id = :'job_id'), 'hunter2',
          'the stored row keeps the value');
select throws_ok($$ select jobs.redact_keys(array['bad key!']) $$, 'JQ001', null,
                 'a fragment that is not a key''s is refused');

select * from finish();
rollback;
