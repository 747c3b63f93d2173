-- 180_storage: how Postgres keeps the hot table healthy.
--
-- Tables: jobs.jobs_live, jobs.steps, jobs.outbox (storage parameters only). Every job is
-- inserted into jobs.jobs_live, updated when claimed, and deleted when it ends (it moves to
-- jobs.jobs_history), and the claim's update cannot be HOT (it moves a partial index's
-- predicate), so a busy queue leaves two dead tuples per job in a table that holds only the
-- backlog. The defaults wait for 20 % of the table to be dead before vacuuming; here a vacuum
-- starts after 1,000 dead tuples plus 2 % of the table, and runs without cost delays, so the
-- claim's index scans stay short.
-- Statistics are taken again after 2,000 changed rows, whatever the table's size, not after the
-- default 5 % of it. A quiet spell can leave the last sample holding no waiting row; until the
-- next one, the planner takes the partial indexes of waiting rows for empty and reads a whole
-- backlog through them on a by-id write. At 5 % of a million rows that would last for 50,000
-- changes. jobs.steps and jobs.outbox grow the same way. jobs.jobs_history is only inserted
-- into and dropped by the day: the defaults suit it.
-- A vacuum never truncates jobs.jobs_live (vacuum_truncate off): giving the empty pages at its
-- end back takes an ACCESS EXCLUSIVE lock, and on a table that claims, acks and enqueues write
-- every millisecond the vacuum takes and drops it again and again, each time stopping every
-- writer for up to 20 ms. The pages it would free are reused by the next jobs anyway.

alter table jobs.jobs_live set (
  autovacuum_vacuum_threshold = 1000,
  autovacuum_vacuum_scale_factor = 0.02,
  autovacuum_vacuum_insert_scale_factor = 0.02,
  autovacuum_analyze_threshold = 2000,
  autovacuum_analyze_scale_factor = 0,
  autovacuum_vacuum_cost_delay = 0,
  vacuum_truncate = false
);

alter table jobs.steps set (
  autovacuum_analyze_threshold = 2000,
  autovacuum_analyze_scale_factor = 0
);

alter table jobs.outbox set (
  autovacuum_analyze_threshold = 2000,
  autovacuum_analyze_scale_factor = 0
);
