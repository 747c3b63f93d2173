-- 180_storage: the storage parameters that keep the hot table healthy: jobs.jobs_live is
-- vacuumed after 1,000 dead tuples plus 2 % without cost delays, and jobs.jobs_live, jobs.steps
-- and jobs.outbox are analyzed after 2,000 changed rows whatever their size.
begin;
\ir fixtures/factory.sql
select plan(4);

create function pg_temp.options(relation regclass)
returns text[]
language sql
as $$
  select array(select o from unnest((select reloptions from pg_class where oid = relation)) o
                order by o)
$$;

select is(
  pg_temp.options('jobs.jobs_live'),
  array['autovacuum_analyze_scale_factor=0', 'autovacuum_analyze_threshold=2000',
        'autovacuum_vacuum_cost_delay=0', 'autovacuum_vacuum_insert_scale_factor=0.02',
        'autovacuum_vacuum_scale_factor=0.02', 'autovacuum_vacuum_threshold=1000',
        'vacuum_truncate=false'],
  'jobs.jobs_live is vacuumed early, without cost delays and never truncated, and analyzed '
  'every 2,000 changes');
select is(
  pg_temp.options('jobs.steps'),
  array['autovacuum_analyze_scale_factor=0', 'autovacuum_analyze_threshold=2000'],
  'jobs.steps is analyzed every 2,000 changes');
select is(
  pg_temp.options('jobs.outbox'),
  array['autovacuum_analyze_scale_factor=0', 'autovacuum_analyze_threshold=2000'],
  'jobs.outbox is analyzed every 2,000 changes');
select is(
  (select count(*)::integer
     from pg_class
    where relnamespace = 'jobs'::regnamespace
      and relkind = 'r'
      and reloptions is not null),
  3,
  'no other durajobs table carries storage parameters');

select * from finish();
rollback;
