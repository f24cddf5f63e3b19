// Package pgcoord is the Go client of pgcoord: coordination of processes through PostgreSQL,
// on the pgcoord protocol (the SQL functions `pgcoord init` installs, docs/PROTOCOL.md).
//
// It works on a database/sql pool with whatever PostgreSQL driver the program uses (pgx's
// stdlib adapter, lib/pq) and needs nothing beyond the standard library:
//
//   - advisory locks that cannot leak through the pool: a session lock owns its connection
//     until its own Unlock, knows when its session is lost (Lock.Lost), and waits under a
//     deadline that the role's statement_timeout and lock_timeout do not change; transaction
//     locks take the *sql.Tx they live in;
//   - the transaction runner (Client.Tx), which runs a function again on a serialization
//     failure or a deadlock and says when a COMMIT's outcome is unknown;
//   - leases with fencing tokens (Client.Acquire, Client.Campaign, Client.FenceCheck);
//   - diagnostics: who waits for whom (Client.BlockingForest, a Forest of BlockingSession with
//     its Roots and Trees) and who holds a lock (Client.LockHolders);
//   - enqueue on the caller's transaction (Client.Enqueue, Client.EnqueueMany);
//   - the queue calls (Client.Claim, Complete, Fail, Renew, ...) and a Worker that runs
//     handlers for claimed jobs, with LISTEN wake-ups through pgx's stdlib adapter
//     (NewListener) and adaptive polling with any other driver;
//   - a pooler in between found by itself (Client.Pooler): behind a transaction-mode pooler
//     session locks are refused (ErrPooler), and the worker and WaitResult poll.
//
// Every call that can wait takes a context.Context. Every error is an *Error, which carries
// the SQLSTATE and the protocol's class, matches the package's sentinels with errors.Is
// (ErrLockBusy, ErrFenced, ErrRetry, ...), and unwraps to the driver's own error.
package pgcoord
