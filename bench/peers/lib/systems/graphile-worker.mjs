// graphile-worker.mjs - the graphile-worker side of the peers benchmark, through its public API
// (run, makeWorkerUtils, runMigrations). One task, "noop", whose handler only reports its start.
import { createRequire } from 'node:module';
import { Logger, makeWorkerUtils, run, runMigrations } from 'graphile-worker';

const require = createRequire(import.meta.url);
export const name = 'graphile-worker';
export const version = require('graphile-worker/package.json').version;

const silent = new Logger(() => () => {});

// The two settings, for a worker process running `concurrency` jobs at a time. Concurrency is
// set in both, since every system runs the same total concurrency; the rest is either left at
// its default or set as the "Performance" page of the documentation does for its load test.
export function settings(concurrency) {
  return {
    defaults: {
      describe: `concurrentJobs=${concurrency}/process, everything else default ` +
        '(maxPoolSize 10, no localQueue, completeJobBatchDelay -1, failJobBatchDelay -1)',
      options: {},
    },
    tuned: {
      describe: `concurrentJobs=${concurrency}/process, maxPoolSize=${concurrency + 1}, ` +
        'localQueue.size=500, completeJobBatchDelay=0, failJobBatchDelay=0 (docs: Performance)',
      options: {
        maxPoolSize: concurrency + 1,
        preset: { worker: { localQueue: { size: 500 }, completeJobBatchDelay: 0, failJobBatchDelay: 0 } },
      },
    },
  };
}

export async function install(dsn) {
  await runMigrations({ connectionString: dsn, logger: silent });
}

// A producer: add(list of payloads) enqueues them in one call, addOne(payload) one job. A
// payload with a key (k) goes to the named queue of that key, whose jobs run one at a time.
export async function producer(dsn) {
  const utils = await makeWorkerUtils({ connectionString: dsn, logger: silent });
  return {
    add: (payloads) => utils.addJobs(payloads.map((p) => (p.k === undefined
      ? { identifier: 'noop', payload: p } : { identifier: 'noop', payload: p, queueName: p.k }))),
    addOne: (p) => utils.addJob('noop', p),
    close: () => utils.release(),
  };
}

export async function worker(dsn, setting, concurrency, onJob) {
  const runner = await run({
    connectionString: dsn,
    concurrency,
    noHandleSignals: true,
    logger: silent,
    taskList: {
      noop: async (p) => {
        await onJob(p);
      },
    },
    ...settings(concurrency)[setting].options,
  });
  runner.promise.catch((e) => {
    process.send?.({ ev: 'error', message: `graphile-worker runner: ${e.message}` });
  });
  return { stop: () => runner.stop() };
}

// Jobs not yet completed (graphile-worker deletes a job when it completes), and jobs that
// failed at least once.
export async function counts(client) {
  const r = await client.query(
    'SELECT count(*)::int AS remaining, count(*) FILTER (WHERE last_error IS NOT NULL)::int AS failed ' +
      'FROM graphile_worker._private_jobs');
  return r.rows[0];
}
