#!/usr/bin/env node
// Graphile Worker (graphile-worker 0.17.3, pinned in bench/package.json) behind the benchmark's
// system contract: see bench/CONTRACT.md for the actions, their options and their JSON outputs.
//
//     node bench/systems/graphile_system.mjs <action> --database-url URL [options]
//
// Every job uses the task identifier `bench` and the payload {"i": <int>}. stdout carries only the
// contract's JSON lines; graphile-worker's own logs are routed to stderr.

import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";

// graphile-worker logs one INFO line per successful job unless NO_LOG_SUCCESS is set (its own
// perfTest sets it); it reads the variable when its modules load, hence the dynamic import.
process.env.NO_LOG_SUCCESS = "1";
const { Logger, makeWorkerUtils, run, runMigrations } = await import("graphile-worker");

const TASK = "bench";
const BULK_BATCH = 1000;
const VERSION = "graphile-worker 0.17.3";

// ---------------------------------------------------------------------------------------------
// Worker configurations. Each is a graphile-config preset; `describe()` turns it into the
// "config" string that `work` reports, so the string is always the configuration actually run.
// ---------------------------------------------------------------------------------------------

// Throughput (`work`). The documented high-throughput preset is the one behind the figures on
// https://worker.graphile.org/docs/performance ("Quick stats", perfTest "With batching") and in the
// repository's perfTest/graphile.config.js: concurrentJobs 24, maxPoolSize 25, localQueue
// {size: 500, refetchDelay: {durationMs: 10}}, completeJobBatchDelay 0, failJobBatchDelay 0.
// That preset is kept except for the local queue size. The docs say the right size "will depend
// very heavily on your setup" and that for "very high throughput and extremely fast tasks ... a
// much higher number may make sense" (localQueue.size in dist/index.d.ts); with one process on
// two cores, short sweeps of 100,000 no-op jobs gave about 28k jobs/s at size 500, 27-33k at
// 2,000, 35-40k at 5,000, 34-47k at 10,000 and 31-36k at 20,000 (concurrency 10/24/50 made no
// difference beyond the noise; completeJobBatchDelay 25 halved the rate; no batching gave 2-3k).
// `getJobBatchSize` is not an option in 0.17.3: it is the LocalQueue's internal name for
// localQueue.size (dist/localQueue.js), so the local queue size is the fetch batch size.
const THROUGHPUT_PRESET = {
  concurrentJobs: 24,
  maxPoolSize: 25,
  // Only used for jobs scheduled in the future or retried; new jobs arrive by LISTEN/NOTIFY and
  // the local queue refetches as soon as it drains, so the default is kept.
  pollInterval: 2000,
  localQueue: { size: 10000, refetchDelay: { durationMs: 10 } },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
};

// Latency (`latency`). LISTEN/NOTIFY is built in: every insert notifies, and an idle pool fetches
// at once. For jobs that must start "ASAP" the docs say to set the local queue "to either a low
// number (2+) or disable it entirely (-1)", leaving completion batching on
// (https://worker.graphile.org/docs/performance#localqueue); concurrentJobs + 1 is their
// "sensible default" size, and maxPoolSize "10 or concurrentJobs + 2, whichever is larger"
// (maxPoolSize in dist/index.d.ts). On this machine, one job at a time started about 0.6 ms
// (median) after its commit returned with the local queue at -1, 9 or 25 alike, but a paced stream
// of 1,500 jobs/s fell behind with -1 (8 or 24 workers each fetching for itself: about 1,000
// jobs/s) and drained fastest with 24 workers and a local queue of 25, hence this preset.
const LATENCY_PRESET = {
  concurrentJobs: 24,
  maxPoolSize: 26,
  pollInterval: 2000,
  localQueue: { size: 25 },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
};

// Producers (`enqueue`, `produce`) only need a pool: ten connections (node-postgres' default).
const UTILS_POOL_SIZE = 10;

function describe(preset) {
  return `${VERSION} ${JSON.stringify(preset)}`;
}

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

/** Epoch seconds with sub-millisecond resolution, like Python's time.time(). */
function epochSeconds() {
  return (performance.timeOrigin + performance.now()) / 1000;
}

/** Print one JSON object as one line on stdout. */
function emit(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

/** Peak resident set size of this process (VmHWM, kB) from /proc/self/status. */
function peakRssKb() {
  const match = /^VmHWM:\s+(\d+)\s+kB$/m.exec(readFileSync("/proc/self/status", "utf8"));
  return match ? Number(match[1]) : null;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** graphile-worker logs to stdout by default; the contract reserves stdout for JSON. */
const stderrLogger = new Logger((scope) => (level, message) => {
  if (level === "debug") return;
  const where = scope.label ? `[${scope.label}] ` : "";
  process.stderr.write(`${level.toUpperCase()}: ${where}${message}\n`);
});

function intOption(value, name) {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer`);
  return n;
}

/** A WorkerUtils (pool + addJob/addJobs) with a connection already opened and warmed. */
async function connectedUtils(databaseUrl) {
  const utils = await makeWorkerUtils({
    connectionString: databaseUrl,
    maxPoolSize: UTILS_POOL_SIZE,
    logger: stderrLogger,
  });
  await utils.withPgClient((client) => client.query("select 1"));
  return utils;
}

/**
 * Start a runner with the given preset and task handler. Signals are handled by this script
 * (graphile-worker's own handlers re-raise the signal after shutdown, which would make the exit
 * status non-zero).
 */
function startRunner(databaseUrl, worker, handler) {
  return run({
    noHandleSignals: true,
    taskList: { [TASK]: handler },
    parsedCronItems: [], // no cron: nothing to schedule, and no crontab file to look for
    preset: { worker: { ...worker, connectionString: databaseUrl, logger: stderrLogger } },
  });
}

// ---------------------------------------------------------------------------------------------
// Actions
// ---------------------------------------------------------------------------------------------

async function setup({ databaseUrl }) {
  await runMigrations({ connectionString: databaseUrl, logger: stderrLogger });
  emit({ ok: true });
}

/** Add jobs i = lo .. hi-1 with the bulk API: one addJobs call (one add_jobs() statement). */
async function addBulk(utils, lo, hi) {
  const specs = [];
  for (let i = lo; i < hi; i++) specs.push({ identifier: TASK, payload: { i } });
  await utils.addJobs(specs);
}

async function enqueue({ databaseUrl, count, mode, start }) {
  const utils = await connectedUtils(databaseUrl);
  try {
    const t0 = performance.now();
    if (mode === "single") {
      // One addJob call, one transaction, per job.
      for (let i = start; i < start + count; i++) {
        await utils.addJob(TASK, { i });
      }
    } else {
      // The bulk API in batches of 1,000.
      for (let lo = start; lo < start + count; lo += BULK_BATCH) {
        await addBulk(utils, lo, Math.min(lo + BULK_BATCH, start + count));
      }
    }
    emit({ seconds: (performance.now() - t0) / 1000 });
  } finally {
    await utils.release();
  }
}

async function work({ databaseUrl, count }) {
  const seen = new Set();
  let runs = 0;
  let firstStart = null;
  let lastEnd = null;
  let stopping = null;
  let runner = null;

  const handler = async (payload) => {
    const started = epochSeconds();
    if (firstStart === null) firstStart = started;
    seen.add(payload.i);
    runs += 1;
    lastEnd = epochSeconds();
    if (runs === count && stopping === null) {
      // Do not await the graceful stop here: it waits for in-flight jobs, this one included.
      // It flushes the batched completions and returns the unworked local-queue jobs. (Should
      // the queue hold more than N jobs, workers already handed one still run it: runs > N.)
      stopping = Promise.resolve().then(() => runner.stop());
    }
  };

  runner = await startRunner(databaseUrl, THROUGHPUT_PRESET, handler);
  if (count === 0) stopping = runner.stop();
  await runner.promise;
  await stopping;
  emit({
    runs,
    unique: seen.size,
    first_start: firstStart,
    last_end: lastEnd,
    peak_rss_kb: peakRssKb(),
    config: describe(THROUGHPUT_PRESET),
  });
}

async function latency({ databaseUrl, count }) {
  let runs = 0;
  let stopping = null;
  let runner = null;

  const handler = async (payload) => {
    const started = epochSeconds();
    emit({ i: payload.i, started });
    runs += 1;
    if (runs === count && stopping === null) {
      stopping = Promise.resolve().then(() => runner.stop());
    }
  };

  runner = await startRunner(databaseUrl, LATENCY_PRESET, handler);
  process.stderr.write(`latency worker ready: ${describe(LATENCY_PRESET)}\n`);
  if (count === 0) stopping = runner.stop();
  await runner.promise;
  await stopping;
  emit({ runs });
}

async function produce({ databaseUrl, start }) {
  const utils = await connectedUtils(databaseUrl);
  let next = start;

  try {
    const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
    for await (const raw of lines) {
      const line = raw.trim();
      if (line === "") continue;
      if (line === "one") {
        // One job through the single API; addJob resolves once its transaction has committed.
        const i = next++;
        await utils.addJob(TASK, { i });
        emit({ i, committed: epochSeconds() });
      } else if (line.startsWith("rate ")) {
        const [, r, s] = line.split(/\s+/);
        const addRange = (lo, hi) => addBulk(utils, lo, hi);
        const sent = await paced(addRange, next, Number(r), Number(s));
        next += sent;
        emit({ enqueued: sent });
      } else {
        throw new Error(`produce: unknown command ${JSON.stringify(line)}`);
      }
    }
  } finally {
    await utils.release();
  }
}

// The pacing of `produce`'s `rate R S` line, and how late past S it may still catch up.
const TICK_MS = 10;
const GRACE_MS = 1000;

/**
 * Enqueue floor(R * S) jobs numbered from `first`, job k due k / R seconds after the start.
 * Paced in 10 ms ticks: each tick adds every job due by then in ONE `addRange(lo, hi)` call
 * (jobs lo .. hi-1 through the bulk API, addJobs, so one transaction per tick); a tick that
 * overruns is caught up by the next one. A producer still owing jobs GRACE after S gives up, so
 * the count it returns shows that it fell behind. Returns how many it enqueued.
 */
async function paced(addRange, first, rate, seconds) {
  if (!(rate > 0) || !(seconds > 0)) throw new Error("rate R S: R and S must be positive");
  const total = Math.floor(rate * seconds);
  const t0 = performance.now();
  let sent = 0;
  while (sent < total) {
    const elapsed = performance.now() - t0;
    if (elapsed > seconds * 1000 + GRACE_MS) break;
    const due = Math.min(total, Math.floor((rate * elapsed) / 1000) + 1);
    if (due > sent) {
      await addRange(first + sent, first + due);
      sent = due;
    }
    if (sent < total) await sleep(TICK_MS - ((performance.now() - t0) % TICK_MS));
  }
  return sent;
}

async function idle({ databaseUrl }) {
  // The idle cost of the worker as `work` deploys it: with the local queue, the whole pool polls
  // once per pollInterval. Listen for SIGTERM first, so that one arriving during startup still
  // ends in a clean exit.
  const terminated = new Promise((resolve) => process.once("SIGTERM", resolve));
  const runner = await startRunner(databaseUrl, THROUGHPUT_PRESET, async () => {});
  process.stderr.write(`idle worker ready: ${describe(THROUGHPUT_PRESET)}\n`);
  await terminated;
  await runner.stop();
  await runner.promise;
  emit({ ok: true });
}

// ---------------------------------------------------------------------------------------------
// Command line
// ---------------------------------------------------------------------------------------------

const ACTIONS = { setup, enqueue, work, latency, produce, idle };

async function main() {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      "database-url": { type: "string" },
      count: { type: "string" },
      mode: { type: "string", default: "single" },
      start: { type: "string", default: "0" },
    },
  });
  const action = ACTIONS[positionals[0]];
  if (!action || positionals.length !== 1) {
    const names = Object.keys(ACTIONS).join("|");
    throw new Error(`usage: graphile_system.mjs {${names}} --database-url URL [options]`);
  }
  if (!values["database-url"]) throw new Error("--database-url is required");
  if (values.mode !== "single" && values.mode !== "bulk") {
    throw new Error("--mode must be single or bulk");
  }
  const needsCount = ["enqueue", "work", "latency"].includes(positionals[0]);
  if (needsCount && values.count === undefined) throw new Error("--count is required");
  await action({
    databaseUrl: values["database-url"],
    count: needsCount ? intOption(values.count, "count") : 0,
    mode: values.mode,
    start: intOption(values.start, "start"),
  });
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error?.stack ?? error}\n`);
    process.exit(1);
  },
);
