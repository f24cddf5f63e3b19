/**
 * The queue's types: a claimed job, what a claim, a completion, a failure, a renewal and a
 * reaper pass take and give, a job's status and result, flow settings. The calls themselves
 * are methods of {@link Client}; the worker is {@link Worker}.
 *
 * @module
 */
import { UsageError } from "./errors.js";

/** The largest result a job may keep, in bytes of its JSON text (as the server prints it). */
export const RESULT_MAX_BYTES = 65536;

/** A job's status: live ones first, then those of the history (`failed` is the dead letter). */
export type JobStatus = "waiting" | "scheduled" | "pending" | "running" | "succeeded" | "failed" | "cancelled";

/** The finished statuses. */
export const FINISHED: ReadonlySet<string> = new Set(["succeeded", "failed", "cancelled"]);

/** A claimed job: its id and the claim token that every call ending or extending its run takes. */
export interface Job<P = unknown> {
  /** The job's id. */
  readonly id: bigint;
  /** The claim's token: {@link Client.complete}, {@link Client.fail} and the rest take it. */
  readonly token: bigint;
  /** The queue it was claimed from. */
  readonly queue: string;
  /** Which run this is: 1 for the first. */
  readonly attempt: number;
  /** How many runs it may have in all. */
  readonly maxAttempts: number;
  /** Its priority (higher first). */
  readonly priority: number;
  /** Its payload, parsed once from JSON. */
  readonly payload: P;
  /** Its concurrency key, or null. */
  readonly key: string | null;
}

/** Options of {@link Client.claim}. */
export interface ClaimOptions {
  /** At most this many jobs (default 1). */
  max?: number;
  /** The lease of each, in ms (default 30000): renew it every third with {@link Client.renew}. */
  leaseMs?: number;
  /** Recorded on the jobs as their worker (default `node-PID@HOST`). */
  worker?: string;
}

/** One completion of {@link Client.completeMany}. */
export interface Completion {
  /** The job. */
  id: bigint;
  /** Its claim token. */
  token: bigint;
  /** Its result: any JSON value of at most {@link RESULT_MAX_BYTES}; undefined or null: none. */
  result?: unknown;
}

/** Options of {@link Client.fail}. */
export interface FailOptions {
  /** Run it again after exactly this many ms (when attempts are left), instead of the backoff. */
  retryInMs?: number;
  /** The backoff's base in ms (default 1000): `min(base * 2^(attempt-1), max)`, jittered to [delay/2, delay]. */
  backoffBaseMs?: number;
  /** The backoff's cap in ms (default 3600000). */
  backoffMaxMs?: number;
}

/** What became of a failed or deferred job: back in the queue, or failed for good. */
export type FailOutcome = "retried" | "dead";

/** The answer of {@link Client.renew}. */
export interface Renewal {
  /** Jobs whose lease was extended. */
  held: bigint[];
  /** Jobs no longer held under their token (lease ran out, claimed again, or cancelled): stop their side effects. */
  lost: bigint[];
  /** Those of `lost` that were cancelled. */
  cancelled: bigint[];
}

/** One pass of the reaper ({@link Client.reap}). */
export interface ReapResult {
  /** Running jobs whose lease ran out with no attempt left: failed. */
  failed: number;
  /** Running jobs whose lease ran out: back to pending. */
  returned: number;
  /** Pending jobs raised ahead of every priority for their wait. */
  aged: number;
  /** Finished jobs purged from the history. */
  purged: number;
}

/** A job as {@link Client.job} reads it, live or from the history. */
export interface JobInfo {
  /** The job's id. */
  id: bigint;
  /** Its queue. */
  queue: string;
  /** Where it is in its life. */
  status: JobStatus;
  /** Its priority (higher first). */
  priority: number;
  /** Runs so far (the current one included). */
  attempts: number;
  /** Runs it may have in all. */
  maxAttempts: number;
  /** Its payload. */
  payload: unknown;
  /** Its concurrency key, or null. */
  key: string | null;
  /** Its unique key, or null. */
  uniqueKey: string | null;
  /** The error of its last failed run, or null. */
  lastError: string | null;
  /** The worker that claimed it last, or null. */
  worker: string | null;
  /** When it may run (or ran). */
  runAt: Date | null;
  /** When it was enqueued. */
  createdAt: Date | null;
  /** When its last run started, or null. */
  startedAt: Date | null;
  /** When it finished; null for a live job. */
  finishedAt: Date | null;
}

/** A job's status and result ({@link Client.jobResult}). */
export interface JobResult<R = unknown> {
  /** The job's status: finished, when {@link Client.jobResult} returns. */
  status: JobStatus;
  /** What its handler returned, for a succeeded job that gave one; else null. */
  result: R | null;
}

/** Options of {@link Client.jobResult}. */
export interface JobResultOptions {
  /** Wait at most this long for the job to finish (default 0: look once). */
  waitMs?: number;
  /**
   * While waiting, look again this often besides the notification (default 1000): a job that
   * fails or is cancelled notifies nobody, so this is how soon such an end is seen.
   */
  recheckMs?: number;
  /** Aborts the wait. */
  signal?: AbortSignal;
}

/** A rate: `n` starts per `perMs` milliseconds. */
export interface Rate {
  /** Starts allowed per interval (1..1000000). */
  n: number;
  /** The interval in ms (>= 1). */
  perMs: number;
}

/**
 * Flow settings of a queue ({@link Client.flowSet}): a field left out keeps its setting, null
 * removes it.
 */
export interface FlowSettings {
  /** Jobs of one concurrency key running at once. */
  keyLimit?: number | null;
  /** Starts of the whole queue. */
  rate?: Rate | null;
  /** Starts of each key. */
  keyRate?: Rate | null;
  /** Keys take turns by virtual time. */
  fair?: boolean | null;
}

/** A key's own settings in a flow queue ({@link Client.keySet}); left out keeps, null removes. */
export interface KeySettings {
  /** Its jobs running at once. */
  limit?: number | null;
  /** Its share of claims when the queue is fair (1..10000). */
  weight?: number | null;
  /** Its starts. */
  rate?: Rate | null;
}

/** A job's result as JSON text, or null for none; refuses what is not JSON or is too large. */
export function resultText(result: unknown, id: bigint): string | null {
  if (result === undefined || result === null) return null;
  let s: string | undefined;
  try {
    s = JSON.stringify(result);
  } catch (err) {
    throw new UsageError(`the result of job ${id} is not JSON: ${(err as Error).message}`, { cause: err });
  }
  if (s === undefined) throw new UsageError(`the result of job ${id} is not JSON (${typeof result})`);
  const bytes = Buffer.byteLength(s);
  if (bytes > RESULT_MAX_BYTES)
    throw new UsageError(`the result of job ${id} is ${bytes} bytes of JSON, over the limit of ${RESULT_MAX_BYTES}`);
  return s;
}

/** A raw claim row as the server sends it (bigints as text, the payload parsed by pg). */
export interface ClaimRow {
  id: string;
  token: string;
  attempts: number;
  max_attempts: number;
  priority: number;
  payload: unknown;
  key: string | null;
}

/** A {@link Job} from a claim row. @internal */
export function jobOf<P>(queue: string, r: ClaimRow): Job<P> {
  return {
    id: BigInt(r.id),
    token: BigInt(r.token),
    queue,
    attempt: r.attempts,
    maxAttempts: r.max_attempts,
    priority: r.priority,
    payload: r.payload as P,
    key: r.key,
  };
}

/** The three numbers of a rate argument: keep (-1), remove (0) or set. @internal */
export function rateArgs(r: Rate | null | undefined, what: string): [number, number] {
  if (r === undefined) return [-1, -1];
  if (r === null) return [0, 0];
  if (!Number.isInteger(r.n) || r.n < 1 || !Number.isInteger(r.perMs) || r.perMs < 1)
    throw new UsageError(`${what} must be {n, perMs} with integers >= 1`);
  return [r.n, r.perMs];
}

/** A setting argument: keep (-1), remove (0) or set. @internal */
export function settingArg(v: number | boolean | null | undefined, what: string): number {
  if (v === undefined) return -1;
  if (v === null) return 0;
  if (typeof v === "boolean") return v ? 1 : 0;
  if (!Number.isInteger(v) || v < 1) throw new UsageError(`${what} must be an integer >= 1 (null removes it)`);
  return v;
}
