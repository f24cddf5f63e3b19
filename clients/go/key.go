package pgcoord

import (
	"encoding/binary"
	"math/bits"
)

// NameMaxBytes is the longest lock name, in bytes, as in the C library (PGC_KEY_NAME_MAX).
const NameMaxBytes = 255

const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

// Key is the advisory lock key of a lock name: XXH64 with seed 0 of the name's UTF-8 bytes,
// read as a signed 64-bit integer. Every pgcoord client and the C library compute the same key
// for the same name (docs/PROTOCOL.md, rule 4), so a Go program and `pgcoord run --lock NAME`
// exclude each other. Key does not check the name; Lock and XactLock do.
func Key(name string) int64 {
	return int64(xxh64([]byte(name)))
}

func round64(acc, input uint64) uint64 {
	acc += input * prime2
	acc = bits.RotateLeft64(acc, 31)
	return acc * prime1
}

func merge64(acc, val uint64) uint64 {
	acc ^= round64(0, val)
	return acc*prime1 + prime4
}

// xxh64 is XXH64 with seed 0.
func xxh64(b []byte) uint64 {
	n := len(b)
	var h uint64
	if n >= 32 {
		p1, p2 := prime1, prime2 // variables: the sums wrap around, as XXH64 wants
		v1 := p1 + p2
		v2 := p2
		v3 := uint64(0)
		v4 := -p1
		for len(b) >= 32 {
			v1 = round64(v1, binary.LittleEndian.Uint64(b[0:]))
			v2 = round64(v2, binary.LittleEndian.Uint64(b[8:]))
			v3 = round64(v3, binary.LittleEndian.Uint64(b[16:]))
			v4 = round64(v4, binary.LittleEndian.Uint64(b[24:]))
			b = b[32:]
		}
		h = bits.RotateLeft64(v1, 1) + bits.RotateLeft64(v2, 7) + bits.RotateLeft64(v3, 12) + bits.RotateLeft64(v4, 18)
		h = merge64(h, v1)
		h = merge64(h, v2)
		h = merge64(h, v3)
		h = merge64(h, v4)
	} else {
		h = prime5
	}
	h += uint64(n)
	for len(b) >= 8 {
		h ^= round64(0, binary.LittleEndian.Uint64(b))
		h = bits.RotateLeft64(h, 27)*prime1 + prime4
		b = b[8:]
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b)) * prime1
		h = bits.RotateLeft64(h, 23)*prime2 + prime3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * prime5
		h = bits.RotateLeft64(h, 11) * prime1
	}
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

// CheckLockName applies the protocol's rule for lock names (1 to NameMaxBytes bytes of valid
// UTF-8), as Lock and XactLock do: an error matching ErrUsage names what is wrong. Key itself
// hashes any bytes.
func CheckLockName(name string) error {
	return checkName("lock name", name, NameMaxBytes)
}
