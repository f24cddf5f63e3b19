/* test_lockmode.c - the conflict tables, checked against the manual's tables written out */
#include <pgcoord.h>

#include "../t.h"

static void lockmode__table_matrix(void)
{
	/* Rows and columns: ACCESS SHARE .. ACCESS EXCLUSIVE; 'X' = conflicts (manual, table 13.2). */
	static const char *const doc[8] = {
		".......X",
		"......XX",
		"....XXXX",
		"...XXXXX",
		"..XX.XXX",
		"..XXXXXX",
		".XXXXXXX",
		"XXXXXXXX",
	};
	for (int a = 1; a <= 8; a++)
		for (int b = 1; b <= 8; b++) {
			bool want = doc[a - 1][b - 1] == 'X';
			if (pgc_table_lock_conflicts(a, b) != want)
				T_FAIL("%s vs %s: expected %s", pgc_table_lock_name(a), pgc_table_lock_name(b),
				       want ? "conflict" : "no conflict");
			T_ASSERT_INT_EQ(pgc_table_lock_conflicts(a, b), pgc_table_lock_conflicts(b, a));
		}
	T_ASSERT(!pgc_table_lock_conflicts(0, 8));
	T_ASSERT(!pgc_table_lock_conflicts(9, 1));
}

static void lockmode__row_matrix(void)
{
	/* KEY SHARE, SHARE, NO KEY UPDATE, UPDATE (manual, table 13.3). */
	static const char *const doc[4] = { "...X", "..XX", ".XXX", "XXXX" };
	for (int a = 1; a <= 4; a++)
		for (int b = 1; b <= 4; b++)
			if (pgc_row_lock_conflicts(a, b) != (doc[a - 1][b - 1] == 'X'))
				T_FAIL("%s vs %s", pgc_row_lock_sql(a), pgc_row_lock_sql(b));
	T_ASSERT(!pgc_row_lock_conflicts(0, 4));
}

static void lockmode__names(void)
{
	T_ASSERT_STR_EQ(pgc_table_lock_name(PGC_ACCESS_EXCLUSIVE), "AccessExclusiveLock");
	T_ASSERT_STR_EQ(pgc_table_lock_sql(PGC_SHARE_ROW_EXCLUSIVE), "SHARE ROW EXCLUSIVE");
	T_ASSERT_INT_EQ(pgc_table_lock_parse("RowShareLock"), PGC_ROW_SHARE);
	T_ASSERT_INT_EQ(pgc_table_lock_parse("share update exclusive"), PGC_SHARE_UPDATE_EXCLUSIVE);
	T_ASSERT_INT_EQ(pgc_table_lock_parse("nonsense"), 0);
	T_ASSERT_INT_EQ(pgc_table_lock_parse(NULL), 0);
	T_ASSERT(pgc_table_lock_name(0) == NULL);
	T_ASSERT(pgc_table_lock_blocks(9) == NULL);
	T_ASSERT_CONTAINS(pgc_table_lock_blocks(PGC_ACCESS_EXCLUSIVE), "every read and write");
	T_ASSERT_STR_EQ(pgc_row_lock_sql(PGC_FOR_NO_KEY_UPDATE), "FOR NO KEY UPDATE");
	for (int m = 1; m <= 8; m++)
		T_ASSERT_INT_EQ(pgc_table_lock_parse(pgc_table_lock_name(m)), m);
}

int main(int argc, char **argv)
{
	static const t_case cases[] = {
		{ "lockmode__table_matrix", lockmode__table_matrix },
		{ "lockmode__row_matrix", lockmode__row_matrix },
		{ "lockmode__names", lockmode__names },
		{ NULL, NULL },
	};
	return t_main(argc, argv, cases);
}
