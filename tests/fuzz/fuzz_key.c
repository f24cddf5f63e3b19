/* fuzz_key.c - lock keys from user text (--key and lock names): never a crash, and what is
 * accepted round-trips exactly through pgc_key_format and the pg_locks columns */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pgcoord.h>

static void roundtrip(const pgc_key *k)
{
	char buf[PGC_KEY_FORMAT_MAX];
	pgc_key_format(k, buf, sizeof buf);
	pgc_key again;
	pgc_error err;
	if (pgc_key_parse(buf, &again, &err) != PGC_OK || again.kind != k->kind ||
	    (k->kind == PGC_KEY_INT64 ? again.id != k->id : (again.key1 != k->key1 || again.key2 != k->key2)))
		abort();
	uint32_t classid, objid;
	int objsubid;
	pgc_key back;
	if (pgc_key_to_pg_locks(k, &classid, &objid, &objsubid) != PGC_OK ||
	    pgc_key_from_pg_locks(classid, objid, objsubid, &back) != PGC_OK)
		abort();
	if (back.kind != k->kind || (k->kind == PGC_KEY_INT64 ? back.id != k->id
	                                                      : (back.key1 != k->key1 || back.key2 != k->key2)))
		abort();
}

/* libFuzzer's entry point (and replay.c's). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (s == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	pgc_key k;
	pgc_error err;
	if (pgc_key_parse(s, &k, &err) == PGC_OK)
		roundtrip(&k);
	else if (err.message[0] == '\0' || strchr(err.message, '\n') != NULL)
		abort();
	int rc = pgc_key_from_name(s, &k, &err);
	if (rc == PGC_OK) {
		/* A name key is the hash of the name's bytes, and keeps the name. */
		if (k.kind != PGC_KEY_INT64 || (uint64_t)k.id != pgc_key_hash(s, strlen(s)) ||
		    strcmp(k.name, s) != 0)
			abort();
		roundtrip(&k);
	} else if (rc != PGC_EUSAGE || err.message[0] == '\0') {
		abort();
	}
	char desc[PGC_KEY_NAME_MAX + 64];
	pgc_key_describe(&k, desc, sizeof desc);
	free(s);
	return 0;
}
