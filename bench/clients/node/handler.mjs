// handler.mjs - the command-per-job handler of the Node.js client's benchmark: `pgcoord worker
// -- node handler.mjs` starts it once per job; it exits 0 at once (the cost measured is Node's
// start-up, the "process per job" path).
process.exit(0);
