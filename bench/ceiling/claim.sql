-- The raw-SQL ceiling: one pgbench script execution claims a batch of 100 ready rows and then
-- completes them, in two transactions, as a queue worker would (see README.md).
--
-- pgbench counts one execution of this whole file as one "transaction", so its tps is batches per
-- second and rows per second = tps * 100 (as long as ready rows remain; run_ceiling.py checks).
--
-- :client_id is pgbench's built-in client number (0 .. clients-1); it marks the rows this client
-- claimed. :lo and :hi (set by \gset) bound the ids it claimed, so the completing update reaches
-- them through the primary key instead of scanning the table for owner = :client_id.

-- Transaction 1: claim. The partial index on (id) where state = 'ready' yields candidates in id
-- order; SKIP LOCKED passes over rows another client is claiming at the same moment.
begin;
with claimed as (
  update ceiling_jobs
     set state = 'running', owner = :client_id
   where id = any (array(
           select id
             from ceiling_jobs
            where state = 'ready'
            order by id
            limit 100
              for update skip locked))
  returning id
)
select coalesce(min(id), 0) as lo, coalesce(max(id), -1) as hi from claimed \gset
commit;

-- Transaction 2: complete what this client claimed. The id range may hold other clients' rows
-- too; the owner and state predicates leave those alone.
begin;
update ceiling_jobs
   set state = 'done'
 where id between :lo and :hi
   and owner = :client_id
   and state = 'running';
commit;
