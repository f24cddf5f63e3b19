/* prom.c - the Prometheus text of queue stats and cron schedules, printed by queue stats
 * --prometheus, cron list --prometheus and pgcoord web's /metrics */
#include <inttypes.h>

#include "cli.h"

void cli_prom_queue_stats(FILE *f, const pgc_queue_stat *st, size_t n, const pgc_queue_health *h)
{
	fputs("# HELP pgcoord_queue_jobs Jobs by queue and status (finished ones: retained history).\n", f);
	fputs("# TYPE pgcoord_queue_jobs gauge\n", f);
	for (size_t i = 0; i < n; i++) {
		const char *names[] = { "pending", "scheduled", "running", "succeeded", "failed", "cancelled",
		                        "waiting" };
		long v[] = { st[i].pending, st[i].scheduled, st[i].running, st[i].succeeded,
		             st[i].failed, st[i].cancelled, st[i].waiting };
		for (int k = 0; k < 7; k++) {
			fputs("pgcoord_queue_jobs{queue=", f);
			cli_prom_label(f, st[i].queue);
			fprintf(f, ",status=\"%s\"} %ld\n", names[k], v[k]);
		}
	}
	struct { const char *name, *help, *type; int which; } m[] = {
		{ "pgcoord_queue_oldest_pending_seconds", "Age of the oldest runnable job.", "gauge", 0 },
		{ "pgcoord_queue_completed_last_minute", "Jobs succeeded in the last minute.", "gauge", 1 },
		{ "pgcoord_queue_failed_last_minute", "Jobs failed for good in the last minute.", "gauge", 2 },
		{ "pgcoord_queue_paused", "1 when the queue is paused.", "gauge", 3 },
	};
	for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m[k].name, m[k].help, m[k].name, m[k].type);
		for (size_t i = 0; i < n; i++) {
			fprintf(f, "%s{queue=", m[k].name);
			cli_prom_label(f, st[i].queue);
			switch (m[k].which) {
			case 0: fprintf(f, "} %.3f\n", st[i].oldest_pending_s); break;
			case 1: fprintf(f, "} %ld\n", st[i].completed_1m); break;
			case 2: fprintf(f, "} %ld\n", st[i].failed_1m); break;
			default: fprintf(f, "} %d\n", st[i].paused ? 1 : 0); break;
			}
		}
	}
	if (h == NULL)
		return;
	fputs("# HELP pgcoord_queue_dead_tuples Dead tuples in the queue tables.\n", f);
	fputs("# TYPE pgcoord_queue_dead_tuples gauge\n", f);
	fprintf(f, "pgcoord_queue_dead_tuples{table=\"jobs\"} %ld\n", h->jobs_dead_tuples);
	fprintf(f, "pgcoord_queue_dead_tuples{table=\"job_history\"} %ld\n", h->history_dead_tuples);
	fputs("# HELP pgcoord_queue_live_tuples Live tuples in the queue tables.\n", f);
	fputs("# TYPE pgcoord_queue_live_tuples gauge\n", f);
	fprintf(f, "pgcoord_queue_live_tuples{table=\"jobs\"} %ld\n", h->jobs_live_tuples);
	fprintf(f, "pgcoord_queue_live_tuples{table=\"job_history\"} %ld\n", h->history_live_tuples);
	fputs("# HELP pgcoord_xmin_horizon_age_xids Age in transactions of the oldest backend xmin.\n", f);
	fputs("# TYPE pgcoord_xmin_horizon_age_xids gauge\n", f);
	fprintf(f, "pgcoord_xmin_horizon_age_xids %ld\n", h->horizon_xmin_age);
	fputs("# HELP pgcoord_xmin_horizon_xact_seconds How long the transaction holding the horizon has been open.\n", f);
	fputs("# TYPE pgcoord_xmin_horizon_xact_seconds gauge\n", f);
	fprintf(f, "pgcoord_xmin_horizon_xact_seconds %.3f\n", h->horizon_xact_age_s);
}

/* The schedules in Prometheus' text format, named as queue stats --prometheus names its
 * metrics: times as Unix seconds (left out when there is none: a paused schedule has no next
 * run), the tick counters as counters. */
void cli_prom_cron(FILE *f, const pgc_cron_info *xs, size_t n)
{
	static const struct { const char *name, *help, *type; int which; } m[] = {
		{ "pgcoord_cron_next_run_timestamp_seconds", "When the next tick is due (Unix time; none when paused).",
		  "gauge", 0 },
		{ "pgcoord_cron_last_run_timestamp_seconds", "The latest tick fired or recorded (Unix time).", "gauge", 1 },
		{ "pgcoord_cron_last_success_timestamp_seconds", "The latest tick whose job succeeded (Unix time).",
		  "gauge", 2 },
		{ "pgcoord_cron_overdue_seconds", "How far the server's clock is past the next tick (0: not due).",
		  "gauge", 3 },
		{ "pgcoord_cron_paused", "1 when the schedule is paused.", "gauge", 4 },
		{ "pgcoord_cron_fired_total", "Jobs enqueued for ticks (and triggers).", "counter", 5 },
		{ "pgcoord_cron_missed_total", "Ticks missed while no scheduler ran.", "counter", 6 },
		{ "pgcoord_cron_skipped_total", "Ticks skipped because the previous job was still there.", "counter", 7 },
	};
	for (size_t k = 0; k < sizeof m / sizeof m[0]; k++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m[k].name, m[k].help, m[k].name, m[k].type);
		for (size_t i = 0; i < n; i++) {
			const pgc_cron_info *x = &xs[i];
			int64_t us = m[k].which == 0 ? (x->paused ? 0 : x->next_tick_us)
			             : m[k].which == 1 ? x->last_tick_us : x->last_success_us;
			if (m[k].which <= 2 && us == 0)
				continue;
			fprintf(f, "%s{schedule=", m[k].name);
			cli_prom_label(f, x->name);
			switch (m[k].which) {
			case 0: case 1: case 2: fprintf(f, "} %.3f\n", (double)us / 1e6); break;
			case 3:
				fprintf(f, "} %.3f\n", !x->paused && x->db_now_us > x->next_tick_us
				       ? (double)(x->db_now_us - x->next_tick_us) / 1e6 : 0.0);
				break;
			case 4: fprintf(f, "} %d\n", x->paused ? 1 : 0); break;
			case 5: fprintf(f, "} %" PRId64 "\n", x->fired); break;
			case 6: fprintf(f, "} %" PRId64 "\n", x->missed); break;
			default: fprintf(f, "} %" PRId64 "\n", x->skipped); break;
			}
		}
	}
}

/* The figures of the concurrency keys, as queue stats --prometheus prints them. */
void cli_prom_queue_keys(FILE *f, const pgc_queue_key_info *k, size_t nk)
{
	struct { const char *name, *help; int which; } m[] = {
		{ "pgcoord_queue_key_running", "Jobs of a concurrency key running now.", 0 },
		{ "pgcoord_queue_key_limit", "Jobs of a key allowed to run at once (0: no limit).", 1 },
		{ "pgcoord_queue_key_pending", "Runnable jobs of a key.", 2 },
		{ "pgcoord_queue_key_held_by_limit", "Runnable jobs of a key held back by its limit.", 3 },
		{ "pgcoord_queue_key_held_by_rate", "Runnable jobs of a key held back by its rate.", 4 },
		{ "pgcoord_queue_key_oldest_pending_seconds", "Age of a key's oldest runnable job.", 5 },
	};
	for (size_t x = 0; x < sizeof m / sizeof m[0]; x++) {
		fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", m[x].name, m[x].help, m[x].name);
		for (size_t i = 0; i < nk; i++) {
			fprintf(f, "%s{queue=", m[x].name);
			cli_prom_label(f, k[i].queue);
			fputs(",key=", f);
			cli_prom_label(f, k[i].key);
			bool by_rate = !k[i].at_limit && k[i].rate_wait_ms > 0;
			switch (m[x].which) {
			case 0: fprintf(f, "} %ld\n", k[i].running); break;
			case 1: fprintf(f, "} %d\n", k[i].limit); break;
			case 2: fprintf(f, "} %ld\n", k[i].pending); break;
			case 3: fprintf(f, "} %ld\n", k[i].at_limit ? k[i].pending : 0); break;
			case 4: fprintf(f, "} %ld\n", by_rate ? k[i].pending : 0); break;
			default: fprintf(f, "} %.3f\n", k[i].oldest_pending_s); break;
			}
		}
	}
}
