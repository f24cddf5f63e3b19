/* pgcoord.h - the umbrella header of libpgcoord: coordinate processes through PostgreSQL
 *
 * Include this one header. Every public symbol starts with pgc_ / PGC_. Functions return 0 on
 * success or a negative pgc_code, and fill a caller-supplied pgc_error (which may be NULL).
 * The library never prints, never exits and never aborts on bad input. */
#ifndef PGCOORD_H
#define PGCOORD_H

#include "pgcoord/common.h"
#include "pgcoord/error.h"
#include "pgcoord/conn.h"
#include "pgcoord/duration.h"
#include "pgcoord/cron.h"
#include "pgcoord/schema.h"
#include "pgcoord/lockmode.h"
#include "pgcoord/lab.h"
#include "pgcoord/doctor.h"
#include "pgcoord/lease.h"
#include "pgcoord/tx.h"
#include "pgcoord/lock.h"
#include "pgcoord/diag.h"
#include "pgcoord/queue.h"

#endif
