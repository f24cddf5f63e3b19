/* locks_int.h - what the lock files share with each other and with the tests */
#ifndef PGCOORD_LOCKS_INT_H
#define PGCOORD_LOCKS_INT_H

#include "conn/conn_int.h"

/* ---- locks (lock.c) ------------------------------------------------------------------------- */

/* How many waits ended in an error although the server had granted the lock (found by the
 * pg_locks check and reported as success). For tests; updated atomically. */
extern unsigned long pgc__lock_race_granted;

#endif
