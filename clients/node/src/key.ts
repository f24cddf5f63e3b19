/**
 * Advisory lock keys: a lock name is hashed to the signed 64-bit key that
 * `pg_advisory_lock(bigint)` takes, exactly as the C library and every other pgcoord client
 * hash it (XXH64, seed 0, of the name's UTF-8 bytes, read as a signed integer).
 *
 * @module
 */
import { UsageError } from "./errors.js";

/** The longest lock name, in UTF-8 bytes (the C library's `PGC_KEY_NAME_MAX`). */
export const LOCK_NAME_MAX_BYTES = 255;

const M64 = (1n << 64n) - 1n;
const P1 = 0x9e3779b185ebca87n;
const P2 = 0xc2b2ae3d27d4eb4fn;
const P3 = 0x165667b19e3779f9n;
const P4 = 0x85ebca77c2b2ae63n;
const P5 = 0x27d4eb2f165667c5n;

function rotl(x: bigint, r: bigint): bigint {
  return ((x << r) | (x >> (64n - r))) & M64;
}

function round(acc: bigint, input: bigint): bigint {
  acc = (acc + input * P2) & M64;
  acc = rotl(acc, 31n);
  return (acc * P1) & M64;
}

function merge(acc: bigint, val: bigint): bigint {
  acc ^= round(0n, val);
  return (acc * P1 + P4) & M64;
}

/**
 * XXH64 of `data` with seed 0, as an unsigned 64-bit integer.
 *
 * @param data - the bytes to hash
 * @returns the hash, in `0n .. 2n ** 64n - 1n`
 */
export function xxh64(data: Uint8Array): bigint {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const len = data.byteLength;
  let p = 0;
  let h: bigint;
  if (len >= 32) {
    let v1 = (P1 + P2) & M64;
    let v2 = P2;
    let v3 = 0n;
    let v4 = (M64 + 1n - P1) & M64;
    for (; p + 32 <= len; p += 32) {
      v1 = round(v1, view.getBigUint64(p, true));
      v2 = round(v2, view.getBigUint64(p + 8, true));
      v3 = round(v3, view.getBigUint64(p + 16, true));
      v4 = round(v4, view.getBigUint64(p + 24, true));
    }
    h = (rotl(v1, 1n) + rotl(v2, 7n) + rotl(v3, 12n) + rotl(v4, 18n)) & M64;
    h = merge(h, v1);
    h = merge(h, v2);
    h = merge(h, v3);
    h = merge(h, v4);
  } else {
    h = P5;
  }
  h = (h + BigInt(len)) & M64;
  for (; p + 8 <= len; p += 8) {
    h ^= round(0n, view.getBigUint64(p, true));
    h = (rotl(h, 27n) * P1 + P4) & M64;
  }
  if (p + 4 <= len) {
    h ^= (BigInt(view.getUint32(p, true)) * P1) & M64;
    h = (rotl(h, 23n) * P2 + P3) & M64;
    p += 4;
  }
  for (; p < len; p++) {
    h ^= (BigInt(data[p] as number) * P5) & M64;
    h = (rotl(h, 11n) * P1) & M64;
  }
  h ^= h >> 33n;
  h = (h * P2) & M64;
  h ^= h >> 29n;
  h = (h * P3) & M64;
  h ^= h >> 32n;
  return h;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Checks a lock name: 1 to {@link LOCK_NAME_MAX_BYTES} bytes of UTF-8, so that the bytes hashed
 * are the ones the caller meant (a string with a lone surrogate has no UTF-8 form).
 *
 * @throws {@link UsageError} naming what is wrong
 * @returns the name's UTF-8 bytes
 */
export function lockNameBytes(name: string): Uint8Array {
  if (typeof name !== "string") throw new UsageError("lock name must be a string");
  if (name === "") throw new UsageError("lock name is empty");
  if (LONE_SURROGATE.test(name)) throw new UsageError("lock name is not valid UTF-8 (it holds a lone surrogate)");
  const bytes = new TextEncoder().encode(name);
  if (bytes.byteLength > LOCK_NAME_MAX_BYTES)
    throw new UsageError(`lock name is longer than ${LOCK_NAME_MAX_BYTES} bytes (${bytes.byteLength})`);
  return bytes;
}

/**
 * The advisory lock key of a name: XXH64 (seed 0) of its UTF-8 bytes, read as a signed 64-bit
 * integer, the value `pg_advisory_lock(bigint)` takes. The same name gives the same key in the
 * C library, the `pgcoord` tool and every pgcoord client.
 *
 * @example
 * ```ts
 * key("nightly-report") // -7492483901388791363n
 * ```
 * @param name - 1 to 255 bytes of UTF-8; case matters
 * @throws {@link UsageError} for an empty, too long or ill-formed name
 */
export function key(name: string): bigint {
  return BigInt.asIntN(64, xxh64(lockNameBytes(name)));
}
