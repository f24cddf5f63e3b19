/**
 * Leases and leader election with fencing tokens, on the schema's SQL functions
 * (`lease_acquire`, `lease_renew`, `lease_release`): a held lease renews itself every third of
 * its TTL and says when it is lost.
 *
 * @module
 */
import { EventEmitter } from "node:events";
import type pg from "pg";
import { LostError, UsageError, fromPg } from "./errors.js";

/** Options of {@link Client.leaseAcquire} and {@link Client.campaign}. */
export interface LeaseOptions {
  /** Who holds it (shown to others; up to 200 bytes). Default: `node-<pid>@<hostname>`. */
  holder?: string;
  /** Time to live in milliseconds; the lease renews itself every third of it. */
  ttlMs: number;
  /** How long the grant may wait for writers that checked the previous token (default 1000 ms). */
  lockTimeoutMs?: number;
  /** {@link Client.campaign}: how often to try again while someone else holds it (default ttlMs / 3). */
  pollMs?: number;
  /** Aborts {@link Client.campaign}'s wait. */
  signal?: AbortSignal;
}

/** Why a lease was lost, as `lease_renew` said it (or `'error'` when renewals failed until the lease ran out). */
export type LeaseLossReason = "expired" | "released" | "superseded" | "unknown" | "error";

/** What a {@link Lease} needs from its client. @internal */
export interface LeaseHost {
  query<R extends pg.QueryResultRow>(text: string, values: unknown[], deadlineMs: number): Promise<pg.QueryResult<R>>;
  fn(name: string): string;
  mask(s: string): string;
}

/** A row of lease_acquire / lease_renew. @internal */
export interface LeaseRow {
  granted?: boolean;
  status?: string;
  token: string | null;
  holder: string | null;
  expires_at: Date | null;
}

/** A status of `lease_renew` and `lease_release` (docs/PROTOCOL.md). */
export type LeaseStatus = "ok" | "expired" | "released" | "superseded" | "unknown";

/** The lease's row as one call left it: who holds which token until when. */
export interface LeaseInfo {
  /** The fencing token of the row: this grant's, or the current holder's (0n when there is no row). */
  token: bigint;
  /** The holder of that token. */
  holder: string | null;
  /** When the lease lapses, by the server's clock. */
  expiresAt: Date | null;
}

/** What one {@link Client.leaseAcquireToken} got. */
export interface LeaseGrant extends LeaseInfo {
  /** Whether the lease was granted; when not, `token`, `holder` and `expiresAt` describe the current holder. */
  granted: boolean;
}

/** What one {@link Client.leaseRenew} got. */
export interface LeaseRenewal extends LeaseInfo {
  /** `ok` (renewed), or why not. */
  status: LeaseStatus;
}

/** The row's fields as a {@link LeaseInfo}. @internal */
export function leaseInfo(row: LeaseRow | undefined): LeaseInfo {
  return {
    token: row?.token === undefined || row.token === null ? 0n : BigInt(row.token),
    holder: row?.holder ?? null,
    expiresAt: row?.expires_at ?? null,
  };
}

/**
 * A lease held on a name, with the fencing token of this grant. It renews itself every third of
 * its TTL until {@link Lease.release}; a renewal that finds it expired, released or superseded,
 * or renewals that fail until the lease runs out on the local clock, make it lost.
 *
 * Events: `'lost'` `(err: LostError, reason: LeaseLossReason)`, once. {@link Lease.lost} is an
 * AbortSignal that aborts at the same moment. Pass {@link Lease.token} to writers, who call
 * {@link Client.fenceCheck} in their transaction.
 */
export class Lease extends EventEmitter {
  /** The lease's name. */
  readonly name: string;
  /** The holder it was granted to. */
  readonly holder: string;
  /** The fencing token of this grant: greater than every token granted before for the name. */
  readonly token: bigint;
  /** The TTL, in milliseconds. */
  readonly ttlMs: number;
  /** Aborts when the lease is lost (reason: the {@link LostError}); never on release. */
  readonly lost: AbortSignal;
  private readonly lostController = new AbortController();
  private state: "held" | "released" | "lost" = "held";
  private lostError: LostError | undefined;
  private localDeadline: number;
  private timer: NodeJS.Timeout | undefined;
  private busy: Promise<void> = Promise.resolve();
  private serverExpiry: Date | null;

  /** @internal */
  constructor(
    private readonly host: LeaseHost,
    name: string,
    holder: string,
    token: bigint,
    ttlMs: number,
    sentAt: number,
    expiresAt: Date | null,
  ) {
    super();
    this.name = name;
    this.holder = holder;
    this.token = token;
    this.ttlMs = ttlMs;
    this.lost = this.lostController.signal;
    this.localDeadline = sentAt + ttlMs;
    this.serverExpiry = expiresAt;
    this.timer = setInterval(() => void this.renew().catch(() => undefined), Math.max(1, Math.floor(ttlMs / 3)));
    this.timer.unref();
  }

  /** True while the lease is held (not released, not lost, not past its local deadline). */
  get held(): boolean {
    return this.state === "held" && performance.now() < this.localDeadline;
  }

  /** True once the lease is known lost. */
  get isLost(): boolean {
    return this.state === "lost";
  }

  /** The expiry the server gave at the last grant or renewal. */
  get expiresAt(): Date | null {
    return this.serverExpiry;
  }

  private markLost(reason: LeaseLossReason, why: string, cause?: unknown): void {
    if (this.state !== "held") return;
    this.state = "lost";
    if (this.timer !== undefined) clearInterval(this.timer);
    this.lostError = new LostError(`lease "${this.name}" (token ${this.token}) lost: ${why}`, { cause });
    this.lostController.abort(this.lostError);
    this.emit("lost", this.lostError, reason);
  }

  /**
   * Renews now (the lease also does it by itself every third of its TTL).
   *
   * @throws {@link LostError} when the lease is lost
   */
  async renew(): Promise<void> {
    this.busy = this.busy.then(async () => {
      if (this.state !== "held") return;
      const sentAt = performance.now();
      if (sentAt >= this.localDeadline) {
        this.markLost("error", "its TTL ran out before a renewal succeeded");
        return;
      }
      try {
        const r = await this.host.query<LeaseRow>(
          `SELECT status, token, holder, expires_at FROM ${this.host.fn("lease_renew")}($1, $2::bigint, $3::bigint)`,
          [this.name, this.token.toString(), this.ttlMs],
          Math.max(1, this.localDeadline - sentAt),
        );
        const row = r.rows[0];
        if (row?.status === "ok") {
          this.localDeadline = sentAt + this.ttlMs;
          this.serverExpiry = row.expires_at;
        } else {
          const st = (row?.status ?? "unknown") as LeaseLossReason;
          this.markLost(st, `the server says it is ${st}${row && st === "superseded" ? ` (token ${row.token}, holder ${row.holder})` : ""}`);
        }
      } catch (err) {
        // Not known whether it was renewed: the local deadline stands; the next tick tries again.
        if (performance.now() >= this.localDeadline)
          this.markLost("error", `renewals failed until its TTL ran out: ${this.host.mask(String((err as Error).message))}`, err);
      }
    });
    await this.busy;
    if (this.state === "lost") throw this.lostError as LostError;
  }

  /**
   * Ends the lease so that another candidate can take it at once, and stops renewing. A second
   * call does nothing; releasing a lost lease does nothing either (check {@link Lease.isLost}).
   */
  async release(): Promise<void> {
    if (this.state !== "held") {
      if (this.timer !== undefined) clearInterval(this.timer);
      this.state = this.state === "lost" ? "lost" : "released";
      return;
    }
    if (this.timer !== undefined) clearInterval(this.timer);
    await this.busy;
    if (this.state !== "held") return;
    this.state = "released";
    try {
      await this.host.query(`SELECT ${this.host.fn("lease_release")}($1, $2::bigint)`, [this.name, this.token.toString()], 10000);
    } catch (err) {
      throw fromPg(err, `releasing lease "${this.name}"`, this.host.mask);
    }
  }

  /** `await using lease = await client.campaign(...)`: releases at the end of the scope. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.release();
  }
}

/** Checks a lease name or holder as lease_check_args does, with a clearer message. @internal */
export function checkLeaseArgs(name: unknown, holder: unknown, ttlMs: unknown): void {
  if (typeof name !== "string" || name === "") throw new UsageError("lease name must be a non-empty string");
  if (Buffer.byteLength(name) > 200) throw new UsageError("lease name is longer than 200 bytes");
  if (typeof holder !== "string") throw new UsageError("lease holder must be a string");
  if (Buffer.byteLength(holder) > 200) throw new UsageError("lease holder is longer than 200 bytes");
  if (typeof ttlMs !== "number" || !Number.isInteger(ttlMs) || ttlMs <= 0)
    throw new UsageError(`lease ttlMs must be a positive integer number of milliseconds, not ${String(ttlMs)}`);
}
