/*
 * idemctl_try.c - idemctl try: run messages through their route as idemd would, in a transaction
 * that is always rolled back, and show what would happen (lib/idem_try.h; idemctl(8) "Trying a
 * route"). This file reads the options and the messages and prints the report.
 */
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_consumer.h"
#include "idem_try.h"
#include "idemctl_cmds.h"
#include "idemctl_common.h"

/* The longest escaped text a line shows of one value. */
#define SHOW_MAX 400
/* Rows of a handler's answer shown, and events. */
#define SHOW_ROWS 20

void idemctl_try_usage(FILE *f)
{
	fprintf(f,
	        "  try [--topic T] [--partition P] [--json] [--statement-timeout MS]\n"
	        "      [--lock-timeout MS] (FILE... | - | --offset O [--count N])\n"
	        "                      run messages (from message files, stdin, or Kafka at\n"
	        "                      --topic/--partition/--offset) through their route as idemd\n"
	        "                      would, in a transaction that is always rolled back: the\n"
	        "                      business key, the handler's parameters, the claim a duplicate\n"
	        "                      ran into, the handler's rows, table changes and outbox events;\n"
	        "                      exit 0 would apply, 10 duplicate, 11 would be quarantined,\n"
	        "                      12 handler failed (several messages: the worst); idemctl(8)\n"
	        "                      \"Trying a route\" has the message file format\n");
}

static void try_synopsis(FILE *f)
{
	fprintf(f,
	        "usage: idemctl try [--topic T] [--partition P] [--json] [--statement-timeout MS] [--lock-timeout MS] (FILE... | - | --offset O [--count N])\n"
	        "Exit status: 0 would apply; 10 a key is claimed already; 11 would be quarantined; 12 the handler failed; 1 the try itself failed; 2 usage.\n");
}

struct try_opts {
	struct idem_try_opts run;
	int64_t offset, count;
	bool json;
};

static int try_parse(int argc, char **argv, struct try_opts *o)
{
	enum { OPT_TOPIC = 256, OPT_PART, OPT_OFFSET, OPT_COUNT, OPT_JSON, OPT_STMT, OPT_LOCK };
	static const struct option opts[] = {
		{ "topic", required_argument, NULL, OPT_TOPIC },
		{ "partition", required_argument, NULL, OPT_PART },
		{ "offset", required_argument, NULL, OPT_OFFSET },
		{ "count", required_argument, NULL, OPT_COUNT },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "statement-timeout", required_argument, NULL, OPT_STMT },
		{ "lock-timeout", required_argument, NULL, OPT_LOCK },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int64_t v;
	int c;

	*o = (struct try_opts){
		.run = { .partition = -1, .statement_timeout_ms = 5000, .lock_timeout_ms = 1000 },
		.offset = -1,
		.count = -1
	};
	optind = 1;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case OPT_TOPIC:
			o->run.topic = optarg;
			break;
		case OPT_PART:
			if (!idemctl_number("try --partition", optarg, 0, INT32_MAX, &v))
				return IDEM_EXIT_USAGE;
			o->run.partition = (int32_t)v;
			break;
		case OPT_OFFSET:
			if (!idemctl_number("try --offset", optarg, 0, INT64_MAX, &o->offset))
				return IDEM_EXIT_USAGE;
			break;
		case OPT_COUNT:
			if (!idemctl_number("try --count", optarg, 1, 10000, &o->count))
				return IDEM_EXIT_USAGE;
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_STMT:
			if (!idemctl_number("try --statement-timeout", optarg, 1, 3600000, &v))
				return IDEM_EXIT_USAGE;
			o->run.statement_timeout_ms = (int)v;
			break;
		case OPT_LOCK:
			if (!idemctl_number("try --lock-timeout", optarg, 1, 3600000, &v))
				return IDEM_EXIT_USAGE;
			o->run.lock_timeout_ms = (int)v;
			break;
		case 'h':
			try_synopsis(stdout);
			return IDEM_EXIT_OK;
		default:
			try_synopsis(stderr);
			return IDEM_EXIT_USAGE;
		}
	}
	if (o->offset >= 0 && (optind != argc || o->run.topic == NULL)) {
		fprintf(stderr,
		        "idemctl: try: --offset reads Kafka: it needs --topic and no FILE\n");
		return IDEM_EXIT_USAGE;
	}
	if (o->offset < 0 && (optind == argc || o->count >= 0)) {
		try_synopsis(stderr);
		return IDEM_EXIT_USAGE;
	}
	if (o->count < 0)
		o->count = 1;
	return -1;
}

/* Read all of @path ("-": stdin) into *ret_text (free() it). */
static int read_all(const char *path, char **ret_text, size_t *ret_len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	char *text = NULL;
	size_t len = 0, cap = 0, n;

	if (f == NULL) {
		fprintf(stderr, "idemctl: try: cannot open '%s': %m\n", path);
		return IDEM_EXIT_FAILURE;
	}
	do {
		if (cap - len < 65536) {
			char *t = realloc(text, cap = 2 * cap + 65536);

			if (t == NULL) {
				fprintf(stderr, "idemctl: out of memory\n");
				free(text);
				if (f != stdin)
					fclose(f);
				return IDEM_EXIT_FAILURE;
			}
			text = t;
		}
		len += (n = fread(text + len, 1, cap - len, f));
	} while (n > 0);
	if (ferror(f)) {
		fprintf(stderr, "idemctl: try: cannot read '%s': %m\n", path);
		free(text);
		text = NULL;
	}
	if (f != stdin)
		fclose(f);
	if (text == NULL)
		return IDEM_EXIT_FAILURE;
	*ret_text = text;
	*ret_len = len;
	return IDEM_EXIT_OK;
}

/* Where each message came from, for the report ("FILE:LINE", or "kafka"). */
struct sources {
	const char **file; /* per message; NULL: Kafka */
};

static int read_files(int argc, char **argv, struct idem_try_msgs *msgs, struct sources *src)
{
	for (int k = 0; k < argc; k++) {
		const char *name = strcmp(argv[k], "-") == 0 ? "<stdin>" : argv[k];
		idem_error err = { 0 };
		size_t before = msgs->n, len;
		char *text;
		const char **v;
		int rc;

		if ((rc = read_all(argv[k], &text, &len)) != IDEM_EXIT_OK)
			return rc;
		if (idem_try_parse(name, text, len, msgs, &err) != IDEM_OK) {
			fprintf(stderr, "idemctl: try: %s\n", err.msg);
			free(text);
			return err.code == IDEM_ERR_NOMEM ? IDEM_EXIT_FAILURE : IDEM_EXIT_USAGE;
		}
		free(text);
		if ((v = realloc(src->file, (msgs->n + 1) * sizeof(*v))) == NULL) {
			fprintf(stderr, "idemctl: out of memory\n");
			return IDEM_EXIT_FAILURE;
		}
		src->file = v;
		for (size_t i = before; i < msgs->n; i++)
			v[i] = name;
	}
	return IDEM_EXIT_OK;
}

static const char *field_name(const struct idem_field *f, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s%s", idem_field_kind_str(f->kind), f->arg ? ":" : "",
	         f->arg ? f->arg : "");
	return buf;
}

/* Text @s[0..len) quoted and escaped, or NULL. */
static void show(const char *s, size_t len, bool null)
{
	if (null) {
		printf("NULL");
		return;
	}
	printf("'");
	idemctl_print_esc(s, len, SHOW_MAX, IDEM_ESC_QUOTE);
	printf("'");
}

static void show_str(const char *s)
{
	show(s, s ? strlen(s) : 0, s == NULL);
}

/* Bytes given in hex by Postgres, shown as text (escaped) or NULL. */
static void show_hex(const PGresult *res, int row, int col)
{
	const char *h = PQgetvalue(res, row, col);
	size_t n = strlen(h) / 2;
	char *b = malloc(n + 1);

	if (PQgetisnull(res, row, col) || b == NULL) {
		printf("NULL");
		free(b);
		return;
	}
	for (size_t i = 0; i < n; i++)
		b[i] = (char)(idem_hex_digit(h[2 * i]) << 4 | idem_hex_digit(h[2 * i + 1]));
	show(b, n, false);
	free(b);
}

static char *unhex(const char *h, size_t *ret_n)
{
	size_t n = strlen(h) / 2;
	char *b = malloc(n + 1);

	if (b == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		b[i] = (char)(idem_hex_digit(h[2 * i]) << 4 | idem_hex_digit(h[2 * i + 1]));
	b[n] = '\0';
	*ret_n = n;
	return b;
}

static void print_effects(const struct idem_try_effects *fx, const char *ind)
{
	const PGresult *rows = fx->rows, *ev = fx->events;
	int nrows = rows ? PQntuples(rows) : 0, nf = rows ? PQnfields(rows) : 0;

	if (!fx->ran)
		return;
	printf("%shandler returned %d row(s)%s\n", ind, nrows, nrows > 0 && nf > 0 ? ":" : "");
	for (int r = 0; r < nrows && nf > 0 && r < SHOW_ROWS; r++) {
		printf("%s  ", ind);
		for (int c = 0; c < nf; c++) {
			printf("%s", c ? ", " : "");
			idemctl_print_esc(PQfname(rows, c), strlen(PQfname(rows, c)), 64, 0);
			printf("=");
			show(PQgetvalue(rows, r, c), (size_t)PQgetlength(rows, r, c),
			     PQgetisnull(rows, r, c));
		}
		printf("\n");
	}
	if (nrows > SHOW_ROWS)
		printf("%s  ... %d more\n", ind, nrows - SHOW_ROWS);
	if (fx->n_tables == 0)
		printf("%stables: no row inserted, updated or deleted\n", ind);
	for (size_t t = 0; t < fx->n_tables; t++) {
		printf("%stable ", ind);
		idemctl_print_esc(fx->tables[t].name, strlen(fx->tables[t].name), 128, 0);
		printf(": %" PRId64 " inserted, %" PRId64 " updated, %" PRId64 " deleted\n",
		       fx->tables[t].inserted, fx->tables[t].updated, fx->tables[t].deleted);
	}
	for (int r = 0; ev != NULL && r < PQntuples(ev); r++) {
		bool first = r == 0 || strcmp(PQgetvalue(ev, r, 0), PQgetvalue(ev, r - 1, 0)) != 0;

		if (first) {
			printf("%sevent: topic ", ind);
			show_str(PQgetvalue(ev, r, 2));
			printf(" key ");
			show_hex(ev, r, 3);
			printf(" value ");
			show_hex(ev, r, 4);
			printf(" event_id %s\n",
			       PQgetisnull(ev, r, 1) ? "(random)" : PQgetvalue(ev, r, 1));
		}
		if (!PQgetisnull(ev, r, 5)) {
			printf("%s  header ", ind);
			show_str(PQgetvalue(ev, r, 5));
			printf(" = ");
			show_hex(ev, r, 6);
			printf("\n");
		}
	}
}

/* What idemd would do after a handler failure with @state. */
static const char *after_failure(const struct idem_route *rt, const char *state)
{
	if (state[0] != '\0' &&
	    (idem_pg_classify(state) == IDEM_PG_MESSAGE || idem_pg_timeout(state)))
		return rt->on_poison == IDEM_CFG_POISON_HALT
		               ? "idemd would retry the message, then halt the partition at it"
		               : "idemd would retry the message, then quarantine it";
	if (idem_pg_classify(state) == IDEM_PG_TRANSIENT)
		return "idemd would roll back and retry the batch";
	return "idemd would pause the partition and retry with backoff until the handler or schema is fixed";
}

static void print_message(const struct idem_try_report *rep, size_t i, const struct sources *src,
                          const struct idem_try_msgs *msgs)
{
	const struct idem_batch *b = &rep->b;
	const struct idem_batch_msg *m = &b->msgs[i];
	const struct idem_try_msg_report *mr = &rep->msgs[i];
	const struct idem_route *rt = rep->route;
	char name[256];

	printf("\nmessage %zu", i + 1);
	if (src->file != NULL)
		printf(" (%s:%u)", src->file[i], msgs->v[i].line);
	printf(", offset %" PRId64 ": ", m->offset);
	switch (mr->outcome) {
	case IDEM_TRY_APPLY:
		printf("would apply\n");
		break;
	case IDEM_TRY_DUPLICATE:
		printf("duplicate (%s)\n", idem_batch_dup_str(m->dup));
		break;
	case IDEM_TRY_QUARANTINE:
		printf("would be quarantined%s\n",
		       rt->on_poison == IDEM_CFG_POISON_HALT
		               ? " (on_poison: halt: the partition would halt at it)"
		               : "");
		break;
	case IDEM_TRY_HANDLER_FAILED:
		printf("handler failed (SQLSTATE %s)\n", mr->sqlstate[0] ? mr->sqlstate : "none");
		break;
	}
	printf("  business key: ");
	if (m->bkey.null)
		printf("none");
	else
		show(idem_batch_ptr(b, m->bkey), m->bkey.len, false);
	printf("\n");
	if (mr->reason[0] != '\0') {
		printf("  reason: ");
		idemctl_print_esc(mr->reason, strlen(mr->reason), 1024, 0);
		printf("\n");
	}
	if (mr->outcome == IDEM_TRY_HANDLER_FAILED)
		printf("  %s\n", after_failure(rt, mr->sqlstate));
	if (m->state == IDEM_MSG_DUP_IN_BATCH)
		printf("  its key is message %zu's, which comes first\n", m->winner + 1);
	if (mr->claim != NULL) {
		const PGresult *c = mr->claim;

		printf("  claimed by topic ");
		show_str(PQgetvalue(c, 0, 1));
		printf(" partition %s offset %s at %s, result ", PQgetvalue(c, 0, 2),
		       PQgetvalue(c, 0, 3), PQgetvalue(c, 0, 4));
		show(PQgetvalue(c, 0, 5), (size_t)PQgetlength(c, 0, 5), PQgetisnull(c, 0, 5));
		printf("\n");
	} else if (m->state == IDEM_MSG_DUPLICATE) {
		printf("  claimed already; the claim is not readable (purged meanwhile)\n");
	}
	if (m->mismatch)
		printf("  its payload differs from the claim's (on_payload_mismatch)\n");
	if (!m->bkey.null && !m->undecodable && rt->n_params > 0) {
		printf("  parameters:\n");
		for (size_t p = 0; p < rt->n_params; p++) {
			struct idem_span s = b->params[m->param_first + p];

			printf("    $%zu %s = ", p + 1,
			       field_name(&rt->params[p], name, sizeof(name)));
			show(idem_batch_ptr(b, s), s.len, s.null);
			printf("\n");
		}
	}
	print_effects(&mr->fx, "  ");
	if (mr->outcome == IDEM_TRY_APPLY) {
		printf("  result stored with the claim: ");
		show(idem_batch_ptr(b, m->result), m->result.len, m->result.null);
		printf("\n");
	}
}

static void print_text(const struct idem_try_report *rep, const struct sources *src,
                       const struct idem_try_msgs *msgs, enum idem_try_outcome worst)
{
	const struct idem_route *rt = rep->route;
	char name[256];

	printf("route ");
	show_str(rt->name);
	printf(" (topic ");
	show_str(rep->b.topic);
	printf(" partition %" PRId32 ", consumer ", rep->b.partition);
	show_str(rt->consumer);
	printf(", handler mode %s", rt->handler_mode == IDEM_CFG_MODE_SET ? "set" : "row");
	printf(", outbox context %s)\n", rep->context ? "set" : "off");
	printf("search path: '%s', schemas: %s (an unqualified table in the handler is the first "
	       "of these that has it; qualify names: schema.table)\n",
	       rep->search_path.setting, rep->search_path.schemas);
	if (rep->progress_next >= 0)
		printf("partition progress: next_offset %" PRId64 "\n", rep->progress_next);
	else
		printf("partition progress: none yet\n");
	for (size_t i = 0; i < rep->b.n_msgs; i++)
		print_message(rep, i, src, msgs);
	if (rep->set_params != NULL) {
		printf("\nset statement, once for the messages that would apply:\n");
		for (size_t p = 0; p < rt->n_params; p++) {
			printf("  $%zu %s text[] = ", p + 1,
			       field_name(&rt->params[p], name, sizeof(name)));
			show_str(rep->set_params[p]);
			printf("\n");
		}
		if (rep->set_reason[0] != '\0') {
			printf("  failed (SQLSTATE %s): ", rep->set_sqlstate);
			idemctl_print_esc(rep->set_reason, strlen(rep->set_reason), 1024, 0);
			printf("\n  %s\n", after_failure(rt, rep->set_sqlstate));
		}
		print_effects(&rep->set_fx, "  ");
	}
	printf("\n%s (exit %d); rolled back: nothing was committed\n",
	       worst == IDEM_TRY_APPLY        ? "would apply"
	       : worst == IDEM_TRY_DUPLICATE  ? "duplicate"
	       : worst == IDEM_TRY_QUARANTINE ? "would be quarantined"
	                                      : "handler failed",
	       worst == IDEM_TRY_APPLY        ? IDEM_EXIT_OK
	       : worst == IDEM_TRY_DUPLICATE  ? IDEM_EXIT_TRY_DUPLICATE
	       : worst == IDEM_TRY_QUARANTINE ? IDEM_EXIT_TRY_QUARANTINE
	                                      : IDEM_EXIT_TRY_HANDLER);
}

static json_object *jstr(const char *s, size_t len, bool null)
{
	return null ? NULL : json_object_new_string_len(s, (int)len);
}

/*
 * Bytes given in hex by Postgres, as @name: the text when it is UTF-8 without NULs, else null;
 * and as @name_hex, always (null when NULL): JSON text cannot hold other bytes exactly.
 */
static void jhex(json_object *o, const char *name, const PGresult *res, int row, int col)
{
	char hexname[32];
	size_t n;
	char *b;

	snprintf(hexname, sizeof(hexname), "%s_hex", name);
	if (PQgetisnull(res, row, col) || (b = unhex(PQgetvalue(res, row, col), &n)) == NULL) {
		json_object_object_add(o, name, NULL);
		json_object_object_add(o, hexname, NULL);
		return;
	}
	json_object_object_add(
	        o, name, idem_utf8_valid(b, n) ? json_object_new_string_len(b, (int)n) : NULL);
	json_object_object_add(o, hexname, json_object_new_string(PQgetvalue(res, row, col)));
	free(b);
}

static json_object *json_effects(const struct idem_try_effects *fx)
{
	json_object *o = json_object_new_object(), *rows = json_object_new_array();
	json_object *tables = json_object_new_array(), *events = json_object_new_array(),
	            *ev = NULL;
	const PGresult *r = fx->rows, *e = fx->events;

	for (int i = 0; r != NULL && i < PQntuples(r); i++) {
		json_object *row = json_object_new_object();

		for (int c = 0; c < PQnfields(r); c++)
			json_object_object_add(row, PQfname(r, c),
			                       jstr(PQgetvalue(r, i, c),
			                            (size_t)PQgetlength(r, i, c),
			                            PQgetisnull(r, i, c)));
		json_object_array_add(rows, row);
	}
	for (size_t t = 0; t < fx->n_tables; t++) {
		json_object *x = json_object_new_object();

		json_object_object_add(x, "table", json_object_new_string(fx->tables[t].name));
		json_object_object_add(x, "inserted",
		                       json_object_new_int64(fx->tables[t].inserted));
		json_object_object_add(x, "updated", json_object_new_int64(fx->tables[t].updated));
		json_object_object_add(x, "deleted", json_object_new_int64(fx->tables[t].deleted));
		json_object_array_add(tables, x);
	}
	for (int i = 0; e != NULL && i < PQntuples(e); i++) {
		if (i == 0 || strcmp(PQgetvalue(e, i, 0), PQgetvalue(e, i - 1, 0)) != 0) {
			ev = json_object_new_object();
			json_object_object_add(ev, "topic",
			                       json_object_new_string(PQgetvalue(e, i, 2)));
			jhex(ev, "key", e, i, 3);
			jhex(ev, "value", e, i, 4);
			json_object_object_add(ev, "event_id",
			                       jstr(PQgetvalue(e, i, 1),
			                            strlen(PQgetvalue(e, i, 1)),
			                            PQgetisnull(e, i, 1)));
			json_object_object_add(ev, "headers", json_object_new_array());
			json_object_array_add(events, ev);
		}
		if (!PQgetisnull(e, i, 5)) {
			json_object *h = json_object_new_object(), *hs;

			json_object_object_add(h, "name",
			                       json_object_new_string(PQgetvalue(e, i, 5)));
			jhex(h, "value", e, i, 6);
			json_object_object_get_ex(ev, "headers", &hs);
			json_object_array_add(hs, h);
		}
	}
	json_object_object_add(o, "rows", rows);
	json_object_object_add(o, "tables", tables);
	json_object_object_add(o, "events", events);
	return o;
}

static void print_json(const struct idem_try_report *rep, const struct sources *src,
                       const struct idem_try_msgs *msgs, enum idem_try_outcome worst, int rc)
{
	const struct idem_route *rt = rep->route;
	const struct idem_batch *b = &rep->b;
	json_object *top = json_object_new_object(), *arr = json_object_new_array();
	char name[256], where[512];

	json_object_object_add(top, "route", json_object_new_string(rt->name));
	json_object_object_add(top, "topic", json_object_new_string(b->topic));
	json_object_object_add(top, "partition", json_object_new_int(b->partition));
	json_object_object_add(top, "consumer", json_object_new_string(rt->consumer));
	json_object_object_add(
	        top, "mode",
	        json_object_new_string(rt->handler_mode == IDEM_CFG_MODE_SET ? "set" : "row"));
	json_object_object_add(top, "outbox_context", json_object_new_boolean(rep->context));
	json_object_object_add(top, "search_path",
	                       json_object_new_string(rep->search_path.setting));
	json_object_object_add(top, "schemas", json_object_new_string(rep->search_path.schemas));
	json_object_object_add(top, "next_offset",
	                       rep->progress_next >= 0 ? json_object_new_int64(rep->progress_next)
	                                               : NULL);
	for (size_t i = 0; i < b->n_msgs; i++) {
		const struct idem_batch_msg *m = &b->msgs[i];
		const struct idem_try_msg_report *mr = &rep->msgs[i];
		json_object *o = json_object_new_object(), *ps = json_object_new_array();

		if (src->file != NULL) {
			snprintf(where, sizeof(where), "%s:%u", src->file[i], msgs->v[i].line);
			json_object_object_add(o, "source", json_object_new_string(where));
		}
		json_object_object_add(o, "offset", json_object_new_int64(m->offset));
		json_object_object_add(o, "outcome",
		                       json_object_new_string(idem_try_outcome_str(mr->outcome)));
		json_object_object_add(o, "business_key",
		                       jstr(idem_batch_ptr(b, m->bkey), m->bkey.len, m->bkey.null));
		if (mr->reason[0] != '\0')
			json_object_object_add(o, "reason", json_object_new_string(mr->reason));
		if (mr->outcome == IDEM_TRY_HANDLER_FAILED) {
			json_object_object_add(o, "sqlstate", json_object_new_string(mr->sqlstate));
			json_object_object_add(
			        o, "then", json_object_new_string(after_failure(rt, mr->sqlstate)));
		}
		if (mr->outcome == IDEM_TRY_DUPLICATE) {
			json_object_object_add(o, "duplicate_kind",
			                       json_object_new_string(idem_batch_dup_str(m->dup)));
			json_object_object_add(o, "payload_differs",
			                       json_object_new_boolean(m->mismatch));
			if (m->state == IDEM_MSG_DUP_IN_BATCH)
				json_object_object_add(
				        o, "duplicate_of",
				        json_object_new_int64((int64_t)m->winner + 1));
		}
		if (mr->claim != NULL) {
			const PGresult *c = mr->claim;
			json_object *x = json_object_new_object();

			json_object_object_add(x, "topic",
			                       json_object_new_string(PQgetvalue(c, 0, 1)));
			json_object_object_add(
			        x, "partition",
			        json_object_new_int64(strtoll(PQgetvalue(c, 0, 2), NULL, 10)));
			json_object_object_add(
			        x, "offset",
			        json_object_new_int64(strtoll(PQgetvalue(c, 0, 3), NULL, 10)));
			json_object_object_add(x, "processed_at",
			                       json_object_new_string(PQgetvalue(c, 0, 4)));
			json_object_object_add(x, "result",
			                       jstr(PQgetvalue(c, 0, 5),
			                            (size_t)PQgetlength(c, 0, 5),
			                            PQgetisnull(c, 0, 5)));
			json_object_object_add(o, "claim", x);
		}
		for (size_t p = 0; !m->undecodable && p < rt->n_params; p++) {
			struct idem_span s = b->params[m->param_first + p];
			json_object *x = json_object_new_object();

			json_object_object_add(x, "field",
			                       json_object_new_string(field_name(
			                               &rt->params[p], name, sizeof(name))));
			json_object_object_add(x, "value",
			                       jstr(idem_batch_ptr(b, s), s.len, s.null));
			json_object_array_add(ps, x);
		}
		json_object_object_add(o, "params", ps);
		if (mr->outcome == IDEM_TRY_APPLY)
			json_object_object_add(
			        o, "result",
			        jstr(idem_batch_ptr(b, m->result), m->result.len, m->result.null));
		if (mr->fx.ran)
			json_object_object_add(o, "effects", json_effects(&mr->fx));
		json_object_array_add(arr, o);
	}
	json_object_object_add(top, "messages", arr);
	if (rep->set_params != NULL) {
		json_object *s = json_object_new_object(), *ps = json_object_new_array();

		for (size_t p = 0; p < rt->n_params; p++)
			json_object_array_add(ps, json_object_new_string(rep->set_params[p]));
		json_object_object_add(s, "params", ps);
		if (rep->set_reason[0] != '\0') {
			json_object_object_add(s, "reason",
			                       json_object_new_string(rep->set_reason));
			json_object_object_add(s, "sqlstate",
			                       json_object_new_string(rep->set_sqlstate));
		}
		if (rep->set_fx.ran)
			json_object_object_add(s, "effects", json_effects(&rep->set_fx));
		json_object_object_add(top, "set", s);
	}
	json_object_object_add(top, "outcome", json_object_new_string(idem_try_outcome_str(worst)));
	json_object_object_add(top, "exit", json_object_new_int(rc));
	json_object_object_add(top, "committed", json_object_new_boolean(false));
	idemctl_print_json(top);
	json_object_put(top);
}

static int read_kafka(const struct idem_cfg *cfg, const struct try_opts *o,
                      struct idem_try_msgs *msgs)
{
	idem_error err = { 0 };
	rd_kafka_t *rk;
	int32_t part = o->run.partition >= 0 ? o->run.partition : 0;
	idem_status r;

	/* A consumer of the group that only assigns the partition: it joins nothing and, with
	 * enable.auto.commit off, commits nothing. */
	if (idem_consumer_new(cfg, NULL, &rk, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: try: %s\n", err.msg);
		return IDEM_EXIT_FAILURE;
	}
	r = idem_try_read_kafka(rk, o->run.topic, part, o->offset, (int)o->count, 30000, msgs,
	                        &err);
	rd_kafka_destroy(rk);
	if (r != IDEM_OK) {
		fprintf(stderr, "idemctl: try: %s\n", err.msg);
		return IDEM_EXIT_FAILURE;
	}
	return IDEM_EXIT_OK;
}

int idemctl_try(const struct idem_cfg *cfg, int argc, char **argv)
{
	struct idem_try_msgs msgs = { 0 };
	struct idem_try_report rep = { 0 };
	struct sources src = { 0 };
	enum idem_try_outcome worst;
	struct try_opts o;
	idem_error err = { 0 };
	PGconn *conn = NULL;
	int rc;

	if ((rc = try_parse(argc, argv, &o)) >= 0)
		return rc;
	if (o.offset >= 0)
		rc = read_kafka(cfg, &o, &msgs);
	else
		rc = read_files(argc - optind, argv + optind, &msgs, &src);
	if (rc != IDEM_EXIT_OK)
		goto out;
	if ((rc = idemctl_pg_open(cfg, &conn)) != IDEM_EXIT_OK)
		goto out;
	if (idem_try_run(cfg, conn, &msgs, &o.run, &rep, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: try: %s (rolled back: nothing was committed)\n", err.msg);
		rc = err.code == IDEM_ERR_INVALID ? IDEM_EXIT_USAGE : IDEM_EXIT_FAILURE;
		goto out;
	}
	worst = idem_try_worst(&rep);
	rc = worst == IDEM_TRY_APPLY        ? IDEM_EXIT_OK
	     : worst == IDEM_TRY_DUPLICATE  ? IDEM_EXIT_TRY_DUPLICATE
	     : worst == IDEM_TRY_QUARANTINE ? IDEM_EXIT_TRY_QUARANTINE
	                                    : IDEM_EXIT_TRY_HANDLER;
	if (o.json)
		print_json(&rep, &src, &msgs, worst, rc);
	else
		print_text(&rep, &src, &msgs, worst);
out:
	idem_try_report_done(&rep);
	PQfinish(conn);
	free(src.file);
	idem_try_msgs_done(&msgs);
	return rc;
}
