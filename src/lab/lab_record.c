/* lab_record.c - what an experiment records: a failure (once, the first one wins), its
 * verdict, the values it observed; and the threads and barrier of experiments that need real
 * concurrency */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lab_int.h"

/* ---- failures, verdicts, values ---- */

const char *lab_fmt(char *buf, long long v)
{
	snprintf(buf, 24, "%lld", v);
	return buf;
}

/* Records a failure (the first one wins; anyone at the barrier is woken) or a verdict (unless
 * the experiment failed): its observation, under L->mu. */
static void record(lab *L, bool failure, bool pass, const char *fmt, va_list ap)
{
	pthread_mutex_lock(&L->mu);
	if (!L->failed) {
		char buf[PGC_LAB_OBSERVATION_MAX];
		vsnprintf(buf, sizeof buf, fmt, ap);
		pgc__copy_line(L->res->observation, sizeof L->res->observation, buf);
		if (failure) {
			L->failed = true;
		} else {
			L->res->passed = pass;
			L->verdict_set = true;
		}
	}
	if (failure)
		pthread_cond_broadcast(&L->cv);
	pthread_mutex_unlock(&L->mu);
}

void lab_fail(lab *L, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	record(L, true, false, fmt, ap);
	va_end(ap);
}

bool lab_failed(lab *L)
{
	pthread_mutex_lock(&L->mu);
	bool f = L->failed;
	pthread_mutex_unlock(&L->mu);
	return f;
}

void lab_verdict(lab *L, bool pass, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	record(L, false, pass, fmt, ap);
	va_end(ap);
}

static void add_value(lab *L, const char *name, pgc_lab_value_kind kind, const char *text)
{
	pthread_mutex_lock(&L->mu);
	pgc_lab_result *r = L->res;
	if (r->nvalues < PGC_LAB_VALUES_MAX) {
		pgc_lab_value *v = &r->values[r->nvalues++];
		snprintf(v->name, sizeof v->name, "%s", name);
		v->kind = kind;
		pgc__copy_line(v->text, sizeof v->text, text);
	}
	pthread_mutex_unlock(&L->mu);
}

void lab_vint(lab *L, const char *name, long long v)
{
	char buf[24];
	add_value(L, name, PGC_LAB_INT, lab_fmt(buf, v));
}

void lab_vbool(lab *L, const char *name, bool v)
{
	add_value(L, name, PGC_LAB_BOOL, v ? "true" : "false");
}

void lab_vtext(lab *L, const char *name, const char *v)
{
	add_value(L, name, PGC_LAB_TEXT, v ? v : "");
}

/* ---- threads and the barrier ---- */

struct thread_arg {
	lab *L;
	lab_sess *s;
	int i;
	lab_thread_fn fn;
	void *arg;
};

static void *thread_main(void *p)
{
	struct thread_arg *t = p;
	t->fn(t->L, t->s, t->i, t->arg);
	return NULL;
}

bool lab_threads(lab *L, int n, lab_sess **sessions, lab_thread_fn fn, void *arg)
{
	if (n < 1 || n > LAB_SESSIONS_MAX) {
		lab_fail(L, "internal: %d threads", n);
		return false;
	}
	pthread_t tids[LAB_SESSIONS_MAX];
	struct thread_arg args[LAB_SESSIONS_MAX];
	pthread_mutex_lock(&L->mu);
	L->barrier_n = n;
	L->barrier_count = 0;
	pthread_mutex_unlock(&L->mu);
	int started = 0;
	for (int i = 0; i < n; i++) {
		args[i] = (struct thread_arg){ L, sessions[i], i, fn, arg };
		if (pthread_create(&tids[i], NULL, thread_main, &args[i]) != 0) {
			lab_fail(L, "cannot start thread %d", i + 1);
			break;
		}
		started++;
	}
	for (int i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	return !lab_failed(L);
}

bool lab_barrier(lab *L)
{
	struct timespec until;
	clock_gettime(CLOCK_MONOTONIC, &until);
	/* A rendezvous, not a lock wait: as long as a statement may take. */
	int64_t ns = until.tv_nsec + ((int64_t)L->opts.lock_timeout_ms + 5000) * 1000000;
	until.tv_sec += ns / 1000000000;
	until.tv_nsec = ns % 1000000000;
	pthread_mutex_lock(&L->mu);
	unsigned gen = L->barrier_gen;
	if (++L->barrier_count == L->barrier_n) {
		L->barrier_count = 0;
		L->barrier_gen++;
		pthread_cond_broadcast(&L->cv);
		pthread_mutex_unlock(&L->mu);
		return true;
	}
	while (gen == L->barrier_gen && !L->failed) {
		if (pthread_cond_timedwait(&L->cv, &L->mu, &until) == ETIMEDOUT)
			break;
	}
	bool ok = gen != L->barrier_gen;
	bool failed = L->failed;
	pthread_mutex_unlock(&L->mu);
	if (!ok && !failed)
		lab_fail(L, "threads did not meet at the barrier within %d ms", L->opts.lock_timeout_ms + 5000);
	return ok && !failed;
}

