/* test_key.c - advisory lock keys: the name hash's fixed outputs, text and pg_locks forms */
#include "conn/conn_int.h"
#include "../t.h"

/* XXH64, seed 0: the values published tools (xxhsum -H1) print for these inputs. A change
 * here changes every named lock's key: never. */
static void key__hash_vectors(void)
{
	static const struct {
		const char *in;
		uint64_t out;
	} v[] = {
		{ "", UINT64_C(0xef46db3751d8e999) },
		{ "a", UINT64_C(0xd24ec4f1a98c6e5b) },
		{ "abc", UINT64_C(0x44bc2cf5ad770999) },
		{ "nightly-report", UINT64_C(0x98055996ac6361bd) },
		{ "pgcoord", UINT64_C(0xcba6b47628fb174a) },
		{ "The quick brown fox jumps over the lazy dog", UINT64_C(0x0b242d361fda71bc) },
		{ "0123456789abcdef0123456789abcdef0123456789", UINT64_C(0xa76190c3acf08a1c) },
		{ "h\xc3\xa9llo w\xc3\xb6rld", UINT64_C(0x60041bfec530413c) },
	};
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		uint64_t h = pgc_key_hash(v[i].in, strlen(v[i].in));
		if (h != v[i].out)
			T_FAIL("hash(\"%s\") = %016" PRIx64 ", expected %016" PRIx64, v[i].in, h, v[i].out);
	}
	T_ASSERT(pgc_key_hash(NULL, 5) == UINT64_C(0xef46db3751d8e999));
}

static void key__from_name(void)
{
	pgc_key k;
	pgc_error err;
	T_ASSERT_INT_EQ(pgc_key_from_name("nightly-report", &k, &err), PGC_OK);
	T_ASSERT_INT_EQ(k.kind, PGC_KEY_INT64);
	/* 0x98055996ac6361bd as a signed bigint */
	T_ASSERT_INT_EQ(k.id, INT64_C(-7492483901388791363));
	T_ASSERT_STR_EQ(k.name, "nightly-report");
	char buf[PGC_KEY_NAME_MAX + 64];
	T_ASSERT_INT_EQ(pgc_key_format(&k, buf, sizeof buf), 20);
	T_ASSERT_STR_EQ(buf, "-7492483901388791363");
	T_ASSERT(pgc_key_describe(&k, buf, sizeof buf) > 0);
	T_ASSERT_STR_EQ(buf, "nightly-report (key -7492483901388791363)");
	/* Case matters; names are bytes. */
	pgc_key k2;
	T_ASSERT_INT_EQ(pgc_key_from_name("Nightly-report", &k2, &err), PGC_OK);
	T_ASSERT(!pgc_key_equal(&k, &k2));

	T_ASSERT_INT_EQ(pgc_key_from_name("", &k, &err), PGC_EUSAGE);
	T_ASSERT_STR_EQ(err.message, "lock name is empty");
	T_ASSERT_INT_EQ(err.klass, PGC_CLASS_USAGE);
	char longname[PGC_KEY_NAME_MAX + 2];
	memset(longname, 'x', sizeof longname - 1);
	longname[sizeof longname - 1] = '\0';
	T_ASSERT_INT_EQ(pgc_key_from_name(longname, &k, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "longer than 255");
	longname[PGC_KEY_NAME_MAX] = '\0';
	T_ASSERT_INT_EQ(pgc_key_from_name(longname, &k, &err), PGC_OK);
	T_ASSERT_INT_EQ(pgc_key_from_name(NULL, &k, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_key_from_name("x", NULL, &err), PGC_EUSAGE);
}

static void key__parse_and_format(void)
{
	static const struct {
		const char *in, *out;
	} ok[] = {
		{ "0", "0" },
		{ "42", "42" },
		{ "-7", "-7" },
		{ "+5", "5" },
		{ "9223372036854775807", "9223372036854775807" },
		{ "-9223372036854775808", "-9223372036854775808" },
		{ "20,7", "20,7" },
		{ " 20 , -7 ", "20,-7" },
		{ "-2147483648,2147483647", "-2147483648,2147483647" },
	};
	pgc_key k;
	pgc_error err;
	char buf[PGC_KEY_FORMAT_MAX];
	for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
		if (pgc_key_parse(ok[i].in, &k, &err) != PGC_OK)
			T_FAIL("parse \"%s\": %s", ok[i].in, err.message);
		T_ASSERT(pgc_key_format(&k, buf, sizeof buf) > 0);
		T_ASSERT_STR_EQ(buf, ok[i].out);
		T_ASSERT_STR_EQ(k.name, "");
		/* Round trip. */
		pgc_key again;
		T_ASSERT_INT_EQ(pgc_key_parse(buf, &again, &err), PGC_OK);
		T_ASSERT(pgc_key_equal(&k, &again));
	}
	T_ASSERT_INT_EQ(pgc_key_parse("20,7", &k, &err), PGC_OK);
	T_ASSERT_INT_EQ(k.kind, PGC_KEY_PAIR);
	T_ASSERT_INT_EQ(k.key1, 20);
	T_ASSERT_INT_EQ(k.key2, 7);

	static const struct {
		const char *in, *msg;
	} bad[] = {
		{ "", "key is empty" },
		{ "abc", "expected a bigint" },
		{ "12x", "expected a bigint" },
		{ "9223372036854775808", "expected a bigint" },
		{ "-9223372036854775809", "expected a bigint" },
		{ "1,2,3", "not more" },
		{ "1,", "must be an int4" },
		{ ",1", "must be an int4" },
		{ "2147483648,1", "must be an int4" },
		{ "1,-2147483649", "must be an int4" },
		{ "1.5", "expected a bigint" },
		{ " ", "expected a bigint" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		if (pgc_key_parse(bad[i].in, &k, &err) != PGC_EUSAGE)
			T_FAIL("parse \"%s\" should fail", bad[i].in);
		T_ASSERT_CONTAINS(err.message, bad[i].msg);
	}
	T_ASSERT_INT_EQ(pgc_key_parse(NULL, &k, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_key_format(NULL, buf, sizeof buf), -1);
	k.kind = 0;
	T_ASSERT_INT_EQ(pgc_key_format(&k, buf, sizeof buf), -1);
	/* The buffer size is always enough for the widest keys. */
	pgc_key w = pgc_key_pair(INT32_MIN, INT32_MIN);
	T_ASSERT(pgc_key_format(&w, buf, sizeof buf) < PGC_KEY_FORMAT_MAX);
	w = pgc_key_int64(INT64_MIN);
	T_ASSERT(pgc_key_format(&w, buf, sizeof buf) < PGC_KEY_FORMAT_MAX);
}

static void key__pg_locks_forms(void)
{
	uint32_t c, o;
	int s;
	pgc_key k = pgc_key_int64(INT64_C(0x0000000500000007)), back;
	T_ASSERT_INT_EQ(pgc_key_to_pg_locks(&k, &c, &o, &s), PGC_OK);
	T_ASSERT_INT_EQ(c, 5);
	T_ASSERT_INT_EQ(o, 7);
	T_ASSERT_INT_EQ(s, 1);
	/* Negative keys show as large oids. */
	k = pgc_key_int64(-1);
	T_ASSERT_INT_EQ(pgc_key_to_pg_locks(&k, &c, &o, &s), PGC_OK);
	T_ASSERT_INT_EQ(c, 4294967295u);
	T_ASSERT_INT_EQ(o, 4294967295u);
	int64_t samples[] = { 0, 1, -1, INT64_MAX, INT64_MIN, INT64_C(-7492483901388791363), INT64_C(4294967296) };
	for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
		k = pgc_key_int64(samples[i]);
		T_ASSERT_INT_EQ(pgc_key_to_pg_locks(&k, &c, &o, &s), PGC_OK);
		T_ASSERT_INT_EQ(pgc_key_from_pg_locks(c, o, s, &back), PGC_OK);
		T_ASSERT(pgc_key_equal(&k, &back));
		T_ASSERT_INT_EQ(back.id, samples[i]);
	}
	k = pgc_key_pair(-20, 7);
	T_ASSERT_INT_EQ(pgc_key_to_pg_locks(&k, &c, &o, &s), PGC_OK);
	T_ASSERT_INT_EQ(c, 4294967276u);
	T_ASSERT_INT_EQ(o, 7);
	T_ASSERT_INT_EQ(s, 2);
	T_ASSERT_INT_EQ(pgc_key_from_pg_locks(c, o, s, &back), PGC_OK);
	T_ASSERT_INT_EQ(back.kind, PGC_KEY_PAIR);
	T_ASSERT_INT_EQ(back.key1, -20);
	T_ASSERT_INT_EQ(back.key2, 7);
	/* Same halves, other space: not the same lock. */
	pgc_key as64;
	T_ASSERT_INT_EQ(pgc_key_from_pg_locks(c, o, 1, &as64), PGC_OK);
	T_ASSERT(!pgc_key_equal(&back, &as64));
	T_ASSERT_INT_EQ(pgc_key_from_pg_locks(1, 2, 3, &back), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_key_from_pg_locks(1, 2, 0, &back), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_key_from_pg_locks(1, 2, 1, NULL), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_key_to_pg_locks(NULL, &c, &o, &s), PGC_EUSAGE);
}

/* The hash spreads near-identical names: for 100000 names "job-N", no two keys collide, and
 * each output bit is set about half the time. */
static void key__hash_is_well_mixed(void)
{
	enum { N = 100000 };
	uint64_t *h = malloc(N * sizeof *h);
	T_ASSERT(h != NULL);
	int bits[64] = { 0 };
	char name[32];
	for (int i = 0; i < N; i++) {
		int len = snprintf(name, sizeof name, "job-%d", i);
		h[i] = pgc_key_hash(name, (size_t)len);
		for (int b = 0; b < 64; b++)
			bits[b] += (int)((h[i] >> b) & 1);
	}
	for (int b = 0; b < 64; b++)
		if (bits[b] < N * 48 / 100 || bits[b] > N * 52 / 100)
			T_FAIL("bit %d set in %d of %d hashes", b, bits[b], N);
	/* Sort and look for duplicates. */
	for (int gap = N / 2; gap > 0; gap /= 2)
		for (int i = gap; i < N; i++)
			for (int j = i; j >= gap && h[j - gap] > h[j]; j -= gap) {
				uint64_t t = h[j];
				h[j] = h[j - gap];
				h[j - gap] = t;
			}
	for (int i = 1; i < N; i++)
		T_ASSERT(h[i] != h[i - 1]);
	free(h);
}

/* Names must be well-formed UTF-8, checked before anything reaches the server (which would
 * refuse them with SQLSTATE 22021, an error that looked like the input's data). */
static void key__name_utf8(void)
{
	pgc_error err;
	static const char *good[] = { "a", "h\xc3\xa9llo", "\xe5\x90\x8d\xe5\x89\x8d", "\xf0\x9f\x94\x92",
	                              "\xed\x9f\xbf", "\xf4\x8f\xbf\xbf" };
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
		T_ASSERT_INT_EQ(pgc_name_check("lock name", good[i], 255, &err), PGC_OK);
	static const struct {
		const char *in;
		const char *msg;
	} bad[] = {
		{ "ab\xff" "c", "lock name is not valid UTF-8: byte 0xff at offset 2" },
		{ "\xc3\x28", "byte 0xc3 at offset 0" },         /* a lead byte without its continuation */
		{ "x\xc0\xaf", "byte 0xc0 at offset 1" },        /* overlong '/' */
		{ "xy\xe0\x80\xaf", "byte 0xe0 at offset 2" },  /* overlong, three bytes */
		{ "\xed\xa0\x80", "byte 0xed at offset 0" },    /* a UTF-16 surrogate */
		{ "ok\xf4\x90\x80\x80", "byte 0xf4 at offset 2" }, /* above U+10FFFF */
		{ "\xe2\x82", "byte 0xe2 at offset 0" },         /* cut short by the end */
		{ "\x80", "byte 0x80 at offset 0" },              /* a continuation byte alone */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		T_ASSERT_INT_EQ(pgc_name_check("lock name", bad[i].in, 255, &err), PGC_EUSAGE);
		T_ASSERT_CONTAINS(err.message, bad[i].msg);
		T_ASSERT_INT_EQ(err.klass, PGC_CLASS_USAGE);
		T_ASSERT_STR_EQ(err.sqlstate, "");
	}
	T_ASSERT_INT_EQ(pgc_name_check("queue name", "", 128, &err), PGC_EUSAGE);
	T_ASSERT_STR_EQ(err.message, "queue name is empty");
	T_ASSERT_INT_EQ(pgc_name_check("queue name", "abcd", 3, &err), PGC_EUSAGE);
	T_ASSERT_STR_EQ(err.message, "queue name is longer than 3 bytes");
	T_ASSERT_INT_EQ(pgc_name_check(NULL, NULL, 0, &err), PGC_EUSAGE);
	T_ASSERT_INT_EQ(pgc_name_check(NULL, "x", 0, NULL), PGC_OK);
	/* Every entry point of names: keys, and a named key built by hand. */
	pgc_key k;
	T_ASSERT_INT_EQ(pgc_key_from_name("ab\xff" "c", &k, &err), PGC_EUSAGE);
	T_ASSERT_CONTAINS(err.message, "offset 2");
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "key__hash_vectors", key__hash_vectors },
		{ "key__from_name", key__from_name },
		{ "key__name_utf8", key__name_utf8 },
		{ "key__parse_and_format", key__parse_and_format },
		{ "key__pg_locks_forms", key__pg_locks_forms },
		{ "key__hash_is_well_mixed", key__hash_is_well_mixed },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
