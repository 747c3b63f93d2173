// @ts-check
// What the test files share: a scratch database per file, migrated by the Python CLI (the one
// installer of the schema), and small waiting helpers. Not a test file itself (npm test runs
// test/*.test.js only).

import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { configFromConninfo, parseConninfo } from '../src/index.js';

const run = promisify(execFile);

/** The repository root: clients/node/test -> ../../.. */
export const REPOSITORY = path.resolve(fileURLToPath(new URL('../../..', import.meta.url)));
const DURAJOBS_CLI = path.join(REPOSITORY, '.venv', 'bin', 'durajobs');

/** The maintenance database the tests create their scratch databases from. */
export function serverConninfo() {
  const given = process.env.DURAJOBS_TEST_DATABASE_URL;
  if (!given) {
    throw new Error(
      'set DURAJOBS_TEST_DATABASE_URL to a conninfo of a maintenance database, e.g. ' +
        '"host=localhost port=5432 user=postgres password=pg dbname=postgres" (scripts/test does)',
    );
  }
  return given;
}

/**
 * The same server, another database: a URL gets a new path, a keyword conninfo a new dbname.
 * @param {string} conninfo
 * @param {string} dbname
 */
export function withDatabase(conninfo, dbname) {
  if (/^postgres(ql)?:\/\//.test(conninfo)) {
    const url = new URL(conninfo);
    url.pathname = `/${dbname}`;
    return url.toString();
  }
  const keys = { ...parseConninfo(conninfo), dbname };
  const quote = (/** @type {string} */ value) => `'${value.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
  return Object.entries(keys).map(([key, value]) => `${key}=${quote(value)}`).join(' ');
}

/**
 * @param {string} conninfo
 * @param {string} statement
 */
async function admin(conninfo, statement) {
  const client = new pg.Client(configFromConninfo(conninfo));
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}

/**
 * A fresh database with the durajobs schema installed by `durajobs migrate`, and a pool on it.
 * `drop()` ends the pool and drops the database.
 */
export async function scratchDatabase() {
  const server = serverConninfo();
  if (!existsSync(DURAJOBS_CLI)) {
    throw new Error(`${DURAJOBS_CLI} is missing: run scripts/setup from the repository root`);
  }
  const name = `durajobs_node_${randomBytes(6).toString('hex')}`;
  await admin(server, `create database ${name}`);
  const conninfo = withDatabase(server, name);
  try {
    await run(DURAJOBS_CLI, ['migrate', '--database-url', conninfo], { cwd: REPOSITORY });
  } catch (error) {
    await admin(server, `drop database if exists ${name} with (force)`);
    throw error;
  }
  const pool = new pg.Pool({ ...configFromConninfo(conninfo), max: 6 });
  return {
    name,
    conninfo,
    pool,
    /**
     * The first row of a query.
     * @param {string} text
     * @param {unknown[]} [values]
     */
    async one(text, values = []) {
      return (await pool.query(text, values)).rows[0];
    },
    async drop() {
      await pool.end();
      await admin(server, `drop database if exists ${name} with (force)`);
    },
  };
}

/**
 * Poll `predicate` every 25 ms until it answers true.
 * @param {() => boolean | Promise<boolean>} predicate
 * @param {{ timeoutMs?: number, what: string }} options
 */
export async function waitFor(predicate, { timeoutMs = 15_000, what }) {
  const deadline = Date.now() + timeoutMs;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(25);
  }
}

/** @param {number} ms */
export const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

/** A unique queue name, so the tests of one file never see each other's jobs. */
export const freshQueue = () => `q_${randomBytes(4).toString('hex')}`;

/** A log that keeps every event, for asserting on them. */
export function keptLog() {
  /** @type {Array<{ level: string, event: string, fields: Record<string, unknown> }>} */
  const events = [];
  /** @type {import('../src/index.js').Log} */
  const log = (level, event, fields) => { events.push({ level, event, fields }); };
  return { events, log };
}
