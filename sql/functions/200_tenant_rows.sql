-- 200_tenant_rows: row-level security for what a role other than the owner reads in psql (the
-- operator's SELECT, jobs.grant_roles): a session bound to a tenant (014_tenants) sees its
-- tenant's rows alone. The functions run as the owner, whom no policy holds, so they pay
-- nothing for it. Last, since it names the tables of every earlier file.
--
-- Tables: jobs.jobs_live, jobs.jobs_history, jobs.steps, jobs.outbox, jobs.events (policies),
-- the view jobs.jobs. Locks nothing.

-- the view reads the tables as its reader, so their policies hold there too
alter view jobs.jobs set (security_invoker = true);

alter table jobs.jobs_live enable row level security;
create policy tenant_rows on jobs.jobs_live
  using ((select jobs.bound_tenant()) is null or tenant_id = (select jobs.bound_tenant()));

alter table jobs.jobs_history enable row level security;
create policy tenant_rows on jobs.jobs_history
  using ((select jobs.bound_tenant()) is null or tenant_id = (select jobs.bound_tenant()));

alter table jobs.steps enable row level security;
create policy tenant_rows on jobs.steps
  using ((select jobs.bound_tenant()) is null
         or exists (select 1 from jobs.jobs j
                     where j.run_id = steps.run_id and j.tenant_id = (select jobs.bound_tenant())));

alter table jobs.outbox enable row level security;
create policy tenant_rows on jobs.outbox
  using ((select jobs.bound_tenant()) is null
         or request ->> 'tenant_id' = (select jobs.bound_tenant()));

alter table jobs.events enable row level security;
create policy tenant_rows on jobs.events
  using ((select jobs.bound_tenant()) is null or tenant_id is null
         or tenant_id = (select jobs.bound_tenant()));
