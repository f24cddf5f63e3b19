/* key.c - advisory lock keys: numbers, pairs, names hashed with XXH64, text and pg_locks forms
 *
 * Names are hashed with XXH64 (seed 0), written here from xxHash's published specification. It
 * is well mixed (it passes SMHasher), fast, and implemented in every language, so anyone can
 * compute the key of a name without this library. The hash is part of the on-disk and on-wire
 * contract: tests pin its output for a few names so that it can never change by accident. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

#define P1 UINT64_C(0x9E3779B185EBCA87)
#define P2 UINT64_C(0xC2B2AE3D27D4EB4F)
#define P3 UINT64_C(0x165667B19E3779F9)
#define P4 UINT64_C(0x85EBCA77C2B2AE63)
#define P5 UINT64_C(0x27D4EB2F165667C5)

static inline uint64_t rotl64(uint64_t x, int r)
{
	return (x << r) | (x >> (64 - r));
}

/* Little-endian reads, whatever the host's byte order and alignment. */
static inline uint64_t read64(const unsigned char *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static inline uint32_t read32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t xxh_round(uint64_t acc, uint64_t input)
{
	acc += input * P2;
	acc = rotl64(acc, 31);
	return acc * P1;
}

static inline uint64_t xxh_merge(uint64_t acc, uint64_t val)
{
	acc ^= xxh_round(0, val);
	return acc * P1 + P4;
}

uint64_t pgc_key_hash(const void *data, size_t len)
{
	const unsigned char *p = data, *end = p + len;
	const uint64_t seed = 0;
	uint64_t h;
	if (data == NULL)
		len = 0, p = end = (const unsigned char *)"";
	if (len >= 32) {
		uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
		const unsigned char *limit = end - 32;
		do {
			v1 = xxh_round(v1, read64(p));
			v2 = xxh_round(v2, read64(p + 8));
			v3 = xxh_round(v3, read64(p + 16));
			v4 = xxh_round(v4, read64(p + 24));
			p += 32;
		} while (p <= limit);
		h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
		h = xxh_merge(h, v1);
		h = xxh_merge(h, v2);
		h = xxh_merge(h, v3);
		h = xxh_merge(h, v4);
	} else {
		h = seed + P5;
	}
	h += (uint64_t)len;
	while (end - p >= 8) {
		h ^= xxh_round(0, read64(p));
		h = rotl64(h, 27) * P1 + P4;
		p += 8;
	}
	if (end - p >= 4) {
		h ^= (uint64_t)read32(p) * P1;
		h = rotl64(h, 23) * P2 + P3;
		p += 4;
	}
	while (p < end) {
		h ^= (uint64_t)(*p) * P5;
		h = rotl64(h, 11) * P1;
		p++;
	}
	h ^= h >> 33;
	h *= P2;
	h ^= h >> 29;
	h *= P3;
	h ^= h >> 32;
	return h;
}

pgc_key pgc_key_int64(int64_t id)
{
	pgc_key k;
	memset(&k, 0, sizeof k);
	k.kind = PGC_KEY_INT64;
	k.id = id;
	return k;
}

pgc_key pgc_key_pair(int32_t key1, int32_t key2)
{
	pgc_key k;
	memset(&k, 0, sizeof k);
	k.kind = PGC_KEY_PAIR;
	k.key1 = key1;
	k.key2 = key2;
	return k;
}

int pgc_key_from_name(const char *name, pgc_key *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (name == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_key_from_name: name and out must not be NULL");
	int rc = pgc_name_check("lock name", name, PGC_KEY_NAME_MAX, err);
	if (rc != PGC_OK)
		return rc;
	size_t len = strlen(name);
	/* Two's complement reinterpretation, without implementation-defined conversion. */
	uint64_t h = pgc_key_hash(name, len);
	int64_t id;
	memcpy(&id, &h, sizeof id);
	*out = pgc_key_int64(id);
	memcpy(out->name, name, len + 1);
	return PGC_OK;
}

/* Parses one signed decimal number within [min, max], allowing surrounding spaces. */
static bool parse_num(const char *s, const char *e, long long min, long long max, long long *out)
{
	while (s < e && *s == ' ')
		s++;
	while (e > s && e[-1] == ' ')
		e--;
	if (s == e || e - s > 24)
		return false;
	char buf[32];
	memcpy(buf, s, (size_t)(e - s));
	buf[e - s] = '\0';
	if (!(buf[0] == '-' || buf[0] == '+' || (buf[0] >= '0' && buf[0] <= '9')))
		return false;
	char *end;
	errno = 0;
	long long v = strtoll(buf, &end, 10);
	if (end == buf || *end != '\0' || errno == ERANGE || v < min || v > max)
		return false;
	*out = v;
	return true;
}

int pgc_key_parse(const char *text, pgc_key *out, pgc_error *err)
{
	pgc_error_clear(err);
	if (text == NULL || out == NULL)
		return pgc__err(err, PGC_EUSAGE, "pgc_key_parse: text and out must not be NULL");
	if (*text == '\0')
		return pgc__err(err, PGC_EUSAGE, "key is empty");
	const char *comma = strchr(text, ',');
	const char *end = text + strlen(text);
	long long a, b;
	if (comma == NULL) {
		if (!parse_num(text, end, INT64_MIN, INT64_MAX, &a))
			return pgc__err(err, PGC_EUSAGE,
			                "invalid key \"%.40s\": expected a bigint (-9223372036854775808..9223372036854775807) or two int4 as A,B",
			                text);
		*out = pgc_key_int64((int64_t)a);
		return PGC_OK;
	}
	if (strchr(comma + 1, ',') != NULL)
		return pgc__err(err, PGC_EUSAGE, "invalid key \"%.40s\": expected one number or two (A,B), not more", text);
	if (!parse_num(text, comma, INT32_MIN, INT32_MAX, &a) ||
	    !parse_num(comma + 1, end, INT32_MIN, INT32_MAX, &b))
		return pgc__err(err, PGC_EUSAGE,
		                "invalid key \"%.40s\": each part of A,B must be an int4 (-2147483648..2147483647)", text);
	*out = pgc_key_pair((int32_t)a, (int32_t)b);
	return PGC_OK;
}

int pgc_key_format(const pgc_key *key, char *buf, size_t size)
{
	if (key == NULL || buf == NULL)
		return -1;
	switch (key->kind) {
	case PGC_KEY_INT64:
		return snprintf(buf, size, "%lld", (long long)key->id);
	case PGC_KEY_PAIR:
		return snprintf(buf, size, "%ld,%ld", (long)key->key1, (long)key->key2);
	}
	return -1;
}

int pgc_key_describe(const pgc_key *key, char *buf, size_t size)
{
	char num[PGC_KEY_FORMAT_MAX];
	if (pgc_key_format(key, num, sizeof num) < 0 || buf == NULL)
		return -1;
	if (key->name[0] != '\0')
		return snprintf(buf, size, "%s (key %s)", key->name, num);
	return snprintf(buf, size, "%s", num);
}

const char *pgc_key_space_name(pgc_key_kind kind)
{
	switch (kind) {
	case PGC_KEY_INT64: return "bigint";
	case PGC_KEY_PAIR: return "int4pair";
	}
	return NULL;
}

bool pgc_key_equal(const pgc_key *a, const pgc_key *b)
{
	if (a == NULL || b == NULL || a->kind != b->kind)
		return false;
	if (a->kind == PGC_KEY_INT64)
		return a->id == b->id;
	return a->key1 == b->key1 && a->key2 == b->key2;
}

int pgc_key_to_pg_locks(const pgc_key *key, uint32_t *classid, uint32_t *objid, int *objsubid)
{
	if (key == NULL || classid == NULL || objid == NULL || objsubid == NULL)
		return PGC_EUSAGE;
	uint64_t u;
	switch (key->kind) {
	case PGC_KEY_INT64:
		memcpy(&u, &key->id, sizeof u);
		*classid = (uint32_t)(u >> 32);
		*objid = (uint32_t)u;
		*objsubid = 1;
		return PGC_OK;
	case PGC_KEY_PAIR:
		*classid = (uint32_t)key->key1;
		*objid = (uint32_t)key->key2;
		*objsubid = 2;
		return PGC_OK;
	}
	return PGC_EUSAGE;
}

int pgc_key_from_pg_locks(uint32_t classid, uint32_t objid, int objsubid, pgc_key *out)
{
	if (out == NULL)
		return PGC_EUSAGE;
	if (objsubid == 1) {
		uint64_t u = (uint64_t)classid << 32 | objid;
		int64_t id;
		memcpy(&id, &u, sizeof id);
		*out = pgc_key_int64(id);
		return PGC_OK;
	}
	if (objsubid == 2) {
		int32_t a, b;
		memcpy(&a, &classid, sizeof a);
		memcpy(&b, &objid, sizeof b);
		*out = pgc_key_pair(a, b);
		return PGC_OK;
	}
	return PGC_EUSAGE;
}
