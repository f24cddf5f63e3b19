// Package drivertest runs the Go client against a real PostgreSQL server (PGCOORD_TEST_DSN,
// set by scripts/with-pg) through both drivers Debian packages: pgx v4's stdlib adapter and
// lib/pq.
package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v4/stdlib" // driver "pgx"
	_ "github.com/lib/pq"              // driver "postgres"

	pgcoord "github.com/pgcoord/pgcoord/clients/go"
)

var (
	dsn     string
	schema  string
	drivers = []string{"pgx", "postgres"}
)

// TestMain installs a schema of the run's own with `pgcoord init` (PGCOORD_BIN, else the
// tree's build/pgcoord) unless PGCOORD_TEST_SCHEMA names one, and drops it at the end.
func TestMain(m *testing.M) {
	dsn = os.Getenv("PGCOORD_TEST_DSN")
	if d := os.Getenv("PGCOORD_TEST_DRIVERS"); d != "" {
		drivers = strings.Split(d, ",")
	}
	if dsn == "" {
		fmt.Println("skipped: PGCOORD_TEST_DSN is not set (run through scripts/with-pg)")
		os.Exit(m.Run())
	}
	schema = os.Getenv("PGCOORD_TEST_SCHEMA")
	own := false
	if schema == "" {
		bin := os.Getenv("PGCOORD_BIN")
		if bin == "" {
			bin, _ = filepath.Abs("../../../build/pgcoord")
		}
		schema = fmt.Sprintf("goclient_%d", os.Getpid())
		cmd := exec.Command(bin, "init", "--schema", schema)
		cmd.Env = append(os.Environ(), "PGCOORD_DSN="+dsn)
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "pgcoord init --schema %s (%s): %v\n%s", schema, bin, err, out)
			os.Exit(1)
		}
		own = true
	}
	rc := m.Run()
	if own {
		if db, err := sql.Open("pgx", dsn); err == nil {
			_, _ = db.Exec("DROP SCHEMA IF EXISTS " + pgcoord.QuoteIdentifier(schema) + " CASCADE")
			_ = db.Close()
		}
	}
	os.Exit(rc)
}

// env is one driver's view of the test server: the pool under test (the seed's settings:
// SetMaxOpenConns(10)), its client, and another pool that watches from other sessions.
type env struct {
	driver string
	db     *sql.DB
	c      *pgcoord.Client
	other  *sql.DB
	prefix string // names unique to this run and driver
}

func eachDriver(t *testing.T, f func(t *testing.T, e *env)) {
	if dsn == "" {
		t.Skip("PGCOORD_TEST_DSN is not set")
	}
	for _, d := range drivers {
		d := d
		t.Run(d, func(t *testing.T) {
			e := &env{driver: d, db: open(t, d, dsn), other: open(t, d, dsn),
				prefix: fmt.Sprintf("goclient-%d-%s-%s-", os.Getpid(), d, t.Name())}
			c, err := pgcoord.New(context.Background(), e.db, &pgcoord.Options{Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			e.c = c
			f(t, e)
		})
	}
}

func open(t *testing.T, driver, dsn string) *sql.DB {
	if driver == "postgres" && !strings.Contains(dsn, "sslmode") {
		// lib/pq's default is sslmode=require; the test server has no TLS.
		dsn = withParams(dsn, "sslmode", "disable")
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(10)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// withParams adds server settings to a DSN, URI or keyword form; both drivers send keys they
// do not know as the session's settings.
func withParams(dsn string, kv ...string) string {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		for i := 0; i < len(kv); i += 2 {
			dsn += sep + kv[i] + "=" + kv[i+1]
			sep = "&"
		}
		return dsn
	}
	for i := 0; i < len(kv); i += 2 {
		dsn += " " + kv[i] + "=" + kv[i+1]
	}
	return dsn
}

// held counts the granted advisory locks of a name's key, seen from another session.
func (e *env) held(t *testing.T, name string) int {
	t.Helper()
	k := uint64(pgcoord.Key(name))
	var n int
	err := e.other.QueryRow("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"+
		" AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1", int64(k>>32), int64(k&0xffffffff)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// waiting counts the sessions queued for a name's key.
func (e *env) waiting(t *testing.T, name string) int {
	t.Helper()
	k := uint64(pgcoord.Key(name))
	var n int
	err := e.other.QueryRow("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"+
		" AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1", int64(k>>32), int64(k&0xffffffff)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// holderPid is the backend that holds a name's lock.
func (e *env) holderPid(t *testing.T, name string) int {
	t.Helper()
	k := uint64(pgcoord.Key(name))
	var pid int
	err := e.other.QueryRow("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"+
		" AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1", int64(k>>32), int64(k&0xffffffff)).Scan(&pid)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// poll waits for cond, failing after bound.
func poll(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("waited %v for %s", bound, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func q(s string) string { return pgcoord.QuoteIdentifier(s) }
