package pgcoord

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ProtocolVersion is the version of the pgcoord protocol (docs/PROTOCOL.md) this client
// speaks. New refuses a schema whose protocol_version() returns another.
const ProtocolVersion = 1

// Version is this client's version, pgcoord's release it comes with.
const Version = "0.1.0"

// DefaultSchema is the schema `pgcoord init` installs into unless told otherwise.
const DefaultSchema = "pgcoord"

// Options configure a Client. The zero value is the defaults.
type Options struct {
	// Schema is the pgcoord schema's name, as given to `pgcoord init --schema`; "" is
	// DefaultSchema. It is quoted as an identifier, never pasted as text.
	Schema string
	// HeartbeatInterval is how often a held session lock checks its session (one goroutine
	// per Client checks all its held locks); 0 is one second.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout bounds one heartbeat; a heartbeat that has no answer by then marks the
	// lock lost and drops its session. 0 is five seconds.
	HeartbeatTimeout time.Duration
	// StatementTimeout bounds the statements that never wait (try-lock, unlock, the pg_locks
	// check, the lease calls), besides the caller's context. 0 is ten seconds. A try-lock or
	// unlock whose context cannot be cancelled (context.Background) is bounded by a timer that
	// ends its session from another connection if the answer is late, rather than by a context
	// (which costs the drivers a goroutine per statement).
	StatementTimeout time.Duration
	// Pooler, when not "", is what sits between the client and PostgreSQL ("none",
	// "session", "transaction", "statement"), taken as it is instead of Client.Pooler's probe.
	Pooler string
}

// Client is pgcoord on a database/sql pool. It holds no connection of its own: each call takes
// one from the pool and gives it back, except a session lock, which keeps its connection
// until Unlock. A Client is safe for concurrent use.
type Client struct {
	db      *sql.DB
	schema  string
	qschema string // the schema quoted as an identifier
	opts    Options
	hb      heartbeats // the session locks' heartbeat
	pooler  poolerCache
}

// New makes a Client on db, with whatever driver db was opened with (pgx's stdlib adapter,
// lib/pq, ...). It checks once that the schema speaks ProtocolVersion, and refuses it
// otherwise with an error naming both versions and the fix (errors.Is ErrProtocolVersion).
func New(ctx context.Context, db *sql.DB, opts *Options) (*Client, error) {
	if db == nil {
		return nil, usageErr("new", "db must not be nil")
	}
	c := &Client{db: db}
	if opts != nil {
		c.opts = *opts
	}
	if c.opts.Schema == "" {
		c.opts.Schema = DefaultSchema
	}
	if c.opts.HeartbeatInterval <= 0 {
		c.opts.HeartbeatInterval = time.Second
	}
	if c.opts.HeartbeatTimeout <= 0 {
		c.opts.HeartbeatTimeout = 5 * time.Second
	}
	if c.opts.StatementTimeout <= 0 {
		c.opts.StatementTimeout = 10 * time.Second
	}
	switch c.opts.Pooler {
	case "", "none", "session", "transaction", "statement":
	default:
		return nil, usageErr("new", "Options.Pooler must be \"\", \"none\", \"session\", \"transaction\" or \"statement\", got %q", c.opts.Pooler)
	}
	if err := checkSchema(c.opts.Schema); err != nil {
		return nil, err
	}
	c.schema = c.opts.Schema
	c.qschema = QuoteIdentifier(c.schema)
	if err := c.checkVersion(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// DB returns the pool the client works on.
func (c *Client) DB() *sql.DB { return c.db }

// Schema returns the schema's name, unquoted.
func (c *Client) Schema() string { return c.schema }

// QuoteIdentifier quotes s as a PostgreSQL identifier: in double quotes, with each double
// quote doubled.
func QuoteIdentifier(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// checkSchema applies the C library's rule for schema names (pgc__check_schema).
func checkSchema(s string) error {
	if len(s) > 63 {
		return usageErr("new", "schema name is longer than 63 bytes")
	}
	if strings.ContainsRune(s, '$') {
		return usageErr("new", "schema name must not contain '$'")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return usageErr("new", "schema name must not contain control characters")
		}
	}
	return nil
}

// sql expands @S@ in a constant statement to the quoted schema.
func (c *Client) sql(text string) string {
	return strings.ReplaceAll(text, "@S@", c.qschema)
}

func (c *Client) checkVersion(ctx context.Context) error {
	var v int
	err := c.db.QueryRowContext(ctx, c.sql("SELECT @S@.protocol_version()")).Scan(&v)
	if err != nil {
		switch SQLState(err) {
		case "3F000", "42883":
			return &Error{Op: "new", SQLState: SQLState(err), Class: ClassUsage, Kind: ErrProtocolVersion, Err: err,
				Msg: fmt.Sprintf("schema %s has no protocol_version(): it is not installed, or it is from before the"+
					" protocol; run `pgcoord init --schema %s` (this client speaks protocol version %d)",
					c.qschema, c.schema, ProtocolVersion)}
		}
		return wrap("new: checking the protocol version", err)
	}
	if v != ProtocolVersion {
		return &Error{Op: "new", Class: ClassUsage, Kind: ErrProtocolVersion,
			Msg: fmt.Sprintf("schema %s speaks protocol version %d, this client speaks version %d: run the"+
				" `pgcoord init --schema %s` of a release that speaks version %d, or use a client that speaks"+
				" version %d", c.qschema, v, ProtocolVersion, c.schema, ProtocolVersion, v)}
	}
	return nil
}

// bounded derives a context bounded by the client's statement timeout.
func (c *Client) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.opts.StatementTimeout)
}

// dbClosed says whether db.Close was called, without a round trip and without taking a
// connection: database/sql checks for a closed pool before it looks at the context, so a
// request with a context already cancelled answers "closed" or "cancelled" at once.
func dbClosed(db *sql.DB) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	conn, err := db.Conn(ctx)
	if err == nil {
		_ = conn.Close()
		return false
	}
	return !errors.Is(err, context.Canceled)
}
