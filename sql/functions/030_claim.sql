-- 030_claim: hand waiting jobs to a worker under a lease, re-take the rows of dead workers, and
-- bury the rows whose lease lapsed on their final attempt.
--
-- Tables: jobs.jobs_live (update; a burial or a refusal moves the row to jobs.jobs_history),
-- jobs.queue_pauses, jobs.declarations and jobs.limit_rules (read),
-- jobs.limit_starts (a start under a rate is stamped), jobs.counter_buckets (a burial counts).
-- Locks: job rows, each with `for update skip locked`, so claimers never wait for one another's
-- rows (and the claiming backend's own counter shard). While any limit exists, also one
-- transaction-scoped advisory lock per limit group of the candidates, taken in the order of
-- their keys: claimers of one group take turns, so no limit is exceeded even for an instant, and
-- claimers of other groups never wait.

create type jobs.claimed_job as (
  id uuid,
  run_id uuid,
  name text,
  queue text,
  input jsonb,
  tenant_id text,
  state text,
  attempt integer,
  max_attempts integer,
  claim bigint,
  priority integer,
  run_at timestamptz,
  created_at timestamptz,
  lease_expires_at timestamptz,
  last_error text,
  traceparent text,
  enqueued_by text,
  has_steps boolean
);

-- jobs._candidate_groups: the limit groups each of the rows `ids` counts in: its declaration's
-- (the job, or the job and key when keyed) and one per limit rule that applies
-- (jobs._rule_groups_of). Each with its name (its advisory lock and its count share it), its
-- concurrency cap and rate (either may be NULL), the declaration's when_busy ('wait' for a
-- rule), and the rule and tenant a start under a rate is stamped under.
-- Raises nothing. Locks nothing.
create function jobs._candidate_groups(ids uuid[])
returns table (
  id uuid,
  grp text,
  cap integer,
  rate integer,
  per interval,
  when_busy text,
  rule_id bigint,
  stamp_tenant text
)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  return query
    with candidates as materialized (
      select j.id, j.name, j.concurrency_key, j.queue, j.tenant_id,
             row_number() over (order by j.id)::integer as ord
        from jobs.jobs_live j
       where j.id = any(_candidate_groups.ids)
    )
    select c.id,
           case when d.concurrency_keyed
                then 'k:' || d.name || E'\x1f' || coalesce(c.concurrency_key, '')
                else 'j:' || d.name end,
           d.concurrency, null::integer, null::interval, d.when_busy, null::bigint, null::text
      from candidates c
      join jobs.declarations d on d.name = c.name and d.concurrency is not null
    union all
    select c.id, g.grp, g.cap, g.rate, g.per, 'wait', g.rule_id, g.stamp_tenant
      from jobs._rule_groups_of(
             array(select c.queue from candidates c order by c.ord),
             array(select c.tenant_id from candidates c order by c.ord)) g
      join candidates c on c.ord = g.ord;
end;
$$;

-- jobs._running_groups: every limit group with a concurrency cap that has attempts running now
-- (the running rows of capped jobs), with its cap, how many run, its when_busy and its scope.
-- One pass over the running capped rows, grouped before any rule is asked.
-- Raises nothing. Locks nothing.
create function jobs._running_groups()
returns table (
  grp text,
  cap integer,
  busy bigint,
  when_busy text,
  scope_job text,
  scope_key text,
  scope_queue text,
  scope_tenant text
)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  return query
    with running as materialized (
      select r.name, r.concurrency_key, r.queue, r.tenant_id, count(*) as n
        from jobs.jobs_live r
       where r.state = 'running'
         and r.capped
       group by r.name, r.concurrency_key, r.queue, r.tenant_id
    ),
    scopes as materialized (
      select x.queue, x.tenant_id, sum(x.n) as n,
             row_number() over (order by x.queue, x.tenant_id)::integer as ord
        from running x
       group by x.queue, x.tenant_id
    ),
    counted as (
      select case when d.concurrency_keyed
                  then 'k:' || d.name || E'\x1f' || coalesce(x.concurrency_key, '')
                  else 'j:' || d.name end as grp,
             d.concurrency as cap, x.n, d.when_busy, d.name as scope_job,
             -- a keyed job's rows without a key (enqueued before it was keyed) are a group of
             -- their own, '': a NULL here would read as the whole job at its limit
             case when d.concurrency_keyed then coalesce(x.concurrency_key, '') end
               as scope_key,
             null::text as scope_queue, null::text as scope_tenant
        from running x
        join jobs.declarations d on d.name = x.name and d.concurrency is not null
      union all
      select g.grp, g.cap, x.n, 'wait', null, null, g.scope_queue, g.scope_tenant
        from jobs._rule_groups_of(array(select x.queue from scopes x order by x.ord),
                                  array(select x.tenant_id from scopes x order by x.ord)) g
        join scopes x on x.ord = g.ord
       where g.cap is not null
    )
    select c.grp, c.cap, sum(c.n)::bigint, c.when_busy, c.scope_job, c.scope_key, c.scope_queue,
           c.scope_tenant
      from counted c
     group by c.grp, c.cap, c.when_busy, c.scope_job, c.scope_key, c.scope_queue, c.scope_tenant;
end;
$$;

-- jobs._started_groups: every rate group with starts inside its window at `now`, with its rate,
-- the starts counted and its scope. Raises nothing. Locks nothing.
create function jobs._started_groups(now timestamptz)
returns table (
  grp text,
  rate integer,
  started bigint,
  scope_queue text,
  scope_tenant text
)
language plpgsql
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  return query
    select 'r:' || r.id || case when r.every_tenant then E'\x1f' || s.tenant_id else '' end,
           r.rate, count(*), r.queue,
           case when r.every_tenant then s.tenant_id else r.tenant_id end
      from jobs.limit_rules r
      join jobs.limit_starts s
        on s.rule_id = r.id
       and s.started_at > _started_groups.now - r.per
     where r.rate is not null
       -- a tenant whose own rule sets a rate no longer counts under an every_tenant one
       and not (r.every_tenant
                and exists (select 1
                              from jobs.limit_rules o
                             where o.tenant_id = s.tenant_id
                               and o.queue is not distinct from r.queue
                               and o.rate is not null))
     group by r.id, r.rate, r.queue, r.every_tenant, r.tenant_id, s.tenant_id;
end;
$$;

-- jobs._capped_candidates: the waiting capped rows of `queues` due at `now` that no full group
-- passes over, at most `room`, in hand-out order, locked skip locked: the candidates of
-- jobs._claim_limited. The groups to pass over: full_jobs (job names), full_keys (name and key
-- joined by \x1f), blocked_queues, blocked_tenants, blocked_pairs (queue and tenant joined by
-- \x1f), and every_stopped (an every_tenant rule at 0 exists: ask each row).
-- The scan must walk jobs_claim_idx in order and stop after `room` rows. A generic plan, which
-- cannot see the limit, otherwise reads and sorts every waiting capped row of the queue on
-- each claim: bitmap and sequential scans are off for this function alone.
-- Raises nothing. Locks: the rows it answers.
create function jobs._capped_candidates(
  queues text[],
  room integer,
  now timestamptz,
  full_jobs text[],
  full_keys text[],
  blocked_queues text[],
  blocked_tenants text[],
  blocked_pairs text[],
  every_stopped boolean
)
returns uuid[]
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
set enable_bitmapscan = off
set enable_seqscan = off
as $$
declare
  v_held uuid[];
begin
  select coalesce(array_agg(c.id), '{}')
    into v_held
    from (
      select w.id
        from unnest(_capped_candidates.queues) as q(queue)
        cross join lateral (
          select j.id, j.priority, j.run_at
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = true
             and j.state in ('ready', 'delayed', 'suspended')
             and j.run_at <= _capped_candidates.now
             and not (j.name = any(_capped_candidates.full_jobs))
             and not (j.name || E'\x1f' || coalesce(j.concurrency_key, '')
                        = any(_capped_candidates.full_keys))
             and (j.tenant_id is null
                  or not (j.tenant_id = any(_capped_candidates.blocked_tenants)
                          or q.queue || E'\x1f' || j.tenant_id
                               = any(_capped_candidates.blocked_pairs)
                          -- an every_tenant rule at 0 stops tenants that never ran, so no
                          -- count names them: asked of each row, only while such a rule is
                          or (_capped_candidates.every_stopped
                              and jobs._rules_stop(q.queue, j.tenant_id))))
           order by j.priority, j.run_at, j.id
           limit _capped_candidates.room
             for update skip locked
        ) w
       where not (q.queue = any(_capped_candidates.blocked_queues))
       order by w.priority, w.run_at, w.id
       limit _capped_candidates.room
    ) c;
  return v_held;
end;
$$;

-- jobs._claim_limited: the waiting rows jobs.claim_v1 hands out while any limit exists (a
-- declaration's concurrency, or a rule of jobs.set_limit). Arguments: the calling function's
-- name, the queues to read (not paused), worker_id, room (how many rows at most), visibility,
-- and the claim's now.
-- Uncapped rows are taken as the unlimited claim takes them (one a limit now covers but whose
-- flag an enqueue racing the limit's change left false is treated as capped). Capped rows are
-- read apart (their own range of jobs_claim_idx); a row whose group is at its limit by a count
-- without a lock is passed over, so a backlog of one busy key or tenant hides nothing behind it.
-- The candidates are locked skip locked, then the advisory lock of each of their groups is
-- taken in lock-key order and, in statements of their own, what each group runs and has started
-- in its window is counted: they see every claim committed before the locks were granted. A row
-- is handed out only while every group it counts in has room, in hand-out order; a start under a
-- rate is stamped in jobs.limit_starts in the statement that hands the row out. A running row
-- holds its place until it settles, is cancelled or buried, or its lapsed lease is re-taken as a
-- new attempt (which keeps the place). A keyed declaration that says when_busy 'fail' settles a
-- candidate whose key another run holds as 'failed' (X_JOB_KEY_BUSY) instead of holding it back;
-- one whose key only its own run holds waits.
-- Answers the rows it refused (state 'failed', counted as failed), then the claimed rows, in
-- the shape of jobs.claim_v1's answer with has_steps NULL. Raises X_ARGUMENT_INVALID when
-- called outside a read committed transaction: a snapshot older than the locks would miss
-- claims.
-- Locks: the rows it reads skip locked, the advisory locks of the groups of its candidates.
create function jobs._claim_limited(
  function_name text,
  queues text[],
  worker_id text,
  room integer,
  visibility interval,
  now timestamptz
)
returns setof jobs.claimed_job
language plpgsql
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_rules boolean := exists (select 1 from jobs.limit_rules);
  v_free uuid[];
  v_stray uuid[];
  v_held uuid[];
  v_admitted uuid[] := '{}';
  v_refused uuid[] := '{}';
  v_full_jobs text[];
  v_full_keys text[];
  v_block_all boolean;
  v_block_queues text[];
  v_block_tenants text[];
  v_block_pairs text[];
  v_every_stopped boolean := exists (select 1
                                       from jobs.limit_rules r
                                      where r.every_tenant
                                        and (r.concurrency = 0 or r.rate = 0));
  v_lock bigint;
  -- group -> attempts it runs, then also the rows this claim admits
  v_used jsonb;
  -- rate group -> starts inside its window, then also the rows this claim admits
  v_started jsonb;
  -- group -> rows this claim admits (evidence that another run holds a 'fail' key)
  v_taken jsonb := '{}';
  v_cand record;
  v_fits boolean;
  v_busy_group text;
  -- the candidates' groups, one element per (candidate, group), from jobs._candidate_groups
  v_cg_ids uuid[];
  v_cg_grps text[];
  v_cg_caps integer[];
  v_cg_rates integer[];
  v_cg_busy text[];
  v_cg_rules bigint[];
  v_cg_tenants text[];
  v_stamp_ids uuid[] := '{}';
  v_stamp_rules bigint[] := '{}';
  v_stamp_tenants text[] := '{}';
  -- the admitted rows with each capped group they take a place in
  v_adm_ids uuid[] := '{}';
  v_adm_grps text[] := '{}';
  -- candidates refused on the evidence of an admitted row alone, with its group: refused only
  -- if such a row is also handed out (the room may end before it)
  v_maybe_ids uuid[] := '{}';
  v_maybe_grps text[] := '{}';
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    perform jobs._invalid(function_name, 'transaction',
                          'must be read committed while a concurrency limit is declared');
  end if;

  -- uncapped rows, exactly as the unlimited claim reads them
  select coalesce(array_agg(w.id), '{}')
    into v_free
    from unnest(_claim_limited.queues) as q(queue)
    cross join lateral (
      select j.id
        from jobs.jobs_live j
       where j.queue = q.queue
         and j.capped = false
         and j.state in ('ready', 'delayed', 'suspended')
         and j.run_at <= _claim_limited.now
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
         for update skip locked
    ) w;

  -- an enqueue that read the limits before a change committed wrote its row uncapped after the
  -- change marked the live rows: such a row joins the capped ones (it is locked already)
  with stray as (
    update jobs.jobs_live j
       set capped = true
     where j.id = any(v_free)
       and (exists (select 1
                      from jobs.declarations d
                     where d.name = j.name
                       and d.concurrency is not null)
            or (v_rules and jobs._rules_cap(j.queue, j.tenant_id)))
    returning j.id
  )
  select coalesce(array_agg(stray.id), '{}') into v_stray from stray;
  if cardinality(v_stray) > 0 then
    v_free := array(select f from unnest(v_free) f where not (f = any(v_stray)));
  end if;

  -- the groups already at their limit, counted without a lock: only to pass over their rows
  with at_limit as (
    select g.cap as lim, g.busy, g.when_busy, g.scope_job, g.scope_key, g.scope_queue,
           g.scope_tenant
      from jobs._running_groups() g
     where g.busy >= g.cap
    union all
    select s.rate, s.started, 'wait', null, null, s.scope_queue, s.scope_tenant
      from jobs._started_groups(_claim_limited.now) s
     where v_rules
       and s.started >= s.rate
    -- a rule of one group at 0 stops its scope before anything runs in it
    union all
    select 0, 0, 'wait', null, null, r.queue, r.tenant_id
      from jobs.limit_rules r
     where not r.every_tenant
       and (r.concurrency = 0 or r.rate = 0)
  )
  select coalesce(array_agg(f.scope_job) filter (where f.scope_job is not null
                                                   and f.scope_key is null), '{}'),
         -- a 'fail' group's rows must be seen, to be refused
         coalesce(array_agg(f.scope_job || E'\x1f' || f.scope_key)
                    filter (where f.scope_key is not null and f.when_busy = 'wait'), '{}'),
         coalesce(bool_or(f.scope_job is null and f.scope_queue is null
                          and f.scope_tenant is null), false),
         -- no NULL may reach these arrays: `= any` of an array holding one answers NULL, and
         -- the filter would then pass over every row
         coalesce(array_agg(f.scope_queue)
                    filter (where f.scope_job is null and f.scope_tenant is null
                              and f.scope_queue is not null), '{}'),
         coalesce(array_agg(f.scope_tenant)
                    filter (where f.scope_job is null and f.scope_queue is null
                              and f.scope_tenant is not null), '{}'),
         coalesce(array_agg(f.scope_queue || E'\x1f' || f.scope_tenant)
                    filter (where f.scope_job is null and f.scope_queue is not null
                              and f.scope_tenant is not null), '{}')
    into v_full_jobs, v_full_keys, v_block_all, v_block_queues, v_block_tenants, v_block_pairs
    from at_limit f;

  if v_block_all then
    v_held := '{}';
  else
    v_held := jobs._capped_candidates(_claim_limited.queues, _claim_limited.room,
                                      _claim_limited.now, v_full_jobs, v_full_keys,
                                      v_block_queues, v_block_tenants, v_block_pairs,
                                      v_every_stopped);
  end if;

  if cardinality(v_held) > 0 then
    -- by lock key, not by group: two groups may share a key, and one order for all claimers is
    -- what keeps them from waiting on each other in a circle
    select coalesce(array_agg(g.id), '{}'), coalesce(array_agg(g.grp), '{}'),
           coalesce(array_agg(g.cap), '{}'), coalesce(array_agg(g.rate), '{}'),
           coalesce(array_agg(g.when_busy), '{}'), coalesce(array_agg(g.rule_id), '{}'),
           coalesce(array_agg(g.stamp_tenant), '{}')
      into v_cg_ids, v_cg_grps, v_cg_caps, v_cg_rates, v_cg_busy, v_cg_rules, v_cg_tenants
      from jobs._candidate_groups(v_held) g;

    for v_lock in
      select distinct hashtextextended('durajobs.limit:' || g.grp, 0)
        from unnest(v_cg_grps) as g(grp)
       order by 1
    loop
      perform pg_advisory_xact_lock(v_lock);
    end loop;

    -- under the locks, statements of their own: what each group runs and has started now,
    -- committed claims of the other claimers included
    select coalesce(jsonb_object_agg(g.grp, g.busy), '{}')
      into v_used
      from jobs._running_groups() g;
    if v_rules then
      delete from jobs.limit_starts s
       using jobs.limit_rules r
       where r.id = s.rule_id
         and s.started_at <= _claim_limited.now - r.per
         and (s.rule_id, s.tenant_id) in (
               select g.rule_id, g.stamp_tenant
                 from unnest(v_cg_rules, v_cg_tenants, v_cg_rates) as g(rule_id, stamp_tenant, rate)
                where g.rate is not null);
      select coalesce(jsonb_object_agg(s.grp, s.started), '{}')
        into v_started
        from jobs._started_groups(_claim_limited.now) s;
    else
      v_started := '{}';
    end if;

    -- in hand-out order, each row takes a place in every group it counts in, or none
    for v_cand in
      select j.id, j.run_id, j.name, j.concurrency_key,
             array_agg(g.grp order by g.grp) filter (where g.grp is not null) as grps,
             array_agg(g.cap order by g.grp) filter (where g.grp is not null) as caps,
             array_agg(g.rate order by g.grp) filter (where g.grp is not null) as rates,
             array_agg(g.rule_id order by g.grp) filter (where g.grp is not null) as rule_ids,
             array_agg(g.stamp_tenant order by g.grp) filter (where g.grp is not null)
               as stamp_tenants,
             (array_agg(g.grp) filter (where g.when_busy = 'fail'))[1] as fail_group
        from jobs.jobs_live j
        left join unnest(v_cg_ids, v_cg_grps, v_cg_caps, v_cg_rates, v_cg_busy, v_cg_rules,
                         v_cg_tenants)
               as g(id, grp, cap, rate, when_busy, rule_id, stamp_tenant)
          on g.id = j.id
       where j.id = any(v_held)
       group by j.id, j.run_id, j.name, j.concurrency_key, j.priority, j.run_at
       order by j.priority, j.run_at, j.id
    loop
      v_fits := true;
      v_busy_group := null;
      for i in 1 .. coalesce(cardinality(v_cand.grps), 0) loop
        if v_cand.caps[i] is not null
           and coalesce((v_used ->> v_cand.grps[i])::bigint, 0) >= v_cand.caps[i] then
          v_fits := false;
          v_busy_group := coalesce(v_busy_group, v_cand.grps[i]);
        end if;
        if v_cand.rates[i] is not null
           and coalesce((v_started ->> v_cand.grps[i])::bigint, 0) >= v_cand.rates[i] then
          v_fits := false;
        end if;
      end loop;

      if v_fits then
        v_admitted := v_admitted || v_cand.id;
        for i in 1 .. coalesce(cardinality(v_cand.grps), 0) loop
          if v_cand.caps[i] is not null then
            v_used := v_used || jsonb_build_object(
              v_cand.grps[i], coalesce((v_used ->> v_cand.grps[i])::bigint, 0) + 1);
            v_taken := v_taken || jsonb_build_object(
              v_cand.grps[i], coalesce((v_taken ->> v_cand.grps[i])::bigint, 0) + 1);
            v_adm_ids := v_adm_ids || v_cand.id;
            v_adm_grps := v_adm_grps || v_cand.grps[i];
          end if;
          if v_cand.rates[i] is not null then
            v_started := v_started || jsonb_build_object(
              v_cand.grps[i], coalesce((v_started ->> v_cand.grps[i])::bigint, 0) + 1);
            v_stamp_ids := v_stamp_ids || v_cand.id;
            v_stamp_rules := v_stamp_rules || v_cand.rule_ids[i];
            v_stamp_tenants := v_stamp_tenants || v_cand.stamp_tenants[i];
          end if;
        end loop;
      elsif v_cand.fail_group is not null and v_busy_group = v_cand.fail_group then
        -- refused only on evidence that another run holds the key: a running row of another
        -- run, or an earlier candidate this claim admits and hands out
        if exists (select 1
                     from jobs.jobs_live r
                    where r.state = 'running'
                      and r.capped
                      and r.name = v_cand.name
                      and r.concurrency_key = v_cand.concurrency_key
                      and r.run_id <> v_cand.run_id) then
          v_refused := v_refused || v_cand.id;
        elsif coalesce((v_taken ->> v_cand.fail_group)::bigint, 0) > 0 then
          v_maybe_ids := v_maybe_ids || v_cand.id;
          v_maybe_grps := v_maybe_grps || v_cand.fail_group;
        end if;
      end if;
    end loop;

    if cardinality(v_maybe_ids) > 0 then
      -- the rows handed out are the first `room` of the uncapped and the admitted: an admitted
      -- row past them stays waiting, and holds no key
      select v_refused || coalesce(array_agg(m.id), '{}')
        into v_refused
        from unnest(v_maybe_ids, v_maybe_grps) as m(id, grp)
       where exists (
               select 1
                 from unnest(v_adm_ids, v_adm_grps) as a(id, grp)
                where a.grp = m.grp
                  and a.id = any(array(select j.id
                                         from jobs.jobs_live j
                                        where j.id = any(v_free || v_admitted)
                                        order by j.priority, j.run_at, j.id
                                        limit _claim_limited.room)));
    end if;

    if cardinality(v_refused) > 0 then
      return query
        with gone as (
          delete from jobs.jobs_live j
           where j.id = any(v_refused)
          returning j
        ),
        refused as (
          insert into jobs.jobs_history as h
          select e.*
            from gone g
           cross join lateral jobs._ended(
                   g.j, 'failed', _claim_limited.now,
                   error => format('X_JOB_KEY_BUSY: key %s of job %s is held by another run',
                                   (g.j).concurrency_key, (g.j).name),
                   error_code => 'X_JOB_KEY_BUSY',
                   claimed_by => _claim_limited.worker_id) e
          returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                    h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                    h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at,
                    h.parent_id
        ),
        -- a refusal ends the row, so it counts where a settle would: as failed; and it wakes
        -- a waiting parent
        counted as (
          select jobs._count_settled(_claim_limited.now, array_agg(r.name), array_agg(r.state),
                                     array_agg(r.claimed_at)),
                 case when bool_or(r.parent_id is not null) then
                   jobs._wake_parents(
                     array_agg(r.id) filter (where r.parent_id is not null),
                     array_agg(r.parent_id) filter (where r.parent_id is not null))
                 end
            from refused r
        )
        select r.id, r.run_id, r.name, r.queue, r.input, r.tenant_id, r.state, r.attempt,
               r.max_attempts, r.claims, r.priority, r.run_at, r.created_at, r.lease_expires_at,
               r.last_error, r.traceparent, r.enqueued_by, null::boolean
          from refused r
         cross join counted;
      perform jobs._settled();
    end if;
  end if;

  return query
    with chosen as materialized (
      select j.id
        from jobs.jobs_live j
       where j.id = any(v_free || v_admitted)
       order by j.priority, j.run_at, j.id
       limit _claim_limited.room
    ),
    claimed as (
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = _claim_limited.worker_id,
             claimed_at = _claim_limited.now,
             lease_expires_at = _claim_limited.now + _claim_limited.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = _claim_limited.now
       where j.id = any(array(select chosen.id from chosen))
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    ),
    -- a start under a rate is stamped only for a row this statement hands out
    stamped as (
      insert into jobs.limit_starts (rule_id, tenant_id, started_at)
      select s.rule_id, s.tenant_id, _claim_limited.now
        from unnest(v_stamp_ids, v_stamp_rules, v_stamp_tenants) as s(id, rule_id, tenant_id)
       where s.id in (select c.id from claimed c)
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by, null::boolean
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$$;

-- jobs.claim_v1: claim up to batch_size jobs of the given queues for worker_id.
-- Arguments: queues (non-empty), worker_id, batch_size (1), visibility (30 s lease),
-- drop_exhausted (job names that end 'failed' instead of 'dead' when their final attempt's lease
-- lapses, because they do not dead-letter) and recover_lapsed (true: this call also buries and
-- re-takes rows whose lease lapsed). A worker passes recover_lapsed true about once a second and
-- false between: the scan for lapsed leases reads every dead entry of jobs_lease_idx that a
-- vacuum has not yet removed, which after a burst of work costs more than the claim itself.
-- Order: first rows whose lease lapsed (a dead worker's, re-taken as a new attempt), then waiting
-- rows due now by priority (lower first), run_at, id. Paused queues are skipped. While a job
-- declares a concurrency limit (jobs.declare_job), its rows are handed out only while their
-- group (the job, or the job and its concurrency_key) runs fewer attempts than the limit, across
-- every claimer; a row held back stays waiting, burns no attempt and keeps its place.
-- Answers the claimed rows with state 'running' and their claim token, which every later call on
-- the attempt must present, and has_steps: whether the run may have stored steps, so a worker
-- reads the step history only of runs that may have one. Also answers, with state 'dead' or
-- 'failed', the rows it buried: running rows whose lease lapsed at attempt >= max_attempts,
-- settled in this statement with last_error 'LEASE_LAPSED_FINAL_ATTEMPT' and never handed out;
-- a burial counts as dead (or failed) in the counters. Never more claimed rows than batch_size
-- (the candidates are materialised before the update).
-- One function, not a wrapper: a second PL/pgSQL layer materialised every answer twice and
-- cost about 0.1 ms of a pickup's claim.
-- Raises X_JOB_CLAIM_QUEUES_EMPTY, X_ARGUMENT_INVALID. Locks: the rows it answers.
create function jobs.claim_v1(
  queues text[],
  worker_id text,
  batch_size integer default 1,
  visibility interval default interval '30 seconds',
  drop_exhausted text[] default '{}',
  recover_lapsed boolean default true
)
returns setof jobs.claimed_job
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
-- the statements' plans are kept: re-planning them on every call, as the plan cache would
-- choose to, is most of an idle worker's pickup claim
set plan_cache_mode = force_generic_plan
-- and a kept plan must hold however the table grows: one made while the table was a page, with
-- a sequential scan, read a backlog that filled it since on every claim (tests/pgtap/032). A
-- statement that must read a small table whole still does, priced past the JIT threshold:
-- JIT off
set enable_seqscan = off
set jit = off
as $$
declare
  v_now timestamptz := jobs._now();
  v_queues text[];
  v_queue text;
  v_taken integer := 0;
  v_room integer;
  v_limited boolean;
  v_setting text;
  v_marks jsonb;
  v_head text[];
  v_starts_p integer[];
  v_starts_r timestamptz[];
  v_starts_i uuid[];
  v_walked bigint;
  v_ids uuid[];
  v_taken_q text[];
  v_taken_p integer[];
  v_taken_r timestamptz[];
begin
  -- An idle worker's pickup waits on every expression here: each one costs a few microseconds
  -- on a backend that slept, so the checks are one test each on the way every claim takes, and
  -- which argument failed (in the order the errors are documented) is worked out only after.
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                      jobs._role_name('worker'), 'usage'))
     or jobs._any_binding() then
    if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                        jobs._role_name('worker'), 'usage')) then
      perform jobs._denied(array['worker'], 'jobs.claim_v1');
    end if;
    perform jobs._refuse_bound('jobs.claim_v1');
  end if;
  if queues is null or cardinality(queues) not between 1 and 1000 or array_ndims(queues) <> 1
     or worker_id is null or worker_id !~ '[^[:space:]]' or length(worker_id) > 200
     or batch_size is null or batch_size not between 1 and 1000
     or visibility is null or visibility <= interval '0' or visibility > interval '1 day'
     or drop_exhausted is null or recover_lapsed is null then
    if queues is null or cardinality(queues) not between 1 and 1000
       or array_ndims(queues) <> 1 then
      perform jobs._raise(
        'X_JOB_CLAIM_QUEUES_EMPTY',
        'jobs.claim_v1: queues must be a one-dimensional array of 1 to 1000 queue names',
        jsonb_build_object('function', 'jobs.claim_v1', 'argument', 'queues'));
    end if;
    perform jobs._check_labels('jobs.claim_v1', 'queues', claim_v1.queues);
    perform jobs._check_label('jobs.claim_v1', 'worker_id', claim_v1.worker_id);
    if batch_size is null or batch_size not between 1 and 1000 then
      perform jobs._invalid('jobs.claim_v1', 'batch_size', 'must be an integer from 1 to 1000');
    end if;
    if visibility is null or visibility <= interval '0' or visibility > interval '1 day' then
      perform jobs._invalid('jobs.claim_v1', 'visibility',
                            'must be a positive interval of at most 1 day');
    end if;
    if drop_exhausted is null then
      perform jobs._invalid('jobs.claim_v1', 'drop_exhausted',
                            'must be an array (empty for none)');
    end if;
    perform jobs._invalid('jobs.claim_v1', 'recover_lapsed', 'must be true or false');
  end if;
  foreach v_queue in array queues loop
    if v_queue is null or v_queue !~ '[^[:space:]]' or length(v_queue) > 200 then
      perform jobs._check_labels('jobs.claim_v1', 'queues', claim_v1.queues);
    end if;
  end loop;

  -- The claim of one queue that needs nothing but its waiting rows (no scan for lapsed leases,
  -- no claim marks in this session) is one statement: the checks every claim must make (the
  -- queue not paused, no limit standing) are gates of that statement, read before its scan.
  -- An idle worker's pickup waits on it: run as the general claim below, it cost about 0.1 ms
  -- more on a backend that slept.
  v_setting := coalesce(current_setting('jobs.claim_marks', true), '');
  if not recover_lapsed and cardinality(queues) = 1 and v_setting = '' then
    v_walked := pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass);
    return query
      with chosen as materialized (
        select j.id
          from jobs.jobs_live j
         where j.queue = claim_v1.queues[1]
           and j.capped = false
           and j.state in ('ready', 'delayed', 'suspended')
           and j.run_at <= v_now
           -- a pause is a row, read here, so it takes effect at every worker's next claim
           and not exists (select 1 from jobs.queue_pauses p where p.queue = claim_v1.queues[1])
           -- no limit stands (018_limits_standing: one row, not the two tables it counts)
           and not exists (select 1 from jobs.limits_standing l where l.standing > 0)
         order by j.priority, j.run_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      claimed as (
        -- by primary key
        update jobs.jobs_live j
           set state = 'running',
               claimed_by = claim_v1.worker_id,
               claimed_at = v_now,
               lease_expires_at = v_now + claim_v1.visibility,
               claims = j.claims + 1,
               attempt = j.attempt + 1,
               updated_at = v_now
         where j.id = any(array(select chosen.id from chosen))
        returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                  j.max_attempts, j.claims, j.priority, j.run_at, j.created_at,
                  j.lease_expires_at, j.last_error, j.traceparent, j.enqueued_by
      )
      select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
             c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
             c.last_error, c.traceparent, c.enqueued_by,
             -- as in the hand-out of the general claim below
             c.attempt > 1
               or (select true from jobs.steps s where s.run_id = c.run_id
                    order by s.run_id, s.name limit 1) is not null
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
    -- a read from the head that walked past the limit keeps marks, as the general claim does
    -- (031_claim_marks). The keys handed out are read back as the row versions this
    -- transaction wrote (none when it wrote none; inside a savepoint they carry the
    -- subtransaction's id, and the marks then start at the head, which costs only a walk)
    if pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass) - v_walked - v_taken
         > jobs._claim_walk_limit() then
      select array_agg(t.queue), array_agg(t.priority), array_agg(t.run_at), array_agg(t.id)
        into v_taken_q, v_taken_p, v_taken_r, v_ids
        from (
          select j.queue, j.priority, j.run_at, j.id
            from jobs.jobs_live j
           where j.state = 'running'
             and j.lease_expires_at = v_now + claim_v1.visibility
             and j.claimed_by = claim_v1.worker_id
             and j.xmin = pg_current_xact_id_if_assigned()::xid
           order by j.priority, j.run_at, j.id
        ) t;
      perform jobs._claim_marks_keep(null, claim_v1.queues, true,
                                     clock_timestamp() + jobs._claim_rescan(),
                                     v_taken_q, v_taken_p, v_taken_r, v_ids);
    end if;
    if v_taken > 0
       or not exists (select 1 from jobs.limits_standing l where l.standing > 0) then
      return;
    end if;
    -- nothing handed out while a limit stands: the general claim hands out under it
  end if;
  -- the general claim: first the queues not paused (a pause is a row, read here, so it takes
  -- effect at every worker's next claim) and whether any limit exists
  select coalesce(array_agg(distinct q.name)
                    filter (where not exists (select 1
                                                from jobs.queue_pauses p
                                               where p.queue = q.name)),
                  '{}'),
         exists (select 1 from jobs.limits_standing l where l.standing > 0)
    into v_queues, v_limited
    from unnest(claim_v1.queues) as q(name);

  if cardinality(v_queues) = 0 then
    return;
  end if;

  v_taken := 0;
  -- the scans for lapsed leases step over every dead entry of jobs_lease_idx until a vacuum
  -- removes them: a busy worker asks for them about once a second, not on every claim
  if recover_lapsed then
    -- unflag: an enqueue that read a limit before the clear of the last one committed wrote its
    -- row capped, where the clear's unflagging could not see it. With no limit standing only
    -- the claims of uncapped rows run, so such a row would wait for the next limit set. The
    -- range of jobs_claim_idx this reads is empty but for such rows
    if not v_limited then
      update jobs.jobs_live j
         set capped = false
       where j.id = any(array(
               -- each queue on its own, in jobs_claim_idx order, as the claim reads it
               select c.id
                 from unnest(v_queues) as q(queue)
                 cross join lateral (
                   select s.id
                     from jobs.jobs_live s
                    where s.queue = q.queue
                      and s.capped = true
                      and s.state in ('ready', 'delayed', 'suspended')
                    order by s.priority, s.run_at, s.id
                    limit 1000
                      for update skip locked
                 ) c))
         -- read again: a limit set since v_limited was read marks its rows itself
         and not exists (select 1 from jobs.limits_standing l where l.standing > 0);
    end if;
    -- bury: a row whose lease lapsed on its final attempt would take a worker per lease forever
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt >= j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      -- by primary key: as a join, statistics that call the table empty could have it read
      -- whole, each lapsed row looked up in it
      gone as (
        delete from jobs.jobs_live j
         where j.id = any(array(select l.id from lapsed l))
        returning j
      ),
      buried as (
        insert into jobs.jobs_history as h
        select e.*
          from gone g
         cross join lateral jobs._ended(
                 g.j,
                 case when (g.j).name = any(drop_exhausted) then 'failed' else 'dead' end,
                 v_now, error => 'LEASE_LAPSED_FINAL_ATTEMPT') e
        returning h.id, h.run_id, h.name, h.queue, h.input, h.tenant_id, h.state, h.attempt,
                  h.max_attempts, h.claims, h.priority, h.run_at, h.created_at,
                  h.lease_expires_at, h.last_error, h.traceparent, h.enqueued_by, h.claimed_at,
                  h.parent_id
      ),
      -- a burial ends the row, so it counts where a settle would, and wakes a waiting parent
      counted as (
        select jobs._count_settled(v_now, array_agg(b.name), array_agg(b.state),
                                   array_agg(b.claimed_at)),
               case when bool_or(b.parent_id is not null) then
                 jobs._wake_parents(array_agg(b.id) filter (where b.parent_id is not null),
                                    array_agg(b.parent_id) filter (where b.parent_id is not null))
               end
          from buried b
      )
      select b.id, b.run_id, b.name, b.queue, b.input, b.tenant_id, b.state, b.attempt,
             b.max_attempts, b.claims, b.priority, b.run_at, b.created_at, b.lease_expires_at,
             b.last_error, b.traceparent, b.enqueued_by,
             b.attempt > 1
               or (select true from jobs.steps s where s.run_id = b.run_id
                    order by s.run_id, s.name limit 1) is not null
        from buried b
       cross join counted;
    if found then
      perform jobs._settled();
    end if;

    -- re-take: a dead worker's row with attempts left comes back as a new, counted attempt
    return query
      with lapsed as materialized (
        select j.id
          from jobs.jobs_live j
         where j.state = 'running'
           and j.lease_expires_at <= v_now
           and j.queue = any(v_queues)
           and j.attempt < j.max_attempts
         order by j.lease_expires_at, j.id
         limit claim_v1.batch_size
           for update skip locked
      ),
      claimed as (
        update jobs.jobs_live j
           set claimed_by = claim_v1.worker_id,
               claimed_at = v_now,
               lease_expires_at = v_now + claim_v1.visibility,
               claims = j.claims + 1,
               attempt = j.attempt + 1,
               updated_at = v_now
         where j.id = any(array(select l.id from lapsed l))
        returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                  j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                  j.last_error, j.traceparent, j.enqueued_by
      )
      select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
             c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
             c.last_error, c.traceparent, c.enqueued_by,
             c.attempt > 1
               or (select true from jobs.steps s where s.run_id = c.run_id
                    order by s.run_id, s.name limit 1) is not null
        from claimed c
       order by c.priority, c.run_at, c.id;
    get diagnostics v_taken = row_count;
  end if;

  if v_taken >= batch_size then
    return;
  end if;
  v_room := batch_size - v_taken;

  if v_limited then
    return query
      select l.id, l.run_id, l.name, l.queue, l.input, l.tenant_id, l.state, l.attempt,
             l.max_attempts, l.claim, l.priority, l.run_at, l.created_at, l.lease_expires_at,
             l.last_error, l.traceparent, l.enqueued_by,
             coalesce(l.has_steps,
                      l.attempt > 1
                        or (select true from jobs.steps s where s.run_id = l.run_id
                             order by s.run_id, s.name limit 1) is not null)
        from jobs._claim_limited('jobs.claim_v1', v_queues, worker_id, v_room, visibility, v_now) l;
    return;
  end if;

  -- where each queue's scan starts: at the head of jobs_claim_idx, or after this session's
  -- standing mark while a held horizon leaves the head full of dead entries (031_claim_marks)
  v_setting := current_setting('jobs.claim_marks', true);
  if v_setting is null or v_setting = '' then
    v_starts_p := array_fill(-2147483648, array[cardinality(v_queues)]);
    v_starts_r := array_fill('-infinity'::timestamptz, array[cardinality(v_queues)]);
    v_starts_i := array_fill('00000000-0000-0000-0000-000000000000'::uuid,
                             array[cardinality(v_queues)]);
    v_head := v_queues;
  else
    v_marks := v_setting::jsonb;
    select m.priorities, m.run_ats, m.ids
      into v_starts_p, v_starts_r, v_starts_i
      from jobs._claim_marks_of(v_queues, v_marks, clock_timestamp()) m;
    select coalesce(array_agg(q.queue), '{}')
      into v_head
      from unnest(v_queues, v_starts_p) as q(queue, start)
     where q.start = -2147483648;
  end if;
  v_walked := pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass);

  -- hand out waiting rows due now; skip locked: a second claimer must not wait for this one.
  -- Each queue is read on its own, in jobs_claim_idx order from its start, so the scan stops
  -- after the rows it needs: `queue = any(...)` would read and sort every waiting row of every
  -- queue instead.
  -- the arrays keep the hand-out order the subquery sorted in (one sort, not four)
  select array_agg(d.id), array_agg(d.queue), array_agg(d.priority), array_agg(d.run_at)
    into v_ids, v_taken_q, v_taken_p, v_taken_r
    from (
      select w.id, q.queue, w.priority, w.run_at
        from unnest(v_queues, v_starts_p, v_starts_r, v_starts_i) as q(queue, p, r, i)
        cross join lateral (
          select j.id, j.priority, j.run_at
            from jobs.jobs_live j
           where j.queue = q.queue
             and j.capped = false
             and j.state in ('ready', 'delayed', 'suspended')
             and (j.priority, j.run_at, j.id) > (q.p, q.r, q.i)
             and j.run_at <= v_now
           order by j.priority, j.run_at, j.id
           limit v_room
             for update skip locked
        ) w
       order by w.priority, w.run_at, w.id
       limit v_room
    ) d;

  -- the entries the scans walked beyond the rows they took: dead ones a held horizon keeps
  v_walked := pg_stat_get_xact_tuples_returned('jobs.jobs_claim_idx'::regclass) - v_walked
              - coalesce(cardinality(v_ids), 0);
  if v_marks is not null or v_walked > jobs._claim_walk_limit() then
    perform jobs._claim_marks_keep(v_marks, v_head, v_walked > jobs._claim_walk_limit(),
                                   clock_timestamp() + jobs._claim_rescan(),
                                   v_taken_q, v_taken_p, v_taken_r, v_ids);
  end if;
  if v_ids is null then
    return;
  end if;

  return query
    with claimed as (
      -- by primary key
      update jobs.jobs_live j
         set state = 'running',
             claimed_by = claim_v1.worker_id,
             claimed_at = v_now,
             lease_expires_at = v_now + claim_v1.visibility,
             claims = j.claims + 1,
             attempt = j.attempt + 1,
             updated_at = v_now
       where j.id = any(v_ids)
      returning j.id, j.run_id, j.name, j.queue, j.input, j.tenant_id, j.state, j.attempt,
                j.max_attempts, j.claims, j.priority, j.run_at, j.created_at, j.lease_expires_at,
                j.last_error, j.traceparent, j.enqueued_by
    )
    select c.id, c.run_id, c.name, c.queue, c.input, c.tenant_id, c.state, c.attempt,
           c.max_attempts, c.claims, c.priority, c.run_at, c.created_at, c.lease_expires_at,
           c.last_error, c.traceparent, c.enqueued_by,
           -- a run past its first attempt always reads its history: a body whose lease lapsed
           -- may have written a step after this statement's snapshot was taken. The probe walks
           -- the primary key's order, so no plan can hash every step instead
           c.attempt > 1
             or (select true from jobs.steps s where s.run_id = c.run_id
                  order by s.run_id, s.name limit 1) is not null
      from claimed c
     order by c.priority, c.run_at, c.id;
end;
$$;

-- jobs.worker_running_v1: the rows worker_id holds running, with their claim tokens. A worker
-- whose wait for a claim was cut by a cancel asks it before it stops: the claim may have
-- committed while its answer was thrown away, and the rows it does not know it holds go back
-- uncounted (jobs.nack_v1, fenced on these tokens) instead of lapsing as counted attempts.
-- Reads the running rows only (jobs_lease_idx, which every running row is in: it has a lease).
-- Answers (id, claim), in no particular order.
-- Raises X_ARGUMENT_INVALID for a NULL or blank worker_id. Locks nothing.
create function jobs.worker_running_v1(worker_id text)
returns table (id uuid, claim bigint)
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker'], 'jobs.worker_running_v1');
  perform jobs._check_label('jobs.worker_running_v1', 'worker_id', worker_running_v1.worker_id);
  return query
    select j.id, j.claims
      from jobs.jobs_live j
     where j.state = 'running'
       and j.lease_expires_at is not null
       and j.claimed_by = worker_running_v1.worker_id;
end;
$$;
