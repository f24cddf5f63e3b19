/**
 * pgcoord for Node.js: advisory locks that cannot leak through a pool, a retrying transaction
 * runner, leases with fencing tokens, enqueue, the queue's calls and a worker, diagnostics (the
 * blocking forest, lock holders), on the pgcoord protocol (SQL functions of a
 * schema that `pgcoord init` created).
 *
 * @packageDocumentation
 */
export {
  APPLICATION_NAME,
  CLIENT_VERSION,
  Client,
  PROTOCOL_VERSION,
  type ClientOptions,
  type EnqueueOptions,
  type Isolation,
  type On,
  type TransactionOptions,
} from "./client.js";
export {
  CommitUnknownError,
  ConflictError,
  FencedError,
  LostError,
  NotFoundError,
  PgcoordError,
  RetryLaterError,
  SchemaError,
  SqlError,
  StaleError,
  UsageError,
  type ErrorCode,
  type PgcoordErrorOptions,
} from "./errors.js";
export { BlockingForest, type BlockingSession, type BlockingTree, type LockHolder } from "./diag.js";
export { maskDsn } from "./internal.js";
export { POOLER_PROBE_WAIT_MS, type PoolerInfo } from "./pooler.js";
export { LOCK_NAME_MAX_BYTES, key, xxh64 } from "./key.js";
export {
  Lease,
  type LeaseGrant,
  type LeaseInfo,
  type LeaseLossReason,
  type LeaseOptions,
  type LeaseRenewal,
  type LeaseStatus,
} from "./lease.js";
export { SessionLock, type LockOptions, type LockTarget, type XactLockOptions } from "./lock.js";
export {
  FINISHED,
  RESULT_MAX_BYTES,
  type ClaimOptions,
  type Completion,
  type FailOptions,
  type FailOutcome,
  type FlowSettings,
  type Job,
  type JobInfo,
  type JobResult,
  type JobResultOptions,
  type JobStatus,
  type KeySettings,
  type Rate,
  type ReapResult,
  type Renewal,
} from "./queue.js";
export {
  Defer,
  JobLostError,
  Worker,
  type Handler,
  type HandlerContext,
  type StopOptions,
  type WorkerOptions,
  type WorkerStats,
} from "./worker.js";
