/*
 * bench_common.c - helpers shared by the benchmark programs.
 */
#include "bench_common.h"

#include <ctype.h>
#include <dirent.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char *bench_prog = "bench";

void bench_set_prog(const char *name)
{
	bench_prog = name;
}

void bench_die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", bench_prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

double bench_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double bench_self_cpu(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		return -1;
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/*
 * Read /proc/PID/stat: the parent pid and the clock ticks of utime, stime, cutime, cstime
 * (fields 4, 14-17). The command name may contain spaces and parentheses, so parsing starts
 * after the last ')'.
 */
static bool read_stat(pid_t pid, pid_t *ret_ppid, unsigned long long ticks[4])
{
	char path[64], buf[1024], *p;
	unsigned long long v[15];
	size_t n;
	FILE *f;
	int ppid;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	if (p == NULL)
		return false;
	/* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
	 * cutime cstime */
	if (sscanf(p + 1,
	           " %*c %d %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu",
	           &ppid, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9],
	           &v[10], &v[11], &v[12]) != 14)
		return false;
	*ret_ppid = (pid_t)ppid;
	ticks[0] = v[9];
	ticks[1] = v[10];
	ticks[2] = v[11];
	ticks[3] = v[12];
	return true;
}

static double ticks_to_s(unsigned long long t)
{
	static long hz;

	if (hz <= 0)
		hz = sysconf(_SC_CLK_TCK);
	return (double)t / (double)(hz > 0 ? hz : 100);
}

double bench_proc_cpu(pid_t pid, bool children)
{
	unsigned long long t[4];
	pid_t ppid;

	if (!read_stat(pid, &ppid, t))
		return -1;
	return ticks_to_s(t[0] + t[1] + (children ? t[2] + t[3] : 0));
}

double bench_pg_cpu(pid_t postmaster)
{
	unsigned long long t[4], total = 0;
	struct dirent *de;
	pid_t ppid;
	DIR *d;

	if (!read_stat(postmaster, &ppid, t))
		return -1;
	total = t[0] + t[1] + t[2] + t[3];
	d = opendir("/proc");
	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		if (read_stat((pid_t)atoi(de->d_name), &ppid, t) && ppid == postmaster)
			total += t[0] + t[1];
	}
	closedir(d);
	return ticks_to_s(total);
}

long bench_proc_hwm_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "VmHWM:", 6) == 0) {
			kib = strtol(line + 6, NULL, 10);
			break;
		}
	}
	fclose(f);
	return kib;
}

static bool copy_string(json_object *root, const char *name, char *out, size_t outlen)
{
	json_object *v;
	const char *s;

	if (!json_object_object_get_ex(root, name, &v) || !json_object_is_type(v, json_type_string))
		return false;
	s = json_object_get_string(v);
	if (strlen(s) >= outlen)
		return false;
	memcpy(out, s, strlen(s) + 1);
	return true;
}

bool bench_payment_decode(const void *value, size_t len, struct bench_payment *ret_pay,
                          char *errbuf, size_t errlen)
{
	struct bench_payment pay;
	json_tokener *tok;
	json_object *root, *amount;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	bool ok = false;

	tok = json_tokener_new();
	if (tok == NULL) {
		snprintf(errbuf, errlen, "out of memory");
		return false;
	}
	root = json_tokener_parse_ex(tok, value, (int)len);
	json_tokener_free(tok);
	if (root == NULL || !json_object_is_type(root, json_type_object)) {
		snprintf(errbuf, errlen, "value is not a JSON object");
		goto out_put;
	}
	if (!copy_string(root, "payment_id", pay.payment_id, sizeof(pay.payment_id)) ||
	    !copy_string(root, "account", pay.account, sizeof(pay.account)) ||
	    !json_object_object_get_ex(root, "amount", &amount) ||
	    !json_object_is_type(amount, json_type_int)) {
		snprintf(errbuf, errlen, "value lacks payment_id, account or amount");
		goto out_put;
	}
	snprintf(pay.amount, sizeof(pay.amount), "%" PRId64, json_object_get_int64(amount));
	if (EVP_Digest(value, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32) {
		snprintf(errbuf, errlen, "sha256 failed");
		goto out_put;
	}
	bench_hash_hex(md, pay.hash);
	*ret_pay = pay;
	ok = true;
out_put:
	json_object_put(root);
	return ok;
}

idem_status bench_arr_add(struct idem_buf *a, const char *s)
{
	return idem_pgarray_add(a, s, strlen(s), false);
}

void bench_kafka_set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
	char errstr[512];

	if (rd_kafka_conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		bench_die("kafka property '%s': %s", name, errstr);
}

PGconn *bench_pg_connect(const char *conninfo)
{
	PGconn *conn = PQconnectdb(conninfo);

	if (conn == NULL || PQstatus(conn) != CONNECTION_OK)
		bench_die("cannot connect to postgres: %s",
		          conn ? PQerrorMessage(conn) : "out of memory");
	return conn;
}

void bench_pg_prepare(PGconn *conn, const char *name, const char *sql)
{
	PGresult *res = PQprepare(conn, name, sql, 0, NULL);

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		bench_die("prepare '%s' failed: %s", name, PQresultErrorMessage(res));
	PQclear(res);
}

void bench_hash_hex(const unsigned char *md, char out[2 * IDEM_BATCH_HASH_BYTES + 1])
{
	static const char hex[] = "0123456789abcdef";

	for (unsigned int k = 0; k < IDEM_BATCH_HASH_BYTES; k++) {
		out[2 * k] = hex[md[k] >> 4];
		out[2 * k + 1] = hex[md[k] & 15];
	}
	out[2 * IDEM_BATCH_HASH_BYTES] = '\0';
}

bool bench_retryable(const PGresult *res)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);

	return state != NULL && (strcmp(state, "40P01") == 0 || strcmp(state, "40001") == 0);
}

PGresult *bench_next_result(PGconn *conn, ExecStatusType want, const char *what)
{
	PGresult *res = PQgetResult(conn), *extra;

	if (res == NULL)
		bench_die("%s: no result: %s", what, PQerrorMessage(conn));
	if (PQresultStatus(res) != want) {
		if (bench_retryable(res)) {
			PQclear(res);
			while ((extra = PQgetResult(conn)) != NULL)
				PQclear(extra);
			return NULL;
		}
		bench_die("%s failed: %s", what, PQresultErrorMessage(res));
	}
	if (want != PGRES_PIPELINE_SYNC) {
		while ((extra = PQgetResult(conn)) != NULL)
			PQclear(extra);
	}
	return res;
}

void bench_pipeline_abort(PGconn *conn, bool sync_sent)
{
	PGresult *res;

	if (!sync_sent && !PQpipelineSync(conn))
		bench_die("sync: %s", PQerrorMessage(conn));
	for (;;) {
		res = PQgetResult(conn);
		if (res == NULL) {
			if (PQstatus(conn) != CONNECTION_OK)
				bench_die("connection lost: %s", PQerrorMessage(conn));
			continue;
		}
		if (PQresultStatus(res) == PGRES_PIPELINE_SYNC) {
			PQclear(res);
			break;
		}
		PQclear(res);
	}
	if (!PQexitPipelineMode(conn))
		bench_die("exit pipeline mode: %s", PQerrorMessage(conn));
	PQclear(PQexec(conn, "ROLLBACK"));
}

void bench_check(idem_status r)
{
	if (r != IDEM_OK)
		bench_die("out of memory");
}

static _Thread_local const struct bench_batch *sort_b;

static int order_cmp(const void *pa, const void *pb)
{
	size_t x = *(const size_t *)pa, y = *(const size_t *)pb;
	/* idemd compares key bytes with memcmp, then length: strcmp gives the same order for
	 * NUL-free text. */
	int c = strcmp(sort_b->msgs[x].pay.payment_id, sort_b->msgs[y].pay.payment_id);

	return c != 0 ? c : (x > y) - (x < y);
}

void bench_batch_collapse(struct bench_batch *b)
{
	size_t w = 0;

	for (size_t i = 0; i < b->n; i++) {
		b->state[i] = BENCH_PENDING;
		b->order[i] = i;
	}
	sort_b = b;
	qsort(b->order, b->n, sizeof(*b->order), order_cmp);
	sort_b = NULL;
	for (size_t k = 0; k < b->n; k++) {
		if (w > 0 && strcmp(b->msgs[b->order[w - 1]].pay.payment_id,
		                    b->msgs[b->order[k]].pay.payment_id) == 0) {
			b->state[b->order[k]] = BENCH_DUP_IN_BATCH;
			continue;
		}
		b->order[w++] = b->order[k];
	}
	b->n_order = w;
	b->n_applied = 0;
}

/*
 * The message at @offset whose key was claimed (PENDING), or -1: a binary search, as a batch is
 * in offset order (as idem_batch_find_offset()), and every message should it not be.
 */
static ssize_t find_offset(const struct bench_batch *b, int64_t offset)
{
	size_t lo = 0, hi = b->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (b->msgs[mid].offset < offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < b->n && b->msgs[lo].offset == offset && b->state[lo] == BENCH_PENDING)
		return (ssize_t)lo;
	for (size_t i = 0; i < b->n; i++) {
		if (b->msgs[i].offset == offset && b->state[i] == BENCH_PENDING)
			return (ssize_t)i;
	}
	return -1;
}

void bench_claim_params(const struct bench_batch *b, const char *consumer, const char *topic,
                        struct bench_bufs *bf, char part[16], struct idem_bind_claim *cv)
{
	bench_check(idem_pgbin_open(&bf->keys, IDEM_OID_TEXT));
	bench_check(idem_pgbin_open(&bf->offs, IDEM_OID_INT8));
	bench_check(idem_pgbin_open(&bf->hashes, IDEM_OID_BYTEA));
	for (size_t k = 0; k < b->n_order; k++) {
		const struct bench_msg *m = &b->msgs[b->order[k]];

		bench_check(idem_pgbin_add(&bf->keys, m->pay.payment_id, strlen(m->pay.payment_id),
		                           false));
		bench_check(idem_pgbin_add_int8(&bf->offs, m->offset));
		bench_check(
		        idem_pgbin_add_hex(&bf->hashes, m->pay.hash, strlen(m->pay.hash), false));
	}
	idem_pgbin_close(&bf->keys);
	idem_pgbin_close(&bf->offs);
	idem_pgbin_close(&bf->hashes);
	snprintf(part, 16, "%" PRId32, b->msgs[0].partition);
	*cv = (struct idem_bind_claim){
		.vals = { consumer, topic, part, bf->keys.data, bf->offs.data, bf->hashes.data },
		.lens = { 0, 0, 0, (int)bf->keys.len, (int)bf->offs.len, (int)bf->hashes.len },
		.fmts = { 0, 0, 0, 1, 1, 1 },
	};
}

void bench_batch_claimed(struct bench_batch *b, const PGresult *res)
{
	for (int r = 0; r < PQntuples(res); r++) {
		ssize_t i = find_offset(b, strtoll(PQgetvalue(res, r, 0), NULL, 10));

		if (i >= 0)
			b->state[i] = BENCH_APPLIED;
	}
	b->n_applied = 0;
	for (size_t i = 0; i < b->n; i++) {
		if (b->state[i] == BENCH_APPLIED)
			b->applied[b->n_applied++] = i;
	}
}

bool bench_claim_round_trip(PGconn *conn, struct bench_batch *b, const struct idem_bind_claim *cv)
{
	PGresult *res;

	if (!PQenterPipelineMode(conn))
		bench_die("enter pipeline mode: %s", PQerrorMessage(conn));
	if (!PQsendQueryParams(conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) ||
	    !idem_sql_send(conn, IDEM_SQL_CLAIM, cv->vals, cv->lens, cv->fmts) ||
	    !PQsendFlushRequest(conn) || PQflush(conn) != 0)
		bench_die("send claim: %s", PQerrorMessage(conn));
	if ((res = bench_next_result(conn, PGRES_COMMAND_OK, "begin")) == NULL)
		return false;
	PQclear(res);
	if ((res = bench_next_result(conn, PGRES_TUPLES_OK, "claim")) == NULL)
		return false;
	bench_batch_claimed(b, res);
	PQclear(res);
	return true;
}

void bench_set_params(const struct bench_batch *b, struct bench_bufs *bf, const char *sv[3])
{
	bench_check(idem_pgarray_open(&bf->ids));
	bench_check(idem_pgarray_open(&bf->accounts));
	bench_check(idem_pgarray_open(&bf->amounts));
	for (size_t k = 0; k < b->n_applied; k++) {
		const struct bench_msg *m = &b->msgs[b->applied[k]];

		bench_check(bench_arr_add(&bf->ids, m->pay.payment_id));
		bench_check(bench_arr_add(&bf->accounts, m->pay.account));
		bench_check(bench_arr_add(&bf->amounts, m->pay.amount));
	}
	bench_check(idem_pgarray_close(&bf->ids));
	bench_check(idem_pgarray_close(&bf->accounts));
	bench_check(idem_pgarray_close(&bf->amounts));
	sv[0] = bf->ids.data;
	sv[1] = bf->accounts.data;
	sv[2] = bf->amounts.data;
}

void bench_bufs_done(struct bench_bufs *bf)
{
	idem_buf_done(&bf->keys);
	idem_buf_done(&bf->offs);
	idem_buf_done(&bf->hashes);
	idem_buf_done(&bf->ids);
	idem_buf_done(&bf->accounts);
	idem_buf_done(&bf->amounts);
}
