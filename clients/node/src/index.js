// @ts-check
/**
 * @module @durajobs/client
 *
 * The reference Node client of durajobs. The semantics live in PostgreSQL (schema `jobs`); this
 * module only calls the functions there, in named notation, sending the optional arguments it
 * was given and nothing else, so the SQL defaults apply exactly as they do for psql and Python.
 *
 * - `enqueue`, `enqueueMany`: the public verbs.
 * - `claim`, `ack`, `nack`, `heartbeat`, `recordStep`, `steps`, `progress`, and the registry
 *   calls: the versioned worker protocol (`jobs.*_v1`), one SQL call each.
 * - `Worker`: a worker built on them, settling each attempt the way the Python worker does.
 *
 * Every write after a claim carries the claim's fence `{id, workerId, claim}`. A stale fence
 * changes nothing: `ack`/`nack` answer false, `heartbeat` answers 'lost' (or 'cancelled'), and
 * `recordStep` rejects with X_JOB_LEASE_LOST.
 */

import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';

// ---------------------------------------------------------------------------------------------
// types

/**
 * Anything that runs one statement: a `pg.Pool`, a `pg.Client` or a pool's checked-out client.
 * A `pg.Client` inside `begin` makes the call part of that transaction (a transactional enqueue).
 * @typedef {{ query: (text: string, values?: unknown[]) => Promise<{ rows: any[] }> }} Queryable
 */

/**
 * What identifies one claimed attempt. Every write after the claim must present all three.
 * @typedef {{ id: string, workerId: string, claim: number | string | bigint }} Fence
 */

/**
 * @typedef {object} EnqueueOptions
 * @property {string} name the job's name (what to run)
 * @property {Record<string, unknown>} input the job's arguments: a JSON object
 * @property {string} idempotencyKey names the unit of work; unique per (name, tenant) while live
 * @property {string} [queue] SQL default 'default'
 * @property {Date | string} [runAt] SQL default now; later than now gives state 'delayed'
 * @property {number} [maxAttempts] SQL default 20
 * @property {number} [priority] SQL default 0; lower runs first
 * @property {string} [tenantId] SQL default none
 * @property {'dedupe' | 'error'} [onConflict] SQL default 'dedupe'
 * @property {string} [id] a caller-made job id (SQL default: a new UUIDv7)
 * @property {string} [runId] continue this run's step history (SQL default: the job's own id)
 * @property {string} [traceparent] W3C trace context handed to the worker
 * @property {string} [enqueuedBy] free text: who enqueued it
 */

/** @typedef {{ id: string, runId: string, deduped: boolean }} EnqueueResult */

/**
 * A row of `jobs.claim_v1`, with the claimant's worker id so that it is its own fence.
 * `buried` rows (state 'dead' or 'failed') were settled by the claim itself: never run them.
 * @typedef {object} ClaimedJob
 * @property {string} id
 * @property {string} runId
 * @property {string} name
 * @property {string} queue
 * @property {any} input
 * @property {string | null} tenantId
 * @property {'running' | 'dead' | 'failed'} state
 * @property {number} attempt
 * @property {number} maxAttempts
 * @property {number} claim the claim token: pass it back on every write of this attempt
 * @property {number} priority
 * @property {Date} runAt
 * @property {Date} createdAt
 * @property {Date | null} leaseExpiresAt
 * @property {string | null} lastError
 * @property {string | null} traceparent
 * @property {string | null} enqueuedBy
 * @property {boolean} hasSteps whether the run may have stored steps to replay
 * @property {string} workerId
 * @property {boolean} buried
 */

/**
 * @typedef {object} StepRecord
 * @property {string} name
 * @property {'completed' | 'sleeping' | 'waiting' | 'failed'} status
 * @property {any} output
 * @property {string | null} error
 * @property {number} attempts
 * @property {Date} startedAt
 * @property {Date | null} finishedAt
 * @property {Date | null} wakeAt
 */

/** @typedef {'ok' | 'cancelled' | 'lost'} HeartbeatAnswer */

/**
 * What a handler receives next to the job.
 * @typedef {object} JobContext
 * @property {AbortSignal} signal aborted when the attempt must stop: lease lost
 *   (reason code X_JOB_LEASE_LOST), cancelled by an operator (X_JOB_CANCELLED) or a drain's
 *   deadline (X_DRAINING). Whatever the body does afterwards, nothing it returns lands.
 * @property {<T>(name: string, fn: (signal: AbortSignal) => T | Promise<T>) => Promise<T>} step
 *   a durable step: run `fn` once ever for this run and store its JSON result; a later attempt
 *   answers the stored result without calling `fn`.
 * @property {(done: number, total?: number, note?: string) => Promise<boolean>} progress
 *   `jobs.progress_v1`, fenced on the claim
 * @property {string} workerId
 * @property {boolean} finalAttempt
 */

/**
 * @callback Handler
 * @param {ClaimedJob} job
 * @param {JobContext} ctx
 * @returns {unknown}
 */

/**
 * `(attempt, error) => delay in ms` before the next attempt, or the policy's numbers.
 * @typedef {((attempt: number, error: unknown) => number)
 *   | { delayMs?: number, maxDelayMs?: number, jitter?: boolean }} Backoff
 */

/**
 * `(level, event, fields)`; the default writes warnings and errors to stderr as JSON lines.
 * @typedef {(level: 'info' | 'warn' | 'error', event: string, fields: Record<string, unknown>) => void} Log
 */

/**
 * @typedef {object} WorkerOptions
 * @property {pg.Pool} [pool] a pool to use (left open by `stop()`)
 * @property {string | pg.PoolConfig} [connectionString] a URL, a libpq conninfo
 *   (`host=... dbname=...`) or a pg config: the worker makes and ends its own pool
 * @property {string[]} queues the queues to claim from
 * @property {Record<string, Handler>} handlers one handler per job name
 * @property {string} [workerId] default `<host>:<pid>:<8 hex>`
 * @property {number} [concurrency] attempts in flight at most (8)
 * @property {number} [batchSize] rows one claim asks for at most (the concurrency)
 * @property {number} [visibilityMs] the lease (30 000); renewed every third of it
 * @property {Backoff} [backoff] default exponential from 1 s, capped at 1 h, equal jitter
 * @property {number} [pollFloorMs] the first idle wait (200)
 * @property {number} [idleCeilingMs] the idle wait doubles up to this (2 000)
 * @property {number} [drainDeadlineMs] how long `stop()` waits for running attempts (25 000)
 * @property {Log} [log]
 */

// ---------------------------------------------------------------------------------------------
// errors

/**
 * A durajobs error: `code` is the stable X_* code, `sqlstate` the JQnnn it was raised with (when
 * it came from the database), `detail` the parsed DETAIL object, `hint` the fix.
 */
export class DurajobsError extends Error {
  /**
   * @param {string} code
   * @param {string} message
   * @param {{ sqlstate?: string | null, detail?: Record<string, unknown>, hint?: string | null,
   *   cause?: unknown }} [extra]
   */
  constructor(code, message, extra = {}) {
    super(message.startsWith(code) ? message : `${code}: ${message}`,
      extra.cause === undefined ? undefined : { cause: extra.cause });
    this.name = 'DurajobsError';
    /** @type {string} */
    this.code = code;
    /** @type {string | null} */
    this.sqlstate = extra.sqlstate ?? null;
    /** @type {Record<string, unknown>} */
    this.detail = extra.detail ?? {};
    /** @type {string | null} */
    this.hint = extra.hint ?? null;
  }
}

const CODE_PREFIX = /^(X_[A-Z0-9_]+): /;

/**
 * Turn a node-postgres error raised by a durajobs function (SQLSTATE class JQ, message
 * `X_CODE: ...`, DETAIL a JSON object with "code") into a DurajobsError. Anything else (a
 * connection error, Postgres' own 22008, ...) is answered as it is: its `code` is the SQLSTATE.
 * @param {unknown} error
 * @returns {unknown}
 */
export function fromDatabaseError(error) {
  if (!(error instanceof Error) || error instanceof DurajobsError) return error;
  const raw = /** @type {Error & { code?: unknown, detail?: unknown, hint?: unknown }} */ (error);
  const sqlstate = typeof raw.code === 'string' ? raw.code : null;
  const prefixed = CODE_PREFIX.exec(raw.message);
  if (!(sqlstate && sqlstate.startsWith('JQ')) && !prefixed) return error;
  /** @type {Record<string, unknown>} */
  let detail = {};
  if (typeof raw.detail === 'string') {
    try {
      const parsed = JSON.parse(raw.detail);
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) detail = parsed;
    } catch {
      detail = { text: raw.detail };
    }
  }
  // DETAIL's code is the contract; the message prefix is the same code for people
  const code = typeof detail.code === 'string' ? detail.code : prefixed ? prefixed[1] : sqlstate;
  return new DurajobsError(/** @type {string} */ (code), raw.message, {
    sqlstate,
    detail,
    hint: typeof raw.hint === 'string' ? raw.hint : null,
    cause: error,
  });
}

/**
 * @param {string} code
 * @param {string} message
 * @param {Record<string, unknown>} [detail]
 */
function fail(code, message, detail = {}) {
  return new DurajobsError(code, message, { detail: { ...detail, code } });
}

// ---------------------------------------------------------------------------------------------
// connection strings

/**
 * Parse a libpq keyword/value conninfo (`host=localhost port=5432 dbname='my db'`) into its
 * keywords, as libpq reads it: `key = value`, a value single-quoted to hold spaces, `\'` and
 * `\\` escaped with a backslash.
 * @param {string} conninfo
 * @returns {Record<string, string>}
 */
export function parseConninfo(conninfo) {
  /** @type {Record<string, string>} */
  const out = {};
  let i = 0;
  const text = String(conninfo);
  const space = (/** @type {string} */ c) => c === ' ' || c === '\t' || c === '\n' || c === '\r';
  while (i < text.length) {
    while (i < text.length && space(text[i])) i++;
    if (i >= text.length) break;
    let key = '';
    while (i < text.length && text[i] !== '=' && !space(text[i])) key += text[i++];
    while (i < text.length && space(text[i])) i++;
    if (text[i] !== '=' || !key) {
      throw fail('X_ARGUMENT_INVALID', `conninfo: missing "=" after "${key}"`, { argument: 'conninfo' });
    }
    i++;
    while (i < text.length && space(text[i])) i++;
    let value = '';
    if (text[i] === "'") {
      i++;
      for (;;) {
        if (i >= text.length) {
          throw fail('X_ARGUMENT_INVALID', `conninfo: unterminated quoted value of "${key}"`,
            { argument: 'conninfo' });
        }
        const c = text[i++];
        if (c === "'") break;
        value += c === '\\' && i < text.length ? text[i++] : c;
      }
    } else {
      while (i < text.length && !space(text[i])) {
        const c = text[i++];
        value += c === '\\' && i < text.length ? text[i++] : c;
      }
    }
    out[key] = value; // as libpq: a repeated keyword keeps its last value
  }
  return out;
}

/**
 * A node-postgres config from a URL (`postgres://...`), or from a libpq keyword/value conninfo,
 * which node-postgres does not read. Missing fields fall back to PG* variables, as in pg.
 * @param {string} conninfo
 * @returns {pg.ClientConfig}
 */
export function configFromConninfo(conninfo) {
  if (/^postgres(ql)?:\/\//.test(conninfo)) return { connectionString: conninfo };
  const keys = parseConninfo(conninfo);
  /** @type {pg.ClientConfig} */
  const config = {};
  if (keys.host) config.host = keys.host;
  else if (keys.hostaddr) config.host = keys.hostaddr;
  if (keys.port) config.port = Number(keys.port);
  if (keys.user) config.user = keys.user;
  if (keys.password !== undefined) config.password = keys.password;
  if (keys.dbname) config.database = keys.dbname;
  if (keys.application_name) config.application_name = keys.application_name;
  if (keys.options) config.options = keys.options;
  if (keys.connect_timeout) config.connectionTimeoutMillis = Number(keys.connect_timeout) * 1000;
  const sslmode = keys.sslmode;
  if (sslmode === 'require') config.ssl = { rejectUnauthorized: false };
  else if (sslmode === 'verify-ca' || sslmode === 'verify-full') config.ssl = true;
  else if (sslmode) config.ssl = false; // disable, allow, prefer: pg cannot fall back, so plain
  return config;
}

// ---------------------------------------------------------------------------------------------
// calling the functions

/**
 * Build `fn(a => $1::type, ...)` from [name, value, type, required] entries. An optional argument
 * that is undefined or null is not sent, so the SQL default applies (passing NULL is refused by
 * most functions: docs/sql.md, "Calling the functions"). A required one is always sent, so a
 * missing value is refused by the function itself with its X_* code.
 * @param {string} fn
 * @param {Array<[string, unknown, string, boolean?]>} args
 */
function named(fn, args) {
  /** @type {unknown[]} */
  const values = [];
  /** @type {string[]} */
  const sent = [];
  for (const [name, value, type, required] of args) {
    if (!required && (value === undefined || value === null)) continue;
    values.push(value === undefined ? null : value);
    sent.push(`${name} => $${values.length}::${type}`);
  }
  return { call: `${fn}(${sent.join(', ')})`, values };
}

/**
 * @param {Queryable} db
 * @param {string} text
 * @param {unknown[]} values
 */
async function run(db, text, values) {
  try {
    return (await db.query(text, values)).rows;
  } catch (error) {
    throw fromDatabaseError(error);
  }
}

/**
 * JSON text for a `::jsonb` parameter: one jsonb value, never a double-encoded string and never
 * a Postgres array (node-postgres would turn a bare JS array into one). What jsonb refuses is
 * refused here with `code`, naming `argument`: the server's own refusal carries no X_* code.
 * @param {unknown} value
 * @param {string} [code]
 * @param {string} [argument]
 */
function json(value, code = 'X_ARGUMENT_INVALID', argument = 'input') {
  if (value === undefined) return null;
  const text = JSON.stringify(value);
  const refused = text === undefined ? null : REFUSED_BY_JSONB.exec(text);
  if (refused) {
    const what = refused[1] === '0000' ? 'a NUL character (\\u0000)' : 'a lone surrogate';
    throw fail(code, `${argument} holds ${what}, which jsonb refuses`, { argument });
  }
  return text;
}

// what JSON.stringify escapes that jsonb refuses: a NUL, and a lone surrogate (a well-formed
// pair is written as itself), each after an even run of backslashes (an odd one is a literal)
const REFUSED_BY_JSONB = /(?<!\\)(?:\\\\)*\\u(0000|d[89a-f][0-9a-f]{2})/i;

/** @param {unknown} value */
function instant(value) {
  return value instanceof Date ? value.toISOString() : value;
}

// about 31,700 years: every interval argument of the functions is bounded far below this
const MAX_INTERVAL_MS = 1e15;

/**
 * An interval parameter from milliseconds, as whole microseconds: a number's own text turns to
 * an exponent below 1e-6 (`1e-7`), which Postgres' interval input refuses.
 * @param {unknown} ms
 * @param {string} argument
 */
function interval(ms, argument) {
  if (ms === undefined || ms === null) return null;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || Math.abs(ms) > MAX_INTERVAL_MS) {
    throw fail('X_ARGUMENT_INVALID',
      `${argument} must be a finite number of milliseconds, at most ${MAX_INTERVAL_MS} either way`,
      { argument });
  }
  return `${BigInt(Math.round(ms * 1000))} microseconds`;
}

/**
 * @param {string} value
 * @param {readonly string[]} known
 * @param {string} where
 */
function narrow(value, known, where) {
  if (!known.includes(value)) {
    // a newer schema wrote a value this client does not know: never guess
    throw fail('X_JOB_ROW_STATUS_UNKNOWN', `${where} answered ${JSON.stringify(value)}, which ` +
      `this client does not know (it knows ${known.join(', ')})`, { where, value });
  }
  return value;
}

/**
 * @param {Record<string, unknown>} given
 * @param {readonly string[]} allowed
 * @param {string} where
 */
function checkKeys(given, allowed, where) {
  for (const key of Object.keys(given)) {
    if (!allowed.includes(key)) throw new TypeError(`${where}: unknown option ${JSON.stringify(key)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// enqueue

const ENQUEUE_OPTIONS = /** @type {const} */ ([
  ['name', 'name', 'text', true],
  ['input', 'input', 'jsonb', true],
  ['idempotencyKey', 'idempotency_key', 'text', true],
  ['queue', 'queue', 'text'],
  ['tenantId', 'tenant_id', 'text'],
  ['runAt', 'run_at', 'timestamptz'],
  ['maxAttempts', 'max_attempts', 'integer'],
  ['priority', 'priority', 'integer'],
  ['id', 'id', 'uuid'],
  ['runId', 'run_id', 'uuid'],
  ['traceparent', 'traceparent', 'text'],
  ['enqueuedBy', 'enqueued_by', 'text'],
]);
const ENQUEUE_KEYS = [...ENQUEUE_OPTIONS.map(([key]) => key), 'onConflict'];

/** @param {any} row @returns {EnqueueResult} */
const enqueueResult = (row) => ({ id: row.id, runId: row.run_id, deduped: row.deduped });

/**
 * `jobs.enqueue`: put one job on a queue, or get back the live job holding its key
 * (`deduped: true`).
 * @param {Queryable} db
 * @param {EnqueueOptions} options
 * @returns {Promise<EnqueueResult>}
 */
export async function enqueue(db, options) {
  checkKeys(options, ENQUEUE_KEYS, 'enqueue');
  const given = /** @type {Record<string, unknown>} */ (options);
  /** @type {Array<[string, unknown, string, boolean?]>} */
  const args = ENQUEUE_OPTIONS.map(([key, name, type, required]) => {
    const value = key === 'input' ? json(given.input, 'X_JOB_INPUT_INVALID') : key === 'runAt' ? instant(given.runAt) : given[key];
    return [name, value, type, required];
  });
  args.push(['on_conflict', options.onConflict, 'text']);
  const { call, values } = named('jobs.enqueue', args);
  const rows = await run(db, `select id, run_id, deduped from ${call}`, values);
  return enqueueResult(rows[0]);
}

/**
 * `jobs.enqueue_many`: many jobs in one statement, answered in input order. Each request takes
 * `enqueue`'s options except `onConflict`, which applies to the whole batch.
 * @param {Queryable} db
 * @param {Array<Omit<EnqueueOptions, 'onConflict'>>} requests
 * @param {{ onConflict?: 'dedupe' | 'error' }} [options]
 * @returns {Promise<EnqueueResult[]>}
 */
export async function enqueueMany(db, requests, options = {}) {
  const keys = ENQUEUE_OPTIONS.map(([key]) => key);
  const encoded = requests.map((request) => {
    checkKeys(request, keys, 'enqueueMany');
    const given = /** @type {Record<string, unknown>} */ (request);
    /** @type {Record<string, unknown>} */
    const out = {};
    for (const [key, name] of ENQUEUE_OPTIONS) {
      const value = given[key];
      // a missing key takes the default; JSON null would be SQL NULL, refused for most keys
      if (value === undefined || value === null) continue;
      out[name] = instant(value);
    }
    return out;
  });
  const { call, values } = named('jobs.enqueue_many', [
    ['requests', json(encoded, 'X_JOB_INPUT_INVALID', 'requests'), 'jsonb', true],
    ['on_conflict', options.onConflict, 'text'],
  ]);
  const rows = await run(db, `select id, run_id, deduped from ${call}`, values);
  return rows.map(enqueueResult);
}

// ---------------------------------------------------------------------------------------------
// the worker protocol

const CLAIM_STATES = /** @type {const} */ (['running', 'dead', 'failed']);
const HEARTBEAT_ANSWERS = /** @type {const} */ (['ok', 'cancelled', 'lost']);
const STEP_STATUSES = /** @type {const} */ (['completed', 'sleeping', 'waiting', 'failed']);
const NEXT_STATES = /** @type {const} */ (['ready', 'suspended', 'dead', 'failed']);

const CLAIMED_COLUMNS = 'id, run_id, name, queue, input, tenant_id, state, attempt, max_attempts, ' +
  'claim, priority, run_at, created_at, lease_expires_at, last_error, traceparent, enqueued_by, has_steps';
const STEP_COLUMNS = 'name, status, output, error, attempts, started_at, finished_at, wake_at';

/**
 * @param {any} row
 * @param {string} workerId
 * @returns {ClaimedJob}
 */
function claimedJob(row, workerId) {
  const state = /** @type {ClaimedJob['state']} */ (narrow(row.state, CLAIM_STATES, 'jobs.claim_v1 state'));
  return {
    id: row.id,
    runId: row.run_id,
    name: row.name,
    queue: row.queue,
    input: row.input,
    tenantId: row.tenant_id,
    state,
    attempt: row.attempt,
    maxAttempts: row.max_attempts,
    claim: Number(row.claim), // bigint arrives as text; a row's claims never near 2^53
    priority: row.priority,
    runAt: row.run_at,
    createdAt: row.created_at,
    leaseExpiresAt: row.lease_expires_at,
    lastError: row.last_error,
    traceparent: row.traceparent,
    enqueuedBy: row.enqueued_by,
    hasSteps: row.has_steps === true,
    workerId,
    buried: state !== 'running',
  };
}

/** @param {any} row @returns {StepRecord} */
function stepRecord(row) {
  return {
    name: row.name,
    status: /** @type {StepRecord['status']} */ (narrow(row.status, STEP_STATUSES, 'step status')),
    output: row.output,
    error: row.error,
    attempts: row.attempts,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    wakeAt: row.wake_at,
  };
}

/** @param {Fence} fence @returns {Array<[string, unknown, string, boolean?]>} */
const fenceArgs = (fence) => [
  ['id', fence.id, 'uuid', true],
  ['worker_id', fence.workerId, 'text', true],
  ['claim', fence.claim === undefined || fence.claim === null ? null : String(fence.claim), 'bigint', true],
];

/**
 * `jobs.claim_v1`: claim up to `batchSize` due jobs. Check `buried` on every row: those were
 * dead-lettered by this call and must not run.
 * @param {Queryable} db
 * @param {{ queues: string[], workerId: string, batchSize?: number, visibilityMs?: number,
 *   dropExhausted?: string[], recoverLapsed?: boolean }} options
 * @returns {Promise<ClaimedJob[]>}
 */
export async function claim(db, options) {
  const { call, values } = named('jobs.claim_v1', [
    ['queues', options.queues, 'text[]', true],
    ['worker_id', options.workerId, 'text', true],
    ['batch_size', options.batchSize, 'integer'],
    ['visibility', interval(options.visibilityMs, 'visibilityMs'), 'interval'],
    ['drop_exhausted', options.dropExhausted, 'text[]'],
    ['recover_lapsed', options.recoverLapsed, 'boolean'],
  ]);
  const rows = await run(db, `select ${CLAIMED_COLUMNS} from ${call}`, values);
  return rows.map((row) => claimedJob(row, options.workerId));
}

/**
 * `jobs.ack_v1`: mark the attempt done. False: the fence missed (nothing changed).
 * @param {Queryable} db
 * @param {Fence} fence
 * @returns {Promise<boolean>}
 */
export async function ack(db, fence) {
  const { call, values } = named('jobs.ack_v1', fenceArgs(fence));
  const rows = await run(db, `select ${call} as landed`, values);
  return rows[0].landed === true;
}

/**
 * `jobs.nack_v1`: end the attempt without success. A counted 'ready' on the final attempt ends
 * 'dead' (the SQL decides). False: the fence missed.
 * @param {Queryable} db
 * @param {Fence} fence
 * @param {{ nextState?: 'ready' | 'suspended' | 'dead' | 'failed', delayMs?: number,
 *   countsAsAttempt?: boolean, error?: string | null, errorCode?: string | null,
 *   errorStack?: string | null }} [options]
 * @returns {Promise<boolean>}
 */
export async function nack(db, fence, options = {}) {
  if (options.nextState !== undefined) narrow(options.nextState, NEXT_STATES, 'nack nextState');
  const { call, values } = named('jobs.nack_v1', [
    ...fenceArgs(fence),
    ['next_state', options.nextState, 'text'],
    ['delay', interval(options.delayMs, 'delayMs'), 'interval'],
    ['counts_as_attempt', options.countsAsAttempt, 'boolean'],
    ['error', options.error, 'text'],
    ['error_code', options.errorCode, 'text'],
    ['error_stack', options.errorStack, 'text'],
  ]);
  const rows = await run(db, `select ${call} as landed`, values);
  return rows[0].landed === true;
}

/**
 * `jobs.heartbeat_v1`: renew the lease for `visibilityMs` from now.
 * @param {Queryable} db
 * @param {Fence} fence
 * @param {{ visibilityMs?: number }} [options]
 * @returns {Promise<HeartbeatAnswer>}
 */
export async function heartbeat(db, fence, options = {}) {
  const { call, values } = named('jobs.heartbeat_v1', [
    ...fenceArgs(fence),
    ['visibility', interval(options.visibilityMs, 'visibilityMs'), 'interval'],
  ]);
  const rows = await run(db, `select ${call} as answer`, values);
  return /** @type {HeartbeatAnswer} */ (narrow(rows[0].answer, HEARTBEAT_ANSWERS, 'jobs.heartbeat_v1'));
}

/**
 * `jobs.record_step_v1`: store a step's outcome for the claimed job's run. Rejects with
 * X_JOB_LEASE_LOST (stale fence), X_JOB_CANCELLED, or X_STEP_DUPLICATE (already completed).
 * @param {Queryable} db
 * @param {Fence} fence
 * @param {{ name: string, status: StepRecord['status'], output?: unknown, error?: string | null,
 *   wakeAt?: Date | string | null }} step
 * @returns {Promise<StepRecord>}
 */
export async function recordStep(db, fence, step) {
  const { call, values } = named('jobs.record_step_v1', [
    ...fenceArgs(fence),
    ['name', step.name, 'text', true],
    ['status', step.status, 'text', true],
    ['output', step.output === null ? null : json(step.output, 'X_STEP_OUTPUT_INVALID', 'output'), 'jsonb'],
    ['error', step.error, 'text'],
    ['wake_at', instant(step.wakeAt), 'timestamptz'],
  ]);
  const rows = await run(db, `select ${STEP_COLUMNS} from ${call}`, values);
  return stepRecord(rows[0]);
}

/**
 * `jobs.steps_v1`: a run's step records, in the order they started.
 * @param {Queryable} db
 * @param {string} runId
 * @returns {Promise<StepRecord[]>}
 */
export async function steps(db, runId) {
  const { call, values } = named('jobs.steps_v1', [['run_id', runId, 'uuid', true]]);
  const rows = await run(db, `select ${STEP_COLUMNS} from ${call}`, values);
  return rows.map(stepRecord);
}

/**
 * `jobs.progress_v1`: how far the attempt has got. False: the fence missed.
 * @param {Queryable} db
 * @param {Fence} fence
 * @param {{ done: number, total?: number | null, note?: string | null }} report
 * @returns {Promise<boolean>}
 */
export async function progress(db, fence, report) {
  const { call, values } = named('jobs.progress_v1', [
    ...fenceArgs(fence),
    ['done', report.done, 'numeric', true],
    ['total', report.total, 'numeric'],
    ['note', report.note, 'text'],
  ]);
  const rows = await run(db, `select ${call} as landed`, values);
  return rows[0].landed === true;
}

/**
 * `jobs.worker_announce`: register (or renew) a worker in `jobs.workers` for `ttlMs`.
 * @param {Queryable} db
 * @param {{ workerId: string, host: string, pid: number, queues: string[], slots: number,
 *   ttlMs?: number }} worker
 */
export async function workerAnnounce(db, worker) {
  const { call, values } = named('jobs.worker_announce', [
    ['worker_id', worker.workerId, 'text', true],
    ['host', worker.host, 'text', true],
    ['pid', worker.pid, 'integer', true],
    ['queues', worker.queues, 'text[]', true],
    ['slots', worker.slots, 'integer', true],
    ['ttl', interval(worker.ttlMs, 'ttlMs'), 'interval'],
  ]);
  await run(db, `select ${call}`, values);
}

/**
 * `jobs.worker_heartbeat`: keep the registry row live and record the jobs held. False: the row
 * is gone (announce again).
 * @param {Queryable} db
 * @param {{ workerId: string, inFlight?: string[], ttlMs?: number }} worker
 * @returns {Promise<boolean>}
 */
export async function workerHeartbeat(db, worker) {
  const { call, values } = named('jobs.worker_heartbeat', [
    ['worker_id', worker.workerId, 'text', true],
    ['in_flight', worker.inFlight, 'uuid[]'],
    ['ttl', interval(worker.ttlMs, 'ttlMs'), 'interval'],
  ]);
  const rows = await run(db, `select ${call} as renewed`, values);
  return rows[0].renewed === true;
}

/**
 * `jobs.worker_draining`: mark the registry row as draining.
 * @param {Queryable} db
 * @param {string} workerId
 * @returns {Promise<boolean>}
 */
export async function workerDraining(db, workerId) {
  const { call, values } = named('jobs.worker_draining', [['worker_id', workerId, 'text', true]]);
  const rows = await run(db, `select ${call} as marked`, values);
  return rows[0].marked === true;
}

/**
 * `jobs.worker_forget`: delete the registry row.
 * @param {Queryable} db
 * @param {string} workerId
 * @returns {Promise<boolean>}
 */
export async function workerForget(db, workerId) {
  const { call, values } = named('jobs.worker_forget', [['worker_id', workerId, 'text', true]]);
  const rows = await run(db, `select ${call} as forgotten`, values);
  return rows[0].forgotten === true;
}

// ---------------------------------------------------------------------------------------------
// the worker

/** How long a job this worker has no handler for is parked (as the Python worker does). */
export const UNKNOWN_JOB_PARK_MS = 30_000;
/** A run whose step history could not be read is handed back, uncounted, after this. */
const HISTORY_RETRY_MS = 1_000;
/** After a lost lease or a cancel, how long the body gets to unwind before the attempt ends. */
const UNWIND_GRACE_MS = 500;
/** How often a claim also buries and re-takes lapsed leases (their scan is costly). */
const LAPSED_SCAN_INTERVAL_MS = 1_000;

/**
 * Codes that dead-letter on the attempt they happen, as durajobs.declare.retry classifies them:
 * retrying them cannot help.
 */
export const TERMINAL_CODES = new Set([
  'X_STEP_DUPLICATE',
  'X_STEP_OUTPUT_INVALID',
  'X_JOB_INPUT_INVALID',
  'X_JOB_TENANT_MISMATCH',
  'X_JOB_ROW_STATUS_UNKNOWN',
  'X_JOB_DECLARATION_INVALID',
  'X_ARGUMENT_INVALID',
]);

/** @type {Log} */
const defaultLog = (level, event, fields) => {
  if (level === 'info') return;
  process.stderr.write(`${JSON.stringify({ level, event, ...fields })}\n`);
};

/**
 * @param {number} ms
 * @returns {Promise<void>}
 */
const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

/** @param {unknown} error */
function errorText(error) {
  if (error instanceof DurajobsError) return error.message; // already `X_CODE: ...`
  if (error instanceof Error) return storable(`${error.name}: ${error.message}`);
  return storable(String(error));
}

/**
 * `text` as a text column holds it: a NUL, which Postgres refuses in text (and with it the
 * whole nack, leaving the row to its lease), written as the four characters \x00.
 * @param {string} text
 */
function storable(text) {
  return text.includes('\0') ? text.replaceAll('\0', '\\x00') : text;
}

/** @param {unknown} error */
function errorCode(error) {
  const code = error && typeof error === 'object' ? /** @type {{ code?: unknown }} */ (error).code : undefined;
  return typeof code === 'string' && code.startsWith('X_') ? code : null;
}

/**
 * @param {Backoff | undefined} backoff
 * @returns {(attempt: number, error: unknown) => number}
 */
function backoffFunction(backoff) {
  if (typeof backoff === 'function') return backoff;
  const { delayMs = 1_000, maxDelayMs = 3_600_000, jitter = true } = backoff ?? {};
  return (attempt) => {
    const base = Math.min(delayMs * 2 ** Math.min(attempt - 1, 64), maxDelayMs);
    // equal jitter: somewhere in [d/2, d], so retries handed out together do not wake together
    return jitter ? base / 2 + Math.random() * (base / 2) : base;
  };
}

/**
 * @param {string} name
 * @param {unknown} output
 */
function storedForm(name, output) {
  if (output === undefined) return null;
  let text;
  try {
    text = JSON.stringify(output, (_key, value) => {
      if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError(`${value} is not JSON`);
      return value;
    });
  } catch (error) {
    throw fail('X_STEP_OUTPUT_INVALID', `step ${JSON.stringify(name)} returned a value that is not ` +
      `JSON: ${error instanceof Error ? error.message : String(error)}`, { step: name });
  }
  if (text === undefined) {
    throw fail('X_STEP_OUTPUT_INVALID', `step ${JSON.stringify(name)} returned ${typeof output}, ` +
      'which is not JSON', { step: name });
  }
  // the first run answers what every replay will read back
  return JSON.parse(text);
}

/**
 * Renews one attempt's lease every third of the visibility, and aborts the attempt's signal
 * when the row is no longer ours. Expiry is judged on this process's clock from the last renewal
 * that landed, so a hung call is caught too.
 */
class LeaseKeeper {
  /**
   * @param {Worker} worker
   * @param {ClaimedJob} job
   * @param {AbortController} controller
   * @param {number} since when the lease began on this clock: the claim's send
   */
  constructor(worker, job, controller, since) {
    this.worker = worker;
    this.job = job;
    this.controller = controller;
    this.lastLanded = since;
    this.interval = worker.visibilityMs / 3;
    this.stopped = false;
    /** @type {NodeJS.Timeout | null} */
    this.timer = null;
  }

  start() {
    this.schedule(this.interval);
  }

  /** @param {number} ms */
  schedule(ms) {
    if (this.stopped) return;
    this.timer = setTimeout(() => { void this.renew(); }, ms);
  }

  stop() {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }

  /**
   * @param {string} code
   * @param {string} reason
   */
  lose(code, reason) {
    if (this.stopped) return;
    this.stop();
    const { job, worker } = this;
    if (code === 'X_JOB_CANCELLED') {
      worker.log('info', 'jobs.lease.cancelled', { job: job.name, id: job.id });
    } else {
      worker.log('error', 'jobs.lease.lost', { job: job.name, id: job.id, reason });
    }
    const message = code === 'X_JOB_CANCELLED'
      ? `job ${job.id} was cancelled`
      : `job ${job.id} lease lost (${reason})`;
    this.controller.abort(fail(code, message, { id: job.id, reason }));
  }

  async renew() {
    if (this.stopped) return;
    const { worker, job } = this;
    const remaining = worker.visibilityMs - (performance.now() - this.lastLanded);
    if (remaining <= 0) {
      this.lose('X_JOB_LEASE_LOST', 'expired');
      return;
    }
    const sent = performance.now(); // the database stamps the new expiry from about now
    /** @type {NodeJS.Timeout | undefined} */
    let timeout;
    /** @type {HeartbeatAnswer | 'timeout'} */
    let answer;
    try {
      answer = await Promise.race([
        heartbeat(worker.pool, job, { visibilityMs: worker.visibilityMs }),
        new Promise((resolve) => { timeout = setTimeout(() => resolve('timeout'), remaining); }),
      ]);
    } catch (error) {
      if (this.stopped) return;
      worker.log('warn', 'jobs.heartbeat.failed', { job: job.name, id: job.id, error: errorText(error) });
      // try again soon enough to notice the end of the window in time
      const left = worker.visibilityMs - (performance.now() - this.lastLanded);
      this.schedule(Math.max(Math.min(this.interval, left), 10));
      return;
    } finally {
      clearTimeout(timeout);
    }
    if (this.stopped) return; // the settle went out while we asked: not a loss
    if (answer === 'ok') {
      this.lastLanded = sent;
      this.schedule(this.interval);
    } else if (answer === 'cancelled') {
      this.lose('X_JOB_CANCELLED', 'cancelled');
    } else {
      this.lose('X_JOB_LEASE_LOST', answer === 'timeout' ? 'expired' : 'not-ours');
    }
  }
}

/**
 * The durable steps of one attempt: the run's stored records (read once, before the body), the
 * names used so far, and the fenced writer.
 */
class StepBook {
  /**
   * @param {Worker} worker
   * @param {ClaimedJob} job
   * @param {Map<string, StepRecord>} records
   * @param {AbortSignal} signal
   */
  constructor(worker, job, records, signal) {
    this.worker = worker;
    this.job = job;
    this.records = records;
    this.signal = signal;
    /** @type {Set<string>} */
    this.used = new Set();
    /** @type {string[]} */
    this.ran = [];
    /** @type {string[]} */
    this.replayed = [];
  }

  /**
   * @template T
   * @param {string} name
   * @param {(signal: AbortSignal) => T | Promise<T>} fn
   * @returns {Promise<T>}
   */
  async step(name, fn) {
    if (typeof name !== 'string' || name === '') {
      throw fail('X_ARGUMENT_INVALID', 'a step needs a non-empty name', { step: name });
    }
    if (this.used.has(name)) {
      throw fail('X_STEP_DUPLICATE', `step ${JSON.stringify(name)} is used twice in one run; each ` +
        'step needs its own name', { step: name });
    }
    this.used.add(name);
    const stored = this.records.get(name);
    if (stored && stored.status === 'completed') {
      this.replayed.push(name);
      return stored.output;
    }
    this.signal.throwIfAborted();
    const output = storedForm(name, await fn(this.signal));
    this.signal.throwIfAborted();
    await recordStep(this.worker.pool, this.job, { name, status: 'completed', output });
    this.ran.push(name);
    return output;
  }
}

/**
 * @typedef {object} Held an attempt this worker holds
 * @property {ClaimedJob} job
 * @property {AbortController} controller
 * @property {boolean} abandoned true once the drain gave up on it: it settles nothing
 * @property {Promise<void>} done resolves once the attempt is over (settled or not)
 */

/**
 * A worker: claims jobs of `queues`, runs each under a kept lease, and settles each attempt
 * with one fenced call, as the Python worker does:
 *
 * - returned: `ack_v1`;
 * - threw: `nack_v1` to 'ready' with the backoff delay and the error's text, code (an `X_*`
 *   `.code`) and stack; on the final attempt, or for a terminal code (`TERMINAL_CODES`), to
 *   'dead' with the verdict appended to the text, exactly as the Python worker writes it;
 * - no handler for the name: parked, `next_state => 'suspended'`, 30 s, uncounted;
 * - lease lost or cancelled (the heartbeat's answer, or X_JOB_LEASE_LOST / X_JOB_CANCELLED from
 *   a step write): the signal aborts and nothing is settled: the row is someone else's;
 * - interrupted by `stop()`'s deadline: handed back uncounted (`'ready'`, counts_as_attempt false).
 */
export class Worker {
  /** @param {WorkerOptions} options */
  constructor(options) {
    checkKeys(options, ['pool', 'connectionString', 'queues', 'handlers', 'workerId', 'concurrency',
      'batchSize', 'visibilityMs', 'backoff', 'pollFloorMs', 'idleCeilingMs', 'drainDeadlineMs', 'log'],
    'Worker');
    const { queues, handlers } = options;
    if (!Array.isArray(queues) || queues.length === 0) {
      throw fail('X_JOB_CLAIM_QUEUES_EMPTY', 'Worker: queues is empty, so no job could ever be claimed',
        { argument: 'queues' });
    }
    if (!handlers || typeof handlers !== 'object') {
      throw fail('X_ARGUMENT_INVALID', 'Worker: handlers must map job names to functions',
        { argument: 'handlers' });
    }
    /** @type {Map<string, Handler>} */
    this.handlers = new Map();
    for (const [name, handler] of Object.entries(handlers)) {
      if (typeof handler !== 'function') {
        throw fail('X_ARGUMENT_INVALID', `Worker: the handler of ${JSON.stringify(name)} is not a function`,
          { argument: `handlers.${name}` });
      }
      this.handlers.set(name, handler);
    }
    this.queues = [...queues];
    this.workerId = options.workerId ?? `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
    this.concurrency = positive(options.concurrency ?? 8, 'concurrency');
    this.batchSize = positive(options.batchSize ?? this.concurrency, 'batchSize');
    this.visibilityMs = positive(options.visibilityMs ?? 30_000, 'visibilityMs');
    this.pollFloorMs = positive(options.pollFloorMs ?? 200, 'pollFloorMs');
    this.idleCeilingMs = Math.max(positive(options.idleCeilingMs ?? 2_000, 'idleCeilingMs'), this.pollFloorMs);
    this.drainDeadlineMs = nonNegative(options.drainDeadlineMs ?? 25_000, 'drainDeadlineMs');
    this.backoff = backoffFunction(options.backoff);
    /** @type {Log} */
    this.log = options.log ?? defaultLog;
    if (options.pool) {
      /** @type {pg.Pool} */
      this.pool = options.pool;
      this.ownsPool = false;
    } else if (options.connectionString) {
      const given = options.connectionString;
      const config = typeof given === 'string' ? configFromConninfo(given) : given;
      // heartbeats, step writes and settles share it: enough for every slot to be busy
      this.pool = new pg.Pool({ max: Math.min(Math.max(this.concurrency + 2, 4), 20), ...config });
      this.ownsPool = true;
      this.pool.on('error', (error) => this.log('warn', 'jobs.pool.error', { error: errorText(error) }));
    } else {
      throw fail('X_ARGUMENT_INVALID', 'Worker: pass pool or connectionString', { argument: 'pool' });
    }
    /** @type {Map<string, Held>} */
    this.running = new Map();
    /** counts of how attempts ended, by outcome */
    /** @type {Record<string, number>} */
    this.outcomes = {};
    this.accepting = false;
    this.started = false;
    /** @type {Promise<void> | null} */
    this.stopping = null;
    /** @type {Promise<void> | null} */
    this.loopDone = null;
    this.kickPending = false;
    /** @type {((kicked: boolean) => void) | null} */
    this.wake = null;
    this.lapsedScannedAt = -Infinity;
    /** @type {NodeJS.Timeout | null} */
    this.presenceTimer = null;
  }

  /** Claim-loop statistics: in flight now, and how attempts ended so far. */
  stats() {
    return { inFlight: this.running.size, outcomes: { ...this.outcomes } };
  }

  /**
   * Announce the worker in `jobs.workers` and start the claim loop. Resolves once it runs;
   * rejects if the database cannot be reached.
   */
  async start() {
    if (this.started) throw new Error('Worker.start: already started');
    this.started = true;
    try {
      await this.announce();
    } catch (error) {
      this.started = false; // nothing runs yet: start() may be called again
      throw error;
    }
    this.accepting = true;
    this.presenceTimer = setInterval(() => { void this.renewPresence(); }, this.visibilityMs / 2);
    this.loopDone = this.loop();
    this.log('info', 'jobs.worker.started', { worker: this.workerId, queues: this.queues });
  }

  /**
   * Stop claiming, and let the running attempts finish for up to `deadlineMs`. Past it, their
   * signals abort (reason X_DRAINING); an attempt whose body then ends is handed back uncounted,
   * one that does not is abandoned to its lease. Then forget the registry row and, if the worker
   * made its pool, end it. Calling it again answers the same promise.
   * @param {{ deadlineMs?: number }} [options]
   * @returns {Promise<void>}
   */
  stop(options = {}) {
    if (!this.stopping) this.stopping = this.shutdown(options.deadlineMs ?? this.drainDeadlineMs);
    return this.stopping;
  }

  /** @param {number} deadlineMs */
  async shutdown(deadlineMs) {
    const began = performance.now();
    this.accepting = false;
    this.kick();
    if (this.started) {
      try {
        await workerDraining(this.pool, this.workerId);
      } catch (error) {
        this.log('warn', 'jobs.worker.registry-failed', { worker: this.workerId, error: errorText(error) });
      }
    }
    this.log('info', 'jobs.worker.stopping', { worker: this.workerId, held: this.running.size });
    await this.loopDone; // a claim in flight hands back what it got once stopped
    const left = Math.max(deadlineMs - (performance.now() - began), 0);
    const pending = [...this.running.values()];
    const finished = await within(Promise.all(pending.map((held) => held.done)), left);
    if (!finished) {
      const late = [...this.running.values()];
      for (const held of late) {
        held.controller.abort(fail('X_DRAINING', `worker ${this.workerId} is draining`,
          { worker: this.workerId, id: held.job.id }));
      }
      // each attempt gives its body the unwind grace, then settles (or gives up) on its own
      const settled = await within(Promise.all(late.map((held) => held.done)), UNWIND_GRACE_MS + 5_000);
      if (!settled) {
        const abandoned = [...this.running.values()];
        for (const held of abandoned) held.abandoned = true;
        this.log('error', 'jobs.worker.drain-abandoned', { worker: this.workerId, abandoned: abandoned.length });
      }
    }
    if (this.presenceTimer) clearInterval(this.presenceTimer);
    this.presenceTimer = null;
    if (this.started) {
      try {
        await workerForget(this.pool, this.workerId);
      } catch (error) {
        this.log('warn', 'jobs.worker.registry-failed', { worker: this.workerId, error: errorText(error) });
      }
    }
    if (this.ownsPool) await this.pool.end();
    this.log('info', 'jobs.worker.stopped', { worker: this.workerId, outcomes: this.outcomes });
  }

  async announce() {
    await workerAnnounce(this.pool, {
      workerId: this.workerId,
      host: hostname(),
      pid: process.pid,
      queues: this.queues,
      slots: this.concurrency,
      ttlMs: this.visibilityMs,
    });
  }

  async renewPresence() {
    try {
      const renewed = await workerHeartbeat(this.pool, {
        workerId: this.workerId,
        inFlight: [...this.running.keys()],
        ttlMs: this.visibilityMs,
      });
      if (!renewed && this.accepting) await this.announce();
    } catch (error) {
      this.log('warn', 'jobs.worker.registry-failed', { worker: this.workerId, error: errorText(error) });
    }
  }

  /** Start a claim pass now (a freed slot, a stop). */
  kick() {
    this.kickPending = true;
    const wake = this.wake;
    this.wake = null;
    if (wake) wake(true);
  }

  /**
   * Wait for a kick, or `ms` (null: no timeout). Answers whether a kick came.
   * @param {number | null} ms
   * @returns {Promise<boolean>}
   */
  waitForKick(ms) {
    if (this.kickPending) {
      this.kickPending = false;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      /** @type {NodeJS.Timeout | undefined} */
      let timer;
      this.wake = (kicked) => {
        clearTimeout(timer);
        this.kickPending = false;
        resolve(kicked);
      };
      if (ms !== null) {
        timer = setTimeout(() => {
          this.wake = null;
          resolve(false);
        }, ms);
      }
    });
  }

  get room() {
    return Math.max(this.concurrency - this.running.size, 0);
  }

  async loop() {
    let wait = this.pollFloorMs;
    while (this.accepting) {
      this.kickPending = false;
      let claimed = 0;
      try {
        claimed = await this.pass();
      } catch (error) {
        // a failed pass never kills the loop: re-arm at the floor
        this.log('error', 'jobs.worker.claim-failed', { worker: this.workerId, error: errorText(error) });
        wait = this.pollFloorMs;
      }
      if (!this.accepting) break;
      if (claimed > 0) {
        wait = this.pollFloorMs;
        if (this.room > 0) continue;
        await this.waitForKick(null); // at the cap: a freed slot kicks
        continue;
      }
      if (this.room === 0) {
        await this.waitForKick(null);
        continue;
      }
      const kicked = await this.waitForKick(wait);
      wait = kicked ? this.pollFloorMs : Math.min(wait * 2, this.idleCeilingMs);
    }
  }

  /** One claim: start what it handed out. Answers how many attempts started. */
  async pass() {
    const room = this.room;
    if (room === 0) return 0;
    const size = Math.min(room, this.batchSize);
    const asked = performance.now(); // the lease runs from the claim, not from the body's start
    const recover = asked - this.lapsedScannedAt >= LAPSED_SCAN_INTERVAL_MS;
    const rows = await claim(this.pool, {
      queues: this.queues,
      workerId: this.workerId,
      batchSize: size,
      visibilityMs: this.visibilityMs,
      recoverLapsed: recover,
    });
    const taken = rows.filter((row) => !row.buried);
    // a full batch or a burial may have left lapsed rows behind: look again next claim
    if (recover && taken.length < size && taken.length === rows.length) this.lapsedScannedAt = asked;
    let started = 0;
    for (const job of taken) {
      if (!this.accepting) {
        // stopped while the claim was in flight: hand the row back, uncounted
        try {
          await nack(this.pool, job, { nextState: 'ready', countsAsAttempt: false });
        } catch (error) {
          this.log('error', 'jobs.settle.failed', { id: job.id, error: errorText(error) });
        }
        continue;
      }
      this.begin(job, asked);
      started++;
    }
    for (const job of rows) {
      if (!job.buried) continue;
      // settled by the claim itself (a lease lapsed on the final attempt): report, never run
      this.count(job.state === 'dead' ? 'dead-lettered' : 'dropped');
      this.log('error', 'jobs.claim.exhausted', { job: job.name, id: job.id, state: job.state, attempt: job.attempt });
    }
    return started;
  }

  /** @param {string} outcome */
  count(outcome) {
    this.outcomes[outcome] = (this.outcomes[outcome] ?? 0) + 1;
  }

  /**
   * @param {ClaimedJob} job
   * @param {number} since
   */
  begin(job, since) {
    const controller = new AbortController();
    /** @type {Held} */
    const held = { job, controller, abandoned: false, done: Promise.resolve() };
    held.done = this.attempt(held, since)
      .then((outcome) => this.count(outcome))
      .catch((error) => {
        this.log('error', 'jobs.worker.attempt-crashed', { id: job.id, error: errorText(error) });
      })
      .finally(() => {
        if (this.running.get(job.id) === held) this.running.delete(job.id);
        this.kick(); // a freed slot refills at once
      });
    this.running.set(job.id, held);
  }

  /**
   * Send the attempt's one settle; a failure is logged (the lease brings the job back), a miss
   * is logged as unowned. Answers whether it landed.
   * @param {Held} held
   * @param {(db: Queryable) => Promise<boolean>} send
   */
  async settle(held, send) {
    if (held.abandoned) return false;
    try {
      const landed = await send(this.pool);
      if (!landed) this.log('warn', 'jobs.settle.unowned', { job: held.job.name, id: held.job.id });
      return landed;
    } catch (error) {
      this.log('error', 'jobs.settle.failed', { job: held.job.name, id: held.job.id, error: errorText(error) });
      return false;
    }
  }

  /**
   * Run one claimed attempt and settle it. Answers its outcome.
   * @param {Held} held
   * @param {number} since
   * @returns {Promise<string>}
   */
  async attempt(held, since) {
    const { job, controller } = held;
    const handler = this.handlers.get(job.name);
    if (!handler) {
      const reason = `no job registered as "${job.name}"`;
      const landed = await this.settle(held, (db) => nack(db, job, {
        nextState: 'suspended', delayMs: UNKNOWN_JOB_PARK_MS, countsAsAttempt: false, error: reason,
      }));
      this.log('warn', 'jobs.worker.unknown-job', { job: job.name, id: job.id });
      return landed ? 'parked' : 'unowned';
    }
    const lease = new LeaseKeeper(this, job, controller, since);
    lease.start();
    try {
      /** @type {Map<string, StepRecord>} */
      const records = new Map();
      if (job.hasSteps) {
        // the claim said whether the run has a history: most first attempts skip the read
        try {
          for (const record of await steps(this.pool, job.runId)) records.set(record.name, record);
        } catch (error) {
          lease.stop();
          const code = errorCode(error);
          if (code === 'X_JOB_ROW_STATUS_UNKNOWN') {
            // written by a newer deploy: hand the run on, uncounted, rather than re-run a step
            const landed = await this.settle(held, (db) => nack(db, job, {
              nextState: 'suspended', delayMs: UNKNOWN_JOB_PARK_MS, countsAsAttempt: false,
              error: errorText(error), errorCode: code,
            }));
            return landed ? 'parked' : 'unowned';
          }
          // unreadable (a dropped connection): back uncounted, not left to lapse into a count
          this.log('error', 'jobs.step.history-failed', { job: job.name, error: errorText(error) });
          const landed = await this.settle(held, (db) => nack(db, job, {
            nextState: 'ready', delayMs: HISTORY_RETRY_MS, countsAsAttempt: false,
          }));
          return landed ? 'interrupted' : 'unowned';
        }
      }
      const book = new StepBook(this, job, records, controller.signal);
      /** @type {JobContext} */
      const ctx = {
        signal: controller.signal,
        step: (name, fn) => book.step(name, fn),
        progress: (done, total, note) => progress(this.pool, job, { done, total, note }),
        workerId: this.workerId,
        finalAttempt: job.attempt >= job.maxAttempts,
      };
      const ending = await this.body(handler, job, ctx, controller.signal);
      lease.stop(); // a renewal racing the settle is not a loss
      return await this.conclude(held, ending);
    } finally {
      lease.stop();
    }
  }

  /**
   * Run the handler until it ends, or until the signal aborts and the body has had its grace.
   * @param {Handler} handler
   * @param {ClaimedJob} job
   * @param {JobContext} ctx
   * @param {AbortSignal} signal
   * @returns {Promise<{ ended: boolean, result?: unknown, error?: unknown }>}
   */
  async body(handler, job, ctx, signal) {
    if (signal.aborted) {
      // stopped before the body began (a drain's deadline during the history read): a body
      // started now would only run for its result to be thrown away
      return { ended: true, error: signal.reason };
    }
    const ending = (async () => handler(job, ctx))().then(
      (result) => ({ ended: true, result }),
      (error) => ({ ended: true, error }),
    );
    {
      /** @type {() => void} */
      let onAbort = () => {};
      const aborted = new Promise((resolve) => {
        onAbort = () => resolve(null);
        signal.addEventListener('abort', onAbort, { once: true });
      });
      const first = await Promise.race([ending, aborted]);
      signal.removeEventListener('abort', onAbort);
      if (first) return first;
    }
    /** @type {NodeJS.Timeout | undefined} */
    let timer;
    const grace = new Promise((resolve) => { timer = setTimeout(() => resolve({ ended: false }), UNWIND_GRACE_MS); });
    const late = await Promise.race([ending, grace]);
    clearTimeout(timer);
    return /** @type {{ ended: boolean, result?: unknown, error?: unknown }} */ (late);
  }

  /**
   * The verdict, read off the signal first, then off how the body ended; then the one settle.
   * @param {Held} held
   * @param {{ ended: boolean, result?: unknown, error?: unknown }} ending
   * @returns {Promise<string>}
   */
  async conclude(held, ending) {
    const { job, controller } = held;
    const code = errorCode(ending.error);
    if ((code === 'X_JOB_LEASE_LOST' || code === 'X_JOB_CANCELLED') && !controller.signal.aborted) {
      // a step write met the fence before the heartbeat did: the same verdict
      if (code === 'X_JOB_LEASE_LOST') this.log('error', 'jobs.lease.lost', { job: job.name, id: job.id, reason: 'fenced' });
      controller.abort(ending.error);
    }
    const reason = controller.signal.aborted ? errorCode(controller.signal.reason) : null;
    if (reason === 'X_DRAINING') {
      if (!ending.ended) return 'abandoned'; // its body may still run: the lease brings it back
      // the verdict is the drain's, whatever the body did on its way out: back, uncounted
      const landed = await this.settle(held, (db) => nack(db, job, { nextState: 'ready', countsAsAttempt: false }));
      this.log('info', 'jobs.attempt.interrupted', { job: job.name, id: job.id });
      return landed ? 'interrupted' : 'unowned';
    }
    if (reason === 'X_JOB_CANCELLED') {
      this.log('info', 'jobs.attempt.cancelled', { job: job.name, id: job.id });
      return 'cancelled'; // an operator ended the row: nothing to settle
    }
    if (reason === 'X_JOB_LEASE_LOST') return 'lease-lost'; // another claim owns it now

    if (!('error' in ending)) {
      const landed = await this.settle(held, (db) => ack(db, job));
      return landed ? 'completed' : 'unowned';
    }

    const error = ending.error;
    const text = errorText(error);
    const stack = error instanceof Error && typeof error.stack === 'string' ? storable(error.stack) : null;
    if (code !== null && TERMINAL_CODES.has(code)) {
      const landed = await this.settle(held, (db) => nack(db, job, {
        nextState: 'dead', error: `${text} [dead-lettered: terminal code ${code}]`, errorCode: code, errorStack: stack,
      }));
      this.log('error', 'jobs.attempt.failed', { job: job.name, id: job.id, attempt: job.attempt, code, stop: 'terminal', error: text });
      return landed ? 'dead-lettered' : 'unowned';
    }
    if (job.attempt >= job.maxAttempts) {
      // the final attempt dead-letters as the Python worker does: the same state and last_error
      const verdict = `X_JOB_MAX_ATTEMPTS: ${job.attempt} of ${job.maxAttempts} attempts spent`;
      const landed = await this.settle(held, (db) => nack(db, job, {
        nextState: 'dead', error: `${text} [dead-lettered: ${verdict}]`, errorCode: code, errorStack: stack,
      }));
      this.log('error', 'jobs.attempt.failed', {
        job: job.name, id: job.id, attempt: job.attempt, code, stop: 'attempts-exhausted', error: text,
      });
      return landed ? 'dead-lettered' : 'unowned';
    }
    const delayMs = Math.max(0, Math.round(this.backoff(job.attempt, error)));
    const landed = await this.settle(held, (db) => nack(db, job, {
      nextState: 'ready', delayMs, error: text, errorCode: code, errorStack: stack,
    }));
    this.log('warn', 'jobs.attempt.failed', {
      job: job.name, id: job.id, attempt: job.attempt, code, error: text, retry_in_ms: delayMs,
    });
    return landed ? 'retried' : 'unowned';
  }
}

/**
 * @param {unknown} value
 * @param {string} field
 */
function positive(value, field) {
  if (typeof value !== 'number' || !Number.isFinite(value) || value <= 0) {
    throw fail('X_ARGUMENT_INVALID', `Worker: ${field} must be a positive number`, { argument: field });
  }
  return value;
}

/**
 * @param {unknown} value
 * @param {string} field
 */
function nonNegative(value, field) {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
    throw fail('X_ARGUMENT_INVALID', `Worker: ${field} must be a number of at least 0`, { argument: field });
  }
  return value;
}

/**
 * Whether `promise` settles within `ms`.
 * @param {Promise<unknown>} promise
 * @param {number} ms
 */
async function within(promise, ms) {
  /** @type {NodeJS.Timeout | undefined} */
  let timer;
  const expired = new Promise((resolve) => { timer = setTimeout(() => resolve(false), ms); });
  try {
    return await Promise.race([promise.then(() => true), expired]);
  } finally {
    clearTimeout(timer);
  }
}
