// @ts-check
// The worker protocol one call at a time: the claim's fence makes every write of a stale attempt
// change nothing.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import {
  ack, claim, DurajobsError, enqueue, heartbeat, nack, progress, recordStep, steps,
} from '../src/index.js';
import { freshQueue, scratchDatabase, sleep } from './helpers.js';

/** @type {Awaited<ReturnType<typeof scratchDatabase>>} */
let db;
before(async () => { db = await scratchDatabase(); });
after(async () => { await db?.drop(); });

test('a round trip: claim, heartbeat, a step, ack; a second ack answers false', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'import', input: { file: 'a.csv' }, idempotencyKey: 'a.csv', queue });
  const [claimed] = await claim(db.pool, { queues: [queue], workerId: 'w1', visibilityMs: 60_000 });
  assert.equal(claimed.id, job.id);
  assert.deepEqual(
    { state: claimed.state, attempt: claimed.attempt, claim: claimed.claim, buried: claimed.buried, hasSteps: claimed.hasSteps, workerId: claimed.workerId },
    { state: 'running', attempt: 1, claim: 1, buried: false, hasSteps: false, workerId: 'w1' },
  );
  assert.deepEqual(claimed.input, { file: 'a.csv' });
  assert.equal(await heartbeat(db.pool, claimed, { visibilityMs: 60_000 }), 'ok');
  const step = await recordStep(db.pool, claimed, { name: 'fetch', status: 'completed', output: { rows: [1, 2, 3] } });
  assert.deepEqual({ name: step.name, status: step.status, output: step.output, attempts: step.attempts }, {
    name: 'fetch', status: 'completed', output: { rows: [1, 2, 3] }, attempts: 1,
  });
  assert.equal(await progress(db.pool, claimed, { done: 2, total: 3, note: 'rows' }), true);
  assert.deepEqual((await steps(db.pool, job.runId)).map((s) => [s.name, s.status]), [['fetch', 'completed']]);
  assert.equal(await ack(db.pool, claimed), true);
  assert.equal(await ack(db.pool, claimed), false, 'already done');
  assert.equal(await heartbeat(db.pool, claimed), 'lost', 'a finished row is lost to its own attempt');
  assert.equal((await db.one('select state from jobs.jobs where id = $1', [job.id])).state, 'done');
});

test('a delay of any size reaches the row to the microsecond', async () => {
  for (const [delayMs, stored] of [[1e-7, '00:00:00'], [0.095, '00:00:00.000095'], [1500.0004, '00:00:01.5']]) {
    const queue = freshQueue();
    await enqueue(db.pool, { name: 'import', input: {}, idempotencyKey: `delay-${delayMs}`, queue });
    const [claimed] = await claim(db.pool, { queues: [queue], workerId: 'w1', visibilityMs: 60_000 });
    assert.equal(await nack(db.pool, claimed, { delayMs }), true);
    const row = await db.one('select (run_at - updated_at)::text as delay from jobs.jobs where id = $1', [claimed.id]);
    assert.equal(row.delay, stored, `delayMs ${delayMs}`);
  }
  await assert.rejects(
    nack(db.pool, { id: '00000000-0000-0000-0000-000000000000', workerId: 'w1', claim: 1 }, { delayMs: 1e16 }),
    (error) => error instanceof DurajobsError && error.code === 'X_ARGUMENT_INVALID',
  );
});

test('a stale fence changes nothing once another worker re-took the lapsed lease', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'import', input: {}, idempotencyKey: 'stale', queue, maxAttempts: 5 });
  const [old] = await claim(db.pool, { queues: [queue], workerId: 'w-old', visibilityMs: 1 });
  assert.equal(old.claim, 1);
  await sleep(20); // the 1 ms lease lapses
  const [taken] = await claim(db.pool, { queues: [queue], workerId: 'w-new', visibilityMs: 60_000 });
  assert.equal(taken.id, job.id, 'the recovering claim re-takes the lapsed row');
  assert.deepEqual({ state: taken.state, attempt: taken.attempt, claim: taken.claim, hasSteps: taken.hasSteps }, {
    state: 'running', attempt: 2, claim: 2, hasSteps: true,
  });

  const before = await db.one('select * from jobs.jobs where id = $1', [job.id]);
  assert.equal(await ack(db.pool, old), false);
  assert.equal(await nack(db.pool, old, { delayMs: 0, error: 'stale' }), false);
  assert.equal(await heartbeat(db.pool, old, { visibilityMs: 60_000 }), 'lost');
  assert.equal(await progress(db.pool, old, { done: 1 }), false);
  await assert.rejects(
    recordStep(db.pool, old, { name: 'late', status: 'completed', output: 1 }),
    (error) => error instanceof DurajobsError && error.code === 'X_JOB_LEASE_LOST' && error.sqlstate === 'JQ007'
      && error.detail.worker_id === 'w-old' && error.detail.step === 'late',
  );
  const afterwards = await db.one('select * from jobs.jobs where id = $1', [job.id]);
  assert.deepEqual(afterwards, before, 'a stale write changed the row');
  assert.deepEqual(await steps(db.pool, job.runId), [], 'a stale step write was stored');

  assert.equal(await ack(db.pool, taken), true);
  const row = await db.one('select state, claimed_by, claims::int as claims from jobs.jobs where id = $1', [job.id]);
  assert.deepEqual(row, { state: 'done', claimed_by: 'w-new', claims: 2 });
});

test('the claim token fences the same worker\'s earlier attempt too', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'import', input: {}, idempotencyKey: 'same-worker', queue });
  const [first] = await claim(db.pool, { queues: [queue], workerId: 'w1', visibilityMs: 1 });
  await sleep(20);
  const [second] = await claim(db.pool, { queues: [queue], workerId: 'w1', visibilityMs: 60_000 });
  assert.equal(second.id, job.id);
  assert.equal(second.claim, first.claim + 1);
  assert.equal(await ack(db.pool, first), false, 'same worker id, older claim: must miss');
  assert.equal(await nack(db.pool, second, { delayMs: 60_000, error: 'later' }), true);
  const row = await db.one('select state, attempt, last_error from jobs.jobs where id = $1', [job.id]);
  assert.deepEqual(row, { state: 'ready', attempt: 2, last_error: 'later' });
});

test('a lease lapsed on the final attempt is buried by the next claim, not handed out', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'import', input: {}, idempotencyKey: 'bury', queue, maxAttempts: 1 });
  await claim(db.pool, { queues: [queue], workerId: 'w1', visibilityMs: 1 });
  await sleep(20);
  const rows = await claim(db.pool, { queues: [queue], workerId: 'w2' });
  assert.deepEqual(rows.map((r) => [r.id, r.state, r.buried]), [[job.id, 'dead', true]]);
  const row = await db.one('select state, last_error from jobs.jobs where id = $1', [job.id]);
  assert.deepEqual(row, { state: 'dead', last_error: 'LEASE_LAPSED_FINAL_ATTEMPT' });
});
