// @ts-check
// jobs.enqueue and jobs.enqueue_many from Node: named arguments, SQL defaults, jsonb input,
// dedupe, and the X_* errors as DurajobsError.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  configFromConninfo, DurajobsError, enqueue, enqueueMany, fromDatabaseError, parseConninfo,
} from '../src/index.js';
import { scratchDatabase } from './helpers.js';

/** @type {Awaited<ReturnType<typeof scratchDatabase>>} */
let db;
before(async () => { db = await scratchDatabase(); });
after(async () => { await db?.drop(); });

test('enqueue answers ids, dedupes on the live key, and stores input as a jsonb object', async () => {
  const input = { to: 'a@b', tags: ['x', 'y'], nested: { n: 1, ok: true, none: null }, text: 'é "q" \\' };
  const first = await enqueue(db.pool, { name: 'send-email', input, idempotencyKey: 'mail:1' });
  assert.equal(first.deduped, false);
  assert.match(first.id, /^[0-9a-f-]{36}$/);
  assert.equal(first.runId, first.id, 'run_id defaults to the job\'s own id');

  const again = await enqueue(db.pool, { name: 'send-email', input: { other: 1 }, idempotencyKey: 'mail:1' });
  assert.deepEqual(again, { id: first.id, runId: first.id, deduped: true });

  const row = await db.one(
    `select jsonb_typeof(input) as kind, jsonb_typeof(input -> 'tags') as tags, input, state, queue,
            max_attempts, priority, tenant_id, attempt
       from jobs.jobs where id = $1`,
    [first.id],
  );
  assert.equal(row.kind, 'object', 'the input was double-encoded into a JSON string');
  assert.equal(row.tags, 'array', 'a JS array inside the input must stay a JSON array');
  assert.deepEqual(row.input, input);
  // nothing optional was sent: the SQL defaults apply
  assert.deepEqual(
    { state: row.state, queue: row.queue, max_attempts: row.max_attempts, priority: row.priority, tenant_id: row.tenant_id, attempt: row.attempt },
    { state: 'ready', queue: 'default', max_attempts: 20, priority: 0, tenant_id: null, attempt: 0 },
  );
  assert.equal((await db.one('select count(*)::int as n from jobs.jobs')).n, 1);
});

test('enqueue sends the options it is given', async () => {
  const runAt = new Date(Date.now() + 3_600_000);
  const job = await enqueue(db.pool, {
    name: 'report', input: { day: 1 }, idempotencyKey: 'report:1', queue: 'reports', runAt,
    maxAttempts: 3, priority: -5, tenantId: 'acme', enqueuedBy: 'node-test',
  });
  const row = await db.one(
    'select state, queue, max_attempts, priority, tenant_id, run_at, enqueued_by from jobs.jobs where id = $1',
    [job.id],
  );
  assert.equal(row.state, 'delayed');
  assert.equal(row.run_at.getTime(), runAt.getTime());
  assert.deepEqual(
    { queue: row.queue, max_attempts: row.max_attempts, priority: row.priority, tenant_id: row.tenant_id, enqueued_by: row.enqueued_by },
    { queue: 'reports', max_attempts: 3, priority: -5, tenant_id: 'acme', enqueued_by: 'node-test' },
  );
  // a tenant's job and a tenantless one never share a key
  const tenantless = await enqueue(db.pool, { name: 'report', input: {}, idempotencyKey: 'report:1' });
  assert.equal(tenantless.deduped, false);
});

test('the X_* errors arrive as DurajobsError with code, SQLSTATE, DETAIL and HINT', async () => {
  const held = await enqueue(db.pool, { name: 'charge', input: { cents: 5 }, idempotencyKey: 'charge:1' });
  await assert.rejects(
    enqueue(db.pool, { name: 'charge', input: { cents: 5 }, idempotencyKey: 'charge:1', onConflict: 'error' }),
    (error) => {
      assert.ok(error instanceof DurajobsError);
      assert.equal(error.code, 'X_JOB_DUPLICATE');
      assert.equal(error.sqlstate, 'JQ004');
      assert.match(error.message, /^X_JOB_DUPLICATE: /);
      assert.equal(error.detail.reason, 'key_held');
      assert.equal(error.detail.existing_id, held.id);
      assert.match(String(error.hint), /on_conflict => 'dedupe'/);
      return true;
    },
  );
  /** @type {Array<[Record<string, unknown>, string, string]>} */
  const refused = [
    [{ name: 'x', input: ['not', 'an', 'object'], idempotencyKey: 'k' }, 'X_JOB_INPUT_INVALID', 'JQ002'],
    [{ name: 'x', input: '{"pre": "encoded"}', idempotencyKey: 'k' }, 'X_JOB_INPUT_INVALID', 'JQ002'],
    [{ name: 'x', input: undefined, idempotencyKey: 'k' }, 'X_JOB_INPUT_INVALID', 'JQ002'],
    [{ name: 'x', input: {}, idempotencyKey: '  ' }, 'X_IDEMPOTENCY_REQUIRED', 'JQ003'],
    [{ name: '', input: {}, idempotencyKey: 'k' }, 'X_ARGUMENT_INVALID', 'JQ001'],
    [{ name: 'x', input: {}, idempotencyKey: 'k', maxAttempts: 0 }, 'X_ARGUMENT_INVALID', 'JQ001'],
    [{ name: 'x', input: {}, idempotencyKey: 'k', onConflict: 'overwrite' }, 'X_ARGUMENT_INVALID', 'JQ001'],
  ];
  for (const [options, code, sqlstate] of refused) {
    await assert.rejects(
      enqueue(db.pool, /** @type {any} */ (options)),
      (error) => error instanceof DurajobsError && error.code === code && error.sqlstate === sqlstate,
      `${JSON.stringify(options)} should raise ${code}`,
    );
  }
  await assert.rejects(
    enqueue(db.pool, /** @type {any} */ ({ name: 'x', input: {}, idempotencyKey: 'k', max_attempts: 2 })),
    TypeError,
    'a misspelt option must not silently fall back to the default',
  );
});

test('every code of jobs.error_codes comes back as its X_* code', async () => {
  const { rows } = await db.pool.query('select code, sqlstate from jobs.error_codes order by sqlstate');
  assert.ok(rows.length >= 16);
  for (const { code, sqlstate } of rows) {
    await assert.rejects(
      db.pool.query('select jobs._raise($1, $2)', [code, 'raised by the test']).catch((e) => { throw fromDatabaseError(e); }),
      (error) => error instanceof DurajobsError && error.code === code && error.sqlstate === sqlstate,
    );
  }
  // Postgres' own errors pass through untouched, with their SQLSTATE in `code`
  await assert.rejects(
    db.pool.query('select 1/0').catch((e) => { throw fromDatabaseError(e); }),
    (error) => !(error instanceof DurajobsError) && /** @type {any} */ (error).code === '22012',
  );
});

test('enqueueMany answers in input order and dedupes a repeated key', async () => {
  const answers = await enqueueMany(db.pool, [
    { name: 'resize', input: { image: 1 }, idempotencyKey: 'resize:1' },
    { name: 'resize', input: { image: 1 }, idempotencyKey: 'resize:1' },
    { name: 'resize', input: { image: 2 }, idempotencyKey: 'resize:2', queue: 'images', maxAttempts: 5, runAt: new Date('2030-01-01T00:00:00Z') },
  ]);
  assert.equal(answers.length, 3);
  assert.equal(answers[0].deduped, false);
  assert.deepEqual(answers[1], { ...answers[0], deduped: true });
  const row = await db.one(
    'select queue, max_attempts, state, run_at, jsonb_typeof(input) as kind from jobs.jobs where id = $1',
    [answers[2].id],
  );
  assert.deepEqual(
    { ...row, run_at: row.run_at.toISOString() },
    { queue: 'images', max_attempts: 5, state: 'delayed', run_at: '2030-01-01T00:00:00.000Z', kind: 'object' },
  );
});

test('a libpq conninfo becomes a node-postgres config', () => {
  assert.deepEqual(parseConninfo("host=localhost port = 5432 user=postgres password='p w\\'d' dbname=x"), {
    host: 'localhost', port: '5432', user: 'postgres', password: "p w'd", dbname: 'x',
  });
  assert.deepEqual(configFromConninfo('host=/var/run/postgresql dbname=jobs sslmode=disable'), {
    host: '/var/run/postgresql', database: 'jobs', ssl: false,
  });
  assert.deepEqual(configFromConninfo('postgresql://u:p@h:1/d'), { connectionString: 'postgresql://u:p@h:1/d' });
  assert.throws(() => parseConninfo('host'), DurajobsError);
});

test('an input jsonb refuses is refused with X_JOB_INPUT_INVALID and nothing is stored', async () => {
  const isRefused = (/** @type {RegExp} */ named) => (/** @type {unknown} */ error) =>
    error instanceof DurajobsError && error.code === 'X_JOB_INPUT_INVALID' && named.test(error.message);
  await assert.rejects(
    enqueue(db.pool, { name: 'nul', input: { text: 'a\0b' }, idempotencyKey: 'nul:1' }),
    isRefused(/NUL/),
  );
  await assert.rejects(
    enqueueMany(db.pool, [
      { name: 'nul', input: { ok: true }, idempotencyKey: 'nul:2' },
      { name: 'nul', input: { file: '\udcff.csv' }, idempotencyKey: 'nul:3' },
    ]),
    isRefused(/lone surrogate/),
  );
  // a literal backslash-u is text, not an escape: it is stored as written
  const literal = await enqueue(db.pool, { name: 'nul', input: { text: '\\u0000' }, idempotencyKey: 'nul:4' });
  const stored = await db.one(
    "select count(*)::int as count, max(input ->> 'text') as text from jobs.jobs where name = 'nul'",
  );
  assert.deepEqual(stored, { count: 1, text: '\\u0000' });
  assert.match(literal.id, /^[0-9a-f-]{36}$/);
});
