// @ts-check
// The Worker against a real database: ack, retry to dead, heartbeats, step replay, an unknown
// name parked, a cancel, and stop() draining.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as delay } from 'node:timers/promises';
import { enqueue, Worker } from '../src/index.js';
import { freshQueue, keptLog, scratchDatabase, waitFor } from './helpers.js';

/** @type {Awaited<ReturnType<typeof scratchDatabase>>} */
let db;
before(async () => { db = await scratchDatabase(); });
after(async () => { await db?.drop(); });

/** @param {string} id */
const row = (id) => db.one(
  `select state, attempt, claims::int as claims, claimed_by, last_error, last_error_code,
          last_error_stack, run_at, finished_at, lease_expires_at
     from jobs.jobs where id = $1`,
  [id],
);

/**
 * @param {string} id
 * @param {string} state
 */
const reaches = (id, state) => waitFor(async () => (await row(id)).state === state, { what: `job ${id} ${state}` });

/**
 * A worker on its own pool (made from the conninfo string, as an application would) that polls
 * quickly, so the tests do not wait on the idle backoff.
 * @param {Partial<import('../src/index.js').WorkerOptions>} options
 */
function worker(options) {
  return new Worker({
    connectionString: db.conninfo,
    queues: ['unused'],
    handlers: {},
    pollFloorMs: 20,
    idleCeilingMs: 100,
    log: keptLog().log,
    ...options,
  });
}

test('a worker runs a job and acks it', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'greet', input: { who: 'node' }, idempotencyKey: 'greet:1', queue });
  /** @type {unknown[]} */
  const seen = [];
  const w = worker({
    queues: [queue],
    workerId: 'node-ack',
    handlers: {
      greet: async (claimed, ctx) => {
        seen.push({ input: claimed.input, attempt: claimed.attempt, aborted: ctx.signal.aborted, final: ctx.finalAttempt, workerId: ctx.workerId });
        const live = await db.one('select id from jobs.workers_live() where id = $1', [ctx.workerId]);
        assert.ok(live, 'the worker is in the registry while it runs');
        return `hello ${claimed.input.who}`;
      },
    },
  });
  await w.start();
  try {
    await reaches(job.id, 'done');
  } finally {
    await w.stop();
  }
  const done = await row(job.id);
  assert.deepEqual({ attempt: done.attempt, claims: done.claims, claimed_by: done.claimed_by, lease: done.lease_expires_at }, {
    attempt: 1, claims: 1, claimed_by: 'node-ack', lease: null,
  });
  assert.ok(done.finished_at);
  assert.deepEqual(seen, [{ input: { who: 'node' }, attempt: 1, aborted: false, final: false, workerId: 'node-ack' }]);
  assert.deepEqual(w.stats(), { inFlight: 0, outcomes: { completed: 1 } });
  assert.equal((await db.one('select count(*)::int as n from jobs.workers where id = $1', ['node-ack'])).n, 0,
    'stop() forgets the registry row');
});

test('a failing handler is retried with its error recorded, then dead after max_attempts', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'flaky', input: {}, idempotencyKey: 'flaky', queue, maxAttempts: 3 });
  /** @type {number[]} */
  const attempts = [];
  /** @type {number[]} */
  const backoffAsked = [];
  const w = worker({
    queues: [queue],
    backoff: (attempt) => { backoffAsked.push(attempt); return 10; },
    handlers: {
      flaky: (claimed) => {
        attempts.push(claimed.attempt);
        throw Object.assign(new Error(`boom ${claimed.attempt}`), { code: 'X_TEST_BOOM' });
      },
    },
  });
  await w.start();
  try {
    await reaches(job.id, 'dead');
  } finally {
    await w.stop();
  }
  const dead = await row(job.id);
  assert.deepEqual(attempts, [1, 2, 3]);
  assert.deepEqual(backoffAsked, [1, 2], 'the final attempt asks for no backoff: it is not retried');
  assert.equal(dead.attempt, 3);
  // the Python worker's wording, so a dead row reads the same whoever ran it
  assert.equal(dead.last_error, 'Error: boom 3 [dead-lettered: X_JOB_MAX_ATTEMPTS: 3 of 3 attempts spent]');
  assert.equal(dead.last_error_code, 'X_TEST_BOOM');
  assert.match(dead.last_error_stack, /boom 3/);
  assert.ok(dead.finished_at);
  assert.deepEqual(w.stats().outcomes, { retried: 2, 'dead-lettered': 1 });
});

test('an error holding a NUL is recorded with the NUL written out', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'nul', input: {}, idempotencyKey: 'nul', queue, maxAttempts: 1 });
  const w = worker({
    queues: [queue],
    handlers: { nul: () => { throw new Error('bytes a\0b'); } },
  });
  await w.start();
  try {
    await reaches(job.id, 'dead');
  } finally {
    await w.stop();
  }
  const dead = await row(job.id);
  assert.match(dead.last_error, /^Error: bytes a\\x00b \[dead-lettered/);
  assert.match(dead.last_error_stack, /bytes a\\x00b/);
});

test('only an X_* code is recorded, and a terminal code dead-letters at once', async () => {
  const queue = freshQueue();
  const plain = await enqueue(db.pool, { name: 'io', input: {}, idempotencyKey: 'io', queue, maxAttempts: 1 });
  const terminal = await enqueue(db.pool, { name: 'twice', input: {}, idempotencyKey: 'twice', queue, maxAttempts: 5 });
  const w = worker({
    queues: [queue],
    handlers: {
      io: () => { throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' }); },
      // the same step name twice in one run is X_STEP_DUPLICATE: retrying cannot help
      twice: async (_job, ctx) => {
        await ctx.step('s', () => 1);
        await ctx.step('s', () => 2);
      },
    },
  });
  await w.start();
  try {
    await reaches(plain.id, 'dead');
    await reaches(terminal.id, 'dead');
  } finally {
    await w.stop();
  }
  const io = await row(plain.id);
  assert.equal(io.last_error, 'Error: socket hang up [dead-lettered: X_JOB_MAX_ATTEMPTS: 1 of 1 attempts spent]');
  assert.equal(io.last_error_code, null);
  const twice = await row(terminal.id);
  assert.equal(twice.attempt, 1, 'a terminal code must not use up the retries');
  assert.equal(twice.last_error_code, 'X_STEP_DUPLICATE');
  assert.match(twice.last_error, /^X_STEP_DUPLICATE: .*\[dead-lettered: terminal code X_STEP_DUPLICATE\]$/);
});

test('heartbeats keep a long job\'s lease: no second claim takes it', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'long', input: {}, idempotencyKey: 'long', queue, maxAttempts: 5 });
  let runs = 0;
  /** @type {import('../src/index.js').Handler} */
  const long = async (_job, ctx) => {
    runs++;
    await delay(2_500, undefined, { signal: ctx.signal });
    return 'slow but fine';
  };
  const holder = worker({ queues: [queue], workerId: 'holder', visibilityMs: 1_000, handlers: { long } });
  // a rival polling the same queue: it re-takes any lease that lapses
  const rival = worker({ queues: [queue], workerId: 'rival', visibilityMs: 1_000, handlers: { long } });
  await holder.start();
  try {
    await reaches(job.id, 'running');
    await rival.start();
    const firstLease = (await row(job.id)).lease_expires_at;
    await delay(1_700);
    const laterLease = (await row(job.id)).lease_expires_at;
    assert.ok(laterLease.getTime() - firstLease.getTime() >= 500, 'the lease was not renewed');
    await reaches(job.id, 'done');
  } finally {
    await Promise.all([holder.stop(), rival.stop()]);
  }
  const done = await row(job.id);
  assert.deepEqual({ claims: done.claims, attempt: done.attempt, claimed_by: done.claimed_by }, {
    claims: 1, attempt: 1, claimed_by: 'holder',
  });
  assert.equal(runs, 1);
  assert.deepEqual(holder.stats().outcomes, { completed: 1 });
  assert.deepEqual(rival.stats().outcomes, {});
});

test('steps replay after a retry: a completed step does not run again', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'two-steps', input: { n: 41 }, idempotencyKey: 'steps', queue, maxAttempts: 3 });
  let ranA = 0;
  let ranB = 0;
  /** @type {unknown[]} */
  const aSeen = [];
  const w = worker({
    queues: [queue],
    backoff: () => 10,
    handlers: {
      'two-steps': async (claimed, ctx) => {
        const a = await ctx.step('a', async () => {
          ranA++;
          return { n: claimed.input.n, at: claimed.attempt, none: undefined, when: new Date(0) };
        });
        aSeen.push(a);
        if (claimed.attempt === 1) throw new Error('the first attempt fails after step a');
        return ctx.step('b', () => { ranB++; return a.n + 1; });
      },
    },
  });
  await w.start();
  try {
    await reaches(job.id, 'done');
  } finally {
    await w.stop();
  }
  assert.equal(ranA, 1, 'step a ran again on the retry');
  assert.equal(ranB, 1);
  assert.equal((await row(job.id)).attempt, 2);
  const stored = { n: 41, at: 1, when: '1970-01-01T00:00:00.000Z' };
  // the first run answers what the replay reads back: the stored JSON form
  assert.deepEqual(aSeen, [stored, stored]);
  const { rows } = await db.pool.query(
    'select name, status, output, attempts from jobs.steps_v1(run_id => $1) order by name', [job.runId]);
  assert.deepEqual(rows, [
    { name: 'a', status: 'completed', output: stored, attempts: 1 },
    { name: 'b', status: 'completed', output: 42, attempts: 1 },
  ]);
});

test('a job with no handler is parked as suspended, uncounted, for 30 s', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'nobody-runs-me', input: {}, idempotencyKey: 'orphan', queue });
  const { events, log } = keptLog();
  const w = worker({ queues: [queue], log, handlers: { other: () => null } });
  await w.start();
  try {
    await reaches(job.id, 'suspended');
  } finally {
    await w.stop();
  }
  const parked = await row(job.id);
  const { now } = await db.one('select now()');
  assert.deepEqual(
    { attempt: parked.attempt, claims: parked.claims, last_error: parked.last_error, code: parked.last_error_code, lease: parked.lease_expires_at, finished: parked.finished_at },
    { attempt: 0, claims: 1, last_error: 'no job registered as "nobody-runs-me"', code: null, lease: null, finished: null },
  );
  const wakesIn = parked.run_at.getTime() - now.getTime();
  assert.ok(wakesIn > 25_000 && wakesIn <= 30_000, `parked for ${wakesIn} ms`);
  assert.ok(events.some((e) => e.event === 'jobs.worker.unknown-job'));
  assert.deepEqual(w.stats().outcomes, { parked: 1 });
});

test('a cancel aborts the signal and nothing is settled over it', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'cancel-me', input: {}, idempotencyKey: 'cancel', queue });
  /** @type {unknown} */
  let reason;
  const w = worker({
    queues: [queue],
    visibilityMs: 600, // a heartbeat every 200 ms
    handlers: {
      'cancel-me': async (_job, ctx) => {
        await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
        reason = ctx.signal.reason;
        return 'returned anyway';
      },
    },
  });
  await w.start();
  try {
    await reaches(job.id, 'running');
    assert.equal((await db.one('select jobs.cancel(id => $1, reason => $2) as ok', [job.id, 'test'])).ok, true);
    await waitFor(() => w.stats().outcomes.cancelled === 1, { what: 'the attempt to end as cancelled' });
  } finally {
    await w.stop();
  }
  assert.equal(/** @type {any} */ (reason).code, 'X_JOB_CANCELLED');
  const cancelled = await row(job.id);
  assert.equal(cancelled.state, 'cancelled');
  assert.equal(cancelled.last_error, 'cancelled: test');
});

test('stop() stops claiming and waits for the running job to finish', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'slow', input: {}, idempotencyKey: 'slow:1', queue });
  let started = false;
  let finished = false;
  const w = worker({
    queues: [queue],
    workerId: 'draining',
    handlers: {
      slow: async () => {
        started = true;
        await delay(800);
        finished = true;
      },
    },
  });
  await w.start();
  await waitFor(() => started, { what: 'the body to start' });
  const stopping = w.stop();
  const later = await enqueue(db.pool, { name: 'slow', input: {}, idempotencyKey: 'slow:2', queue });
  await stopping;
  assert.equal(finished, true, 'stop() resolved before the running job finished');
  assert.equal((await row(job.id)).state, 'done');
  await delay(150);
  const untouched = await row(later.id);
  assert.deepEqual({ state: untouched.state, claims: untouched.claims }, { state: 'ready', claims: 0 },
    'a stopped worker claimed a job');
  assert.equal((await db.one('select count(*)::int as n from jobs.workers where id = $1', ['draining'])).n, 0);
});

test('past stop()\'s deadline the attempt is interrupted and handed back uncounted', async () => {
  const queue = freshQueue();
  const job = await enqueue(db.pool, { name: 'endless', input: {}, idempotencyKey: 'endless', queue, maxAttempts: 1 });
  let started = false;
  /** @type {unknown} */
  let reason;
  const w = worker({
    queues: [queue],
    handlers: {
      endless: async (_job, ctx) => {
        started = true;
        try {
          await delay(60_000, undefined, { signal: ctx.signal });
        } finally {
          reason = ctx.signal.reason;
        }
      },
    },
  });
  await w.start();
  await waitFor(() => started, { what: 'the body to start' });
  const began = Date.now();
  await w.stop({ deadlineMs: 200 });
  assert.ok(Date.now() - began < 3_000, 'stop() waited past its deadline');
  assert.equal(/** @type {any} */ (reason).code, 'X_DRAINING');
  const back = await row(job.id);
  // max_attempts 1 survives the stop: the attempt was given back
  assert.deepEqual({ state: back.state, attempt: back.attempt, lease: back.lease_expires_at }, {
    state: 'ready', attempt: 0, lease: null,
  });
  assert.deepEqual(w.stats().outcomes, { interrupted: 1 });
});
