package pgcoord

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"sync"
)

// Notification is one NOTIFY a Listener heard.
type Notification struct {
	Channel string
	Payload string
}

// Listener is a LISTEN session: database/sql has no LISTEN, so the Worker and WaitResult take
// one through this interface. NewListener makes one on any driver whose connections can wait
// for notifications the way pgx's stdlib adapter does (pgx v4 and v5); a program on another
// driver may give its own (lib/pq's pq.Listener fits in a few lines), or none: the worker then
// polls.
//
// A Listener is used by one goroutine at a time, except Close, which may be called from any.
type Listener interface {
	// Listen starts listening on channel (a name of up to 63 bytes, quoted by the Listener).
	Listen(ctx context.Context, channel string) error
	// Unlisten stops listening on channel.
	Unlisten(ctx context.Context, channel string) error
	// Wait returns the next notification, or an error when ctx is done first (then the
	// Listener stays usable) or when the session is lost (then it is not: make another).
	Wait(ctx context.Context) (Notification, error)
	// Close ends the Listener's session.
	Close() error
}

// NewListener opens a Listener on a connection of db of its own, kept until Close. It needs a
// driver connection with the method Conn() whose value has WaitForNotification(ctx), as pgx's
// stdlib adapter offers (v4 and v5: github.com/jackc/pgx/vN/stdlib); it finds them by
// reflection, so this module imports no driver. Any other driver gives an error matching
// ErrNoListen.
func NewListener(ctx context.Context, db *sql.DB) (Listener, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, wrap("listen: taking a connection from the pool", err)
	}
	ok := false
	_ = conn.Raw(func(dc interface{}) error {
		ok = waitMethod(dc).IsValid()
		return nil
	})
	if !ok {
		_ = conn.Close()
		return nil, &Error{Op: "listen", Class: ClassUsage, Kind: ErrNoListen,
			Msg: "the database/sql driver offers no way to wait for notifications (pgx's stdlib adapter does)"}
	}
	return &connListener{conn: conn}, nil
}

// waitMethod is dc.Conn().WaitForNotification when the driver connection has them.
func waitMethod(dc interface{}) reflect.Value {
	m := reflect.ValueOf(dc).MethodByName("Conn")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
		return reflect.Value{}
	}
	pc := m.Call(nil)[0]
	if pc.Kind() == reflect.Ptr && pc.IsNil() {
		return reflect.Value{}
	}
	w := pc.MethodByName("WaitForNotification")
	ctxType := reflect.TypeOf((*context.Context)(nil)).Elem()
	errType := reflect.TypeOf((*error)(nil)).Elem()
	if !w.IsValid() || w.Type().NumIn() != 1 || !w.Type().In(0).Implements(ctxType) && w.Type().In(0) != ctxType ||
		w.Type().NumOut() != 2 || w.Type().Out(1) != errType {
		return reflect.Value{}
	}
	return w
}

type connListener struct {
	conn   *sql.Conn
	mu     sync.Mutex
	closed bool
}

func (l *connListener) Listen(ctx context.Context, channel string) error {
	if err := checkName("channel", channel, 63); err != nil {
		return err
	}
	_, err := l.conn.ExecContext(ctx, "LISTEN "+QuoteIdentifier(channel))
	return wrap("listen", err)
}

func (l *connListener) Unlisten(ctx context.Context, channel string) error {
	_, err := l.conn.ExecContext(ctx, "UNLISTEN "+QuoteIdentifier(channel))
	return wrap("unlisten", err)
}

func (l *connListener) Wait(ctx context.Context) (Notification, error) {
	var n Notification
	err := l.conn.Raw(func(dc interface{}) error {
		w := waitMethod(dc)
		if !w.IsValid() {
			return ErrNoListen
		}
		out := w.Call([]reflect.Value{reflect.ValueOf(ctx)})
		if e, _ := out[1].Interface().(error); e != nil {
			return e
		}
		p := reflect.Indirect(out[0])
		if !p.IsValid() || p.Kind() != reflect.Struct {
			return errors.New("the driver gave no notification")
		}
		if f := p.FieldByName("Channel"); f.IsValid() && f.Kind() == reflect.String {
			n.Channel = f.String()
		}
		if f := p.FieldByName("Payload"); f.IsValid() && f.Kind() == reflect.String {
			n.Payload = f.String()
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return n, wrap("wait for a notification", ctx.Err())
		}
		return n, wrap("wait for a notification", err)
	}
	return n, nil
}

func (l *connListener) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	// The session goes with its LISTENs, rather than back to the pool with them.
	drop(l.conn)
	return nil
}
