// Lock keys: the golden vectors of the C library (tests/unit/test_key.c), through both entries.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";
import { LOCK_NAME_MAX_BYTES, UsageError, key, xxh64 } from "../src/index.js";

const vectors: Array<[string, bigint]> = [
  ["", 0xef46db3751d8e999n],
  ["a", 0xd24ec4f1a98c6e5bn],
  ["abc", 0x44bc2cf5ad770999n],
  ["nightly-report", 0x98055996ac6361bdn],
  ["pgcoord", 0xcba6b47628fb174an],
  ["The quick brown fox jumps over the lazy dog", 0x0b242d361fda71bcn],
  ["0123456789abcdef0123456789abcdef0123456789", 0xa76190c3acf08a1cn],
  ["h\u00e9llo w\u00f6rld", 0x60041bfec530413cn],
];

test("XXH64 seed 0 matches the C library's golden vectors", () => {
  for (const [s, h] of vectors) assert.equal(xxh64(new TextEncoder().encode(s)), h, JSON.stringify(s));
});

test("key() is the hash as a signed 64-bit integer", () => {
  assert.equal(key("nightly-report"), -7492483901388791363n);
  for (const [s, h] of vectors.slice(1)) assert.equal(key(s), BigInt.asIntN(64, h));
  assert.notEqual(key("Nightly-report"), key("nightly-report"));
});

test("key() refuses empty, too long and ill-formed names", () => {
  assert.throws(() => key(""), (e: unknown) => e instanceof UsageError && e.code === "usage" && /empty/.test(e.message));
  assert.throws(() => key("x".repeat(LOCK_NAME_MAX_BYTES + 1)), /longer than 255/);
  assert.doesNotThrow(() => key("x".repeat(LOCK_NAME_MAX_BYTES)));
  assert.throws(() => key("\u00e9".repeat(128)), /longer than 255/); // 256 bytes
  assert.throws(() => key("a\ud800b"), /not valid UTF-8/);
  assert.doesNotThrow(() => key("\ud83d\ude00"));
});

test("the CommonJS entry gives the same keys", () => {
  const require = createRequire(import.meta.url);
  const cjs = require("../../dist/cjs/index.js") as typeof import("../src/index.js");
  assert.equal(cjs.key("nightly-report"), -7492483901388791363n);
  assert.equal(typeof cjs.Client, "function");
});
