// Command handler is the Go command-per-job handler of the client benchmark: `pgcoord worker
// -- handler` runs it once per job, and it exits 0 at once.
package main

func main() {}
