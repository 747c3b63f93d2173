-- 180_storage: how Postgres keeps the hot table healthy.
--
-- Tables: jobs.jobs (storage parameters only). Every job is inserted, then updated at least
-- twice (claimed, settled), and no update can be HOT (each moves an indexed column or a partial
-- index's predicate), so a busy queue leaves two dead tuples per job. The defaults wait for 20 %
-- of the table to be dead before vacuuming; here a vacuum starts after 1,000 dead tuples plus
-- 2 % of the table, and runs without cost delays, so the claim's index scans stay short.
-- Introduced in revision 0006.

alter table jobs.jobs set (
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_scale_factor = 0.02,
  autovacuum_vacuum_insert_scale_factor = 0.02,
  autovacuum_analyze_scale_factor = 0.05,
  autovacuum_vacuum_cost_delay = 0
);
