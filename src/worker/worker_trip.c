/* worker_trip.c - the dispatcher's round trip: one batch with the completions, the heartbeat
 * and the claims
 *
 * The claims share the free slots among the queues worth claiming and go in the order of the
 * queue names; each claim is one call of claim() (which promotes the queue's due scheduled
 * jobs and takes the flow claim or the plain one). Every answer counts only once the whole
 * batch committed; the claimed rows then go on the ready list. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker_int.h"

/* ---- claimed rows -------------------------------------------------------------------------- */

static wjob *job_from_row(PGresult *res, int r, const char *queue)
{
	size_t qlen = strlen(queue) + 1, plen = pgc__queue_payload_size(res, r);
	wjob *j = calloc(1, sizeof *j + qlen + plen);
	if (j == NULL)
		return NULL;
	char *qn = (char *)(j + 1);
	memcpy(qn, queue, qlen);
	pgc__queue_job_from_row(res, r, qn, qn + qlen, &j->job);
	j->job.internal = j;
	atomic_init(&j->lost, false);
	atomic_init(&j->cancelled, false);
	j->claimed_ms = pgc__now_ms();
	return j;
}

/* Puts claimed rows on the ready list. */
static void take_claimed(pgc_worker *w, PGresult *res, const char *queue)
{
	int rows = PQntuples(res);
	if (rows == 0)
		return;
	wjob *head = NULL, *tail = NULL;
	for (int r = 0; r < rows; r++) {
		wjob *j = job_from_row(res, r, queue);
		if (j == NULL) {
			/* Out of memory: the job comes back to pending when its lease expires. */
			pgc__worker_log(w, PGC_LOG_ERROR, "out of memory: job %s left to its lease", PQgetvalue(res, r, 0));
			continue;
		}
		if (tail)
			tail->next = j;
		else
			head = j;
		tail = j;
	}
	long taken = 0;
	for (wjob *j = head; j; j = j->next)
		taken++;
	atomic_fetch_add(&w->s_claimed, taken);
	pthread_mutex_lock(&w->mu);
	for (wjob *j = head; j; j = j->next) {
		pgc__worker_held_add(w, j);
		w->n_ready++;
	}
	if (head != NULL) {
		if (w->ready_tail)
			w->ready_tail->next = head;
		else
			w->ready_head = head;
		w->ready_tail = tail;
	}
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

/* ---- the round trip ------------------------------------------------------------------------ */

/* The batch failed with a 22xxx error and some completions carry a result: one of them is
 * likely what the server refused (not JSON, over PGC_JOB_RESULT_MAX). Each such job is
 * completed alone; one whose result is refused fails its attempt instead, with the server's
 * reason, so that the others are not held back by it. Returns how many jobs left *done, or -1
 * (err set) when a statement failed otherwise. */
static long settle_results(pgc_worker *w, dstate *d, wjob **done, pgc_error *err)
{
	long settled = 0;
	wjob **pp = done;
	while (*pp) {
		wjob *j = *pp;
		if (j->result.result_json == NULL) {
			pp = &j->next;
			continue;
		}
		const char *r[1] = { j->result.result_json }, *o[1] = { j->result.output };
		int ex[1] = { j->result.exit_status };
		size_t k = 0;
		int rc = pgc__queue_complete_run(w->q, 1, &j->job.id, &j->job.token, ex, o, r, NULL, &k, err);
		if (rc == PGC_OK) {
			atomic_fetch_add(k > 0 ? &w->s_completed : &w->s_stale, 1);
			if (k == 0)
				pgc__worker_log(w, PGC_LOG_WARN, "job %lld: its completion was stale (lease lost)",
				                (long long)j->job.id);
		} else if (rc == PGC_EUSAGE) {
			char why[PGC_JOB_ERROR_MAX];
			snprintf(why, sizeof why, "the handler's result was refused: %s", err->message);
			pgc__worker_log(w, PGC_LOG_WARN, "job %lld: %s", (long long)j->job.id, why);
			bool dead = false;
			rc = pgc__queue_fail_run(w->q, j->job.id, j->job.token, why, j->result.exit_status,
			                         j->result.output, &w->o.backoff, &dead, err);
			if (rc == PGC_OK || rc == PGC_ESTALE)
				atomic_fetch_add(rc == PGC_OK ? &w->s_failed : &w->s_stale, 1);
			if (rc == PGC_ESTALE)
				rc = PGC_OK;
		}
		if (rc != PGC_OK)
			return -1;
		pgc__worker_mark_more(w, d, j->job.queue);
		*pp = j->next;
		pgc__worker_job_free(w, j);
		settled++;
	}
	return settled;
}

/* One round trip: completions of `done` (only PGC_JOB_COMPLETE ones), the heartbeat when due,
 * and (when claim) claims for the queues worth claiming, as one batch. */
int pgc__worker_round_trip(pgc_worker *w, dstate *d, wjob **done, bool do_hb, bool claim,
                           pgc_error *err)
{
	int rc = PGC_OK;
	size_t n_done = 0;
	for (wjob *j = *done; j; j = j->next)
		n_done++;
	pgc__sb hia = { 0 }, hta = { 0 };
	pgc__queue_complete_lits cl = { 0 };
	int64_t *cids = NULL, *hb_ids = NULL;
	size_t n_hb = 0;
	pgc__batch *b = NULL;
	bool with_results = false;
	if (n_done > 0) {
		cids = malloc(n_done * 2 * sizeof *cids);
		int *exs = malloc(n_done * sizeof *exs);
		const char **outs = malloc(n_done * sizeof *outs), **res = malloc(n_done * sizeof *res);
		if (cids == NULL || exs == NULL || outs == NULL || res == NULL) {
			free(cids);
			free(exs);
			free(outs);
			free(res);
			return pgc__err(err, PGC_ENOMEM, "out of memory");
		}
		size_t k = 0;
		for (wjob *j = *done; j; j = j->next, k++) {
			cids[k] = j->job.id;
			cids[n_done + k] = j->job.token;
			exs[k] = j->result.exit_status;
			outs[k] = j->result.output;
			res[k] = j->result.result_json;
			with_results |= res[k] != NULL;
		}
		/* What the commands ended with and the results, only when a handler said (most say
		 * nothing). */
		rc = pgc__queue_complete_args(n_done, cids, cids + n_done, exs, outs, res, &cl, err);
		free(exs);
		free(outs);
		free(res);
		if (rc != PGC_OK) {
			free(cids);
			return rc;
		}
	}
	if (do_hb && !pgc__worker_heartbeat_arrays(w, &hia, &hta, &hb_ids, &n_hb))
		do_hb = false;

	/* Which queues to claim from, and how many (none when only completions and the heartbeat
	 * are due): at most one claim per queue, and pgc_worker_new() bounds the queues by
	 * PGC_WORKER_QUEUES_MAX, which sizes the arrays of the batch. */
	size_t nq = w->o.n_queues;
	int slots = d->stopping || !claim ? 0 : pgc__worker_free_slots(w);
	int claim_n[PGC_WORKER_QUEUES_MAX];
	size_t claim_q[PGC_WORKER_QUEUES_MAX], n_claims = 0;
	int eligible = 0;
	for (size_t i = 0; i < nq; i++)
		eligible += d->more[i];
	/* The queues worth claiming share the free slots; the rest of the division goes one slot
	 * each to the first in turn from rr, and the turn advances every trip. With fewer slots
	 * than queues, as many queues as slots get one each. */
	for (size_t i = 0; i < nq && slots > 0 && eligible > 0; i++) {
		size_t qi = (d->rr + i) % nq;
		if (!d->more[qi])
			continue;
		int share = slots / eligible + ((int)n_claims < slots % eligible ? 1 : 0);
		if (share < 1)
			break;
		claim_q[n_claims] = qi;
		claim_n[n_claims] = share > 1000 ? 1000 : share;
		n_claims++;
	}
	d->rr = (d->rr + 1) % nq;
	/* The claims of a batch go in the order of the queue names: a rate-limited queue's claim
	 * waits for the queue's row, and two workers taking two such rows in opposite orders in one
	 * transaction would deadlock. */
	for (size_t a = 1; a < n_claims; a++)
		for (size_t c = a; c > 0 && strcmp(w->o.queues[claim_q[c - 1]], w->o.queues[claim_q[c]]) > 0; c--) {
			size_t tq = claim_q[c];
			int tn = claim_n[c];
			claim_q[c] = claim_q[c - 1];
			claim_n[c] = claim_n[c - 1];
			claim_q[c - 1] = tq;
			claim_n[c - 1] = tn;
		}

	if (n_done == 0 && !do_hb && n_claims == 0)
		goto out;
	if (hia.oom || hta.oom ||
	    (b = pgc__batch_new(w->conn)) == NULL) {
		rc = pgc__err(err, PGC_ENOMEM, "out of memory");
		goto out;
	}
	/* The parameters stay valid until the batch has run. */
	char lease[24], maxs[PGC_WORKER_QUEUES_MAX][16];
	snprintf(lease, sizeof lease, "%lld", (long long)w->o.lease_ms);
	const char *hv[3] = { hia.buf, hta.buf, lease };
	const char *qv[PGC_WORKER_QUEUES_MAX][4];
	int i_done = 0, i_hb = 0, added = 0;
	int i_claim[PGC_WORKER_QUEUES_MAX];
	if (n_done > 0)
		added |= i_done = pgc__queue_batch_add(w->q, b, QS_COMPLETE, 5, cl.v);
	if (do_hb)
		added |= i_hb = pgc__queue_batch_add(w->q, b, QS_HEARTBEAT, 3, hv);
	for (size_t c = 0; c < n_claims; c++) {
		snprintf(maxs[c], sizeof maxs[c], "%d", claim_n[c]);
		qv[c][0] = w->o.queues[claim_q[c]];
		qv[c][1] = maxs[c];
		qv[c][2] = lease;
		qv[c][3] = w->worker_id;
		/* The same statement for every queue: the cache parses it once per batch. */
		added |= i_claim[c] = pgc__queue_batch_add(w->q, b, QS_CLAIM, 4, qv[c]);
	}
	/* Every answer counts only once the whole batch (one implicit transaction) committed. */
	rc = added < 0 ? pgc__err(err, PGC_ENOMEM, "out of memory") : pgc__batch_run(b, NULL, err);
	PGresult *done_res = NULL, *hb_res = NULL;
	PGresult *claim_res[PGC_WORKER_QUEUES_MAX];
	if (rc == PGC_OK && n_done > 0)
		done_res = pgc__queue_result(b, i_done, &rc, err);
	if (rc == PGC_OK && do_hb)
		hb_res = pgc__queue_result(b, i_hb, &rc, err);
	for (size_t c = 0; rc == PGC_OK && c < n_claims; c++)
		claim_res[c] = pgc__queue_result(b, i_claim[c], &rc, err);
	if (rc == PGC_ESQL && with_results && strncmp(err->sqlstate, "22", 2) == 0) {
		/* Most likely a result the server refused: those jobs alone, then the trip again
		 * with the others (which carry no result, so this happens once). */
		long k = settle_results(w, d, done, err);
		if (k > 0) {
			pgc__batch_free(b);
			b = NULL;
			pgc__queue_complete_args_free(&cl);
			pgc__sb_free(&hia);
			pgc__sb_free(&hta);
			free(cids);
			free(hb_ids);
			return pgc__worker_round_trip(w, d, done, do_hb, claim, err);
		}
		if (k < 0)
			goto out;
	}
	if (rc != PGC_OK)
		goto out;
	if (n_done > 0) {
		int rows = PQntuples(done_res);
		atomic_fetch_add(&w->s_completed, rows);
		if ((size_t)rows != n_done)
			pgc__worker_stale_completions(w, done_res, cids, n_done);
		while (*done) {
			wjob *j = *done;
			*done = j->next;
			/* A keyed job's end leaves room under its key's limit: claim again. */
			if (j->job.key != NULL)
				pgc__worker_mark_more(w, d, j->job.queue);
			pgc__worker_job_free(w, j);
		}
	}
	if (do_hb)
		pgc__worker_mark_lost(w, hb_res, hb_ids, n_hb);
	for (size_t c = 0; c < n_claims; c++) {
		PGresult *res = claim_res[c];
		size_t qi = claim_q[c];
		int rows = PQntuples(res);
		if (rows < claim_n[c])
			d->more[qi] = false;
		take_claimed(w, res, w->o.queues[qi]);
		if (rows > 0)
			d->idle_poll = 10;
	}
out:
	pgc__batch_free(b);
	pgc__queue_complete_args_free(&cl);
	pgc__sb_free(&hia);
	pgc__sb_free(&hta);
	free(cids);
	free(hb_ids);
	return rc;
}
