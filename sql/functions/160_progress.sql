-- 160_progress: how far a running attempt has got, as its body reports it.
--
-- Tables: jobs.jobs_live (update of progress). Locks: the reported row. Fenced like a heartbeat,
-- so a body whose lease lapsed cannot report on the attempt that replaced it. The worker
-- throttles the calls (at most one a second per run, plus the last before the settle).

-- jobs.progress_v1: record a running attempt's progress.
-- Arguments: id, worker_id, claim (the attempt's fence), done (at least 0), total (NULL when
-- unknown; else at least 0), both finite, note (NULL, at most 1,000 characters).
-- Writes progress = {"done", "total", "note", "at"} on the row. Answers whether it landed.
-- Raises X_ARGUMENT_INVALID. Locks the row.
create function jobs.progress_v1(
  id uuid,
  worker_id text,
  claim bigint,
  done numeric,
  total numeric default null,
  note text default null
)
returns boolean
language plpgsql
security definer
volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := jobs._now();
begin
  -- the caller's kind, inline: a call of jobs._require costs a hot call more than the test
  if not (pg_has_role(coalesce(nullif(current_setting('role'), 'none'), session_user)::name,
                     jobs._role_name('worker'), 'usage')) then
    perform jobs._denied(array['worker'], 'jobs.progress_v1');
  end if;
  if jobs._any_binding() then
    perform jobs._refuse_bound('jobs.progress_v1');
  end if;
  perform jobs._check_fence('jobs.progress_v1', progress_v1.id, progress_v1.worker_id,
                            progress_v1.claim);
  -- numeric has NaN and Infinity, which compare above every number: refuse them by name
  if done is null or done < 0 or done in ('NaN', 'Infinity') then
    perform jobs._invalid('jobs.progress_v1', 'done', 'must be a finite number of at least 0');
  end if;
  if total < 0 or total in ('NaN', 'Infinity') then
    perform jobs._invalid('jobs.progress_v1', 'total',
                          'must be NULL or a finite number of at least 0');
  end if;
  if length(note) > 1000 then
    perform jobs._invalid('jobs.progress_v1', 'note', 'must be at most 1,000 characters');
  end if;

  update jobs.jobs_live j
     set progress = jsonb_build_object('done', progress_v1.done, 'total', progress_v1.total,
                                       'note', progress_v1.note, 'at', v_now)
   where j.id = progress_v1.id
     and j.state = 'running'
     and j.claimed_by = progress_v1.worker_id
     and j.claims = progress_v1.claim;
  return found;
end;
$$;
