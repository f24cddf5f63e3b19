package pgcoord

import (
	"errors"
	"testing"
)

// The golden vectors of tests/unit/test_key.c (xxhsum -H1): a change here changes every named
// lock's key, and a Go program would no longer exclude a C one.
func TestKeyGoldenVectors(t *testing.T) {
	vectors := []struct {
		in  string
		out uint64
	}{
		{"", 0xef46db3751d8e999},
		{"a", 0xd24ec4f1a98c6e5b},
		{"abc", 0x44bc2cf5ad770999},
		{"nightly-report", 0x98055996ac6361bd},
		{"pgcoord", 0xcba6b47628fb174a},
		{"The quick brown fox jumps over the lazy dog", 0x0b242d361fda71bc},
		{"0123456789abcdef0123456789abcdef0123456789", 0xa76190c3acf08a1c},
		{"h\xc3\xa9llo w\xc3\xb6rld", 0x60041bfec530413c},
	}
	for _, v := range vectors {
		if got := uint64(Key(v.in)); got != v.out {
			t.Errorf("Key(%q) = %016x, want %016x", v.in, got, v.out)
		}
	}
	if got := Key("nightly-report"); got != -7492483901388791363 {
		t.Errorf("Key(nightly-report) = %d, want the signed bigint -7492483901388791363", got)
	}
	if Key("Nightly-report") == Key("nightly-report") {
		t.Error("names are bytes: case must matter")
	}
}

func TestCheckLockName(t *testing.T) {
	long := make([]byte, NameMaxBytes+1)
	for i := range long {
		long[i] = 'x'
	}
	for _, bad := range []string{"", string(long), "a\xffb"} {
		if err := checkName("lock name", bad, NameMaxBytes); err == nil || !isUsage(err) {
			t.Errorf("checkName(%q) = %v, want a usage error", bad, err)
		}
		if err := CheckLockName(bad); !errors.Is(err, ErrUsage) {
			t.Errorf("CheckLockName(%q) = %v, want a usage error", bad, err)
		}
	}
	if err := checkName("lock name", string(long[:NameMaxBytes]), NameMaxBytes); err != nil {
		t.Errorf("a %d-byte name: %v", NameMaxBytes, err)
	}
	if err := CheckLockName("héllo wörld"); err != nil {
		t.Errorf("CheckLockName of a UTF-8 name: %v", err)
	}
}
