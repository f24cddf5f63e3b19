module github.com/pgcoord/pgcoord/clients/go

go 1.19
