-- 013_wake: what a wake on the channel jobs_wake says. Any role that can connect may LISTEN on
-- any channel, so the payload names no queue: it is a token made from the queue's name and a
-- secret only the schema's owner reads. A worker asks for its queues' tokens once
-- (jobs.wake_tokens) and wakes on those alone; a listener without the secret learns nothing,
-- and a wake it sends costs a worker at most one claim.
--
-- Tables: jobs.wake_secret (one row, made at install; read by the functions only). Locks
-- nothing.

create table jobs.wake_secret (
  only_row boolean primary key default true check (only_row),
  secret text not null
);

insert into jobs.wake_secret (secret)
values (encode(sha256(convert_to(gen_random_uuid()::text || clock_timestamp()::text, 'UTF8')),
               'hex'));

-- jobs._wake_token: the payload of a wake for `queue`: 32 hex digits of a hash of the secret and
-- the name. Answers text. Raises nothing.
create function jobs._wake_token(queue text)
returns text
language sql
stable
set search_path = pg_catalog, pg_temp
as $$
  select left(encode(sha256(convert_to(s.secret || ':' || queue, 'UTF8')), 'hex'), 32)
    from jobs.wake_secret s
$$;

-- jobs.wake_tokens: the wake token of each of `queues`, for a worker's listener.
-- Arguments: queues (names, as jobs.claim_v1 takes them). Answers (queue, token) per distinct
-- queue. Raises X_ARGUMENT_INVALID, X_PERMISSION_DENIED. Locks nothing.
create function jobs.wake_tokens(queues text[])
returns table (queue text, token text)
language plpgsql
security definer
stable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform jobs._require(array['worker'], 'jobs.wake_tokens');
  perform jobs._check_labels('jobs.wake_tokens', 'queues', wake_tokens.queues);
  return query
    select q.name, jobs._wake_token(q.name)
      from (select distinct u.name from unnest(wake_tokens.queues) u (name)) q
     order by q.name;
end;
$$;
