// The client's tests against a real server, through real drivers. A module of its own, so
// that the client's module needs no driver. Offline, with the drivers Debian packages, these
// tests build in GOPATH mode (tests/cli/client_go.sh shows how; clients/go/README.md says
// why); with a module proxy, `go mod tidy` here fetches the versions below.
module github.com/pgcoord/pgcoord/clients/go/drivertest

go 1.19

require (
	github.com/jackc/pgx/v4 v4.15.0
	github.com/lib/pq v1.10.7
	github.com/pgcoord/pgcoord/clients/go v0.0.0
)

replace github.com/pgcoord/pgcoord/clients/go => ../
