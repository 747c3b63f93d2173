-- 065_horizon: jobs.horizon answers the oldest holder of the database's xmin horizon among the
-- other sessions, and no row when none holds it. (Another session's snapshot is the pytest
-- suite's to show: tests/python/concurrency/test_horizon.py.)
begin;
select plan(3);

select is((select count(*)::integer from jobs.horizon()), 0,
          'no other session holds the horizon: no row (the caller''s own transaction is not one)');
select has_function('jobs', 'horizon', array[]::name[], 'jobs.horizon() exists');
select is((select string_agg(attname || ' ' || format_type(atttypid, atttypmod), ', '
                             order by attnum)
             from pg_attribute
            where attrelid = 'jobs.horizon_holder'::regclass and attnum > 0),
          'holder text, pid integer, user_name text, name text, state text, since timestamp with time zone, age_seconds double precision, xid_age integer',
          'it answers holder, pid, user_name, name, state, since, age_seconds, xid_age');

select * from finish();
rollback;
