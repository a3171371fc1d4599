/*
 * idemctl_quarantine.c - idemctl quarantine list|show|retry|discard.
 */
#include <getopt.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_flush.h"
#include "idem_quarantine.h"
#include "idemctl_cmds.h"
#include "idemctl_common.h"

#define SHOW_MAX_BYTES 4096 /* of a key or value printed by 'show' without --json */

void idemctl_quarantine_usage(FILE *f)
{
	fprintf(f,
	        "  quarantine list [--all] [--all-consumers] [--consumer C] [--topic T] [--limit N]\n"
	        "                  [--json]\n"
	        "            messages that could not be applied, oldest first, of the entries this\n"
	        "            configuration's routes serve (--all-consumers: every consumer's;\n"
	        "            --all: resolved ones too)\n"
	        "  quarantine show ID [--json]\n"
	        "            one message with its key, value, headers and failure\n"
	        "  quarantine retry ID... | --all [--consumer C] [--topic T]\n"
	        "            apply again through the same claim, in one transaction that resolves the\n"
	        "            entry: applied, or a duplicate if its key was applied meanwhile, never\n"
	        "            twice; a message that fails again stays quarantined (exit status 1)\n"
	        "  quarantine discard ID...\n"
	        "            resolve as discarded: the message will never be applied (only entries\n"
	        "            this configuration's routes serve, as for retry)\n");
}

struct qopts {
	struct idem_quarantine_filter filter;
	bool json;
};

/*
 * Parse the options after "quarantine SUB"; the operands are left in argv[optind..]. What is
 * listed or retried is scoped to the entries a route of @cfg serves unless --all-consumers.
 */
static int parse_opts(const struct idem_cfg *cfg, int argc, char **argv, struct qopts *o,
                      const char *allowed)
{
	static const struct option longopts[] = {
		{ "all", no_argument, NULL, 'a' },
		{ "all-consumers", no_argument, NULL, 'A' },
		{ "consumer", required_argument, NULL, 'C' },
		{ "topic", required_argument, NULL, 't' },
		{ "limit", required_argument, NULL, 'l' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	int64_t limit;
	int c;

	memset(o, 0, sizeof(*o));
	o->filter.scope = cfg;
	optind = 0; /* glibc: start over, with the default (permuting) scan */
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		if (c == '?' || strchr(allowed, c) == NULL) {
			fprintf(stderr, "idemctl: quarantine %s: option not accepted here\n",
			        argv[0]);
			return IDEM_EXIT_USAGE;
		}
		switch (c) {
		case 'a':
			o->filter.all = true;
			break;
		case 'A':
			o->filter.scope = NULL;
			break;
		case 'C':
			o->filter.consumer = optarg;
			break;
		case 't':
			o->filter.topic = optarg;
			break;
		case 'l':
			if (!idemctl_number("quarantine --limit", optarg, 0, INT32_MAX, &limit))
				return IDEM_EXIT_USAGE;
			o->filter.limit = (size_t)limit;
			break;
		case 'j':
			o->json = true;
			break;
		}
	}
	return IDEM_EXIT_OK;
}

static bool parse_id(const char *s, int64_t *ret_id)
{
	return idemctl_number("quarantine id", s, 1, INT64_MAX, ret_id);
}

/* Print @n bytes of @p for a terminal (idem_esc()), at most SHOW_MAX_BYTES of them. */
static void print_escaped(const char *p, size_t n)
{
	idemctl_print_esc(p, n, SHOW_MAX_BYTES, 0);
}

/*
 * A column of the list, @width bytes wide (@width <= 128): @s escaped (idem_esc()), cut on a
 * whole character or escape and marked if longer, then padded.
 */
static void print_cell(const char *s, size_t width)
{
	char buf[128];
	size_t n;

	n = strlen(idemctl_esc(buf, width < sizeof(buf) ? width : sizeof(buf), s, 0));
	printf("%s", buf);
	for (; n < width; n++)
		putchar(' ');
}

static json_object *jstr(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

/* Bytes as JSON: the text when it is UTF-8 without NULs, else null (see the _hex field). */
static void jbytes(json_object *o, const char *name, const char *p, size_t n)
{
	char hexname[32];
	char *hex;

	snprintf(hexname, sizeof(hexname), "%s_hex", name);
	if (p == NULL) {
		json_object_object_add(o, name, NULL);
		json_object_object_add(o, hexname, NULL);
		return;
	}
	json_object_object_add(
	        o, name, idem_utf8_valid(p, n) ? json_object_new_string_len(p, (int)n) : NULL);
	hex = malloc(2 * n + 1);
	if (hex == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		snprintf(hex + 2 * i, 3, "%02x", (unsigned char)p[i]);
	hex[2 * n] = '\0';
	json_object_object_add(o, hexname, json_object_new_string(hex));
	free(hex);
}

static json_object *entry_json(const struct idem_quarantine_entry *e, bool full)
{
	json_object *o = json_object_new_object();

	json_object_object_add(o, "id", json_object_new_int64(e->id));
	json_object_object_add(o, "consumer", jstr(e->consumer));
	json_object_object_add(o, "topic", jstr(e->topic));
	json_object_object_add(o, "partition", json_object_new_int(e->partition));
	json_object_object_add(o, "offset", json_object_new_int64(e->offset));
	json_object_object_add(o, "business_key", jstr(e->business_key));
	json_object_object_add(o, "reason", jstr(e->reason));
	json_object_object_add(o, "sqlstate", e->sqlstate[0] ? jstr(e->sqlstate) : NULL);
	json_object_object_add(o, "attempts", json_object_new_int(e->attempts));
	json_object_object_add(o, "first_failed_at", jstr(e->first_failed_at));
	json_object_object_add(o, "last_failed_at", jstr(e->last_failed_at));
	json_object_object_add(o, "resolved_at", jstr(e->resolved_at));
	json_object_object_add(o, "resolution", jstr(e->resolution));
	if (full) {
		json_object *hs = json_object_new_array();

		jbytes(o, "key", e->key, e->key_len);
		jbytes(o, "value", e->value, e->value_len);
		json_object_object_add(o, "timestamp_ms",
		                       e->timestamp_ms >= 0 ? json_object_new_int64(e->timestamp_ms)
		                                            : NULL);
		for (size_t i = 0; i < e->n_headers; i++) {
			json_object *h = json_object_new_object();

			json_object_object_add(h, "name", jstr(e->headers[i].name));
			jbytes(h, "value", e->headers[i].value, e->headers[i].value_len);
			json_object_array_add(hs, h);
		}
		json_object_object_add(o, "headers", hs);
	}
	return o;
}

static int cmd_list(const struct idem_cfg *cfg, int argc, char **argv)
{
	struct idem_quarantine_entry *v = NULL;
	idem_error err = { 0 };
	PGconn *conn = NULL;
	struct qopts o;
	size_t n = 0;
	int rc;

	if ((rc = parse_opts(cfg, argc, argv, &o, "aACtlj")) != IDEM_EXIT_OK)
		return rc;
	if (optind < argc) {
		fprintf(stderr, "idemctl: quarantine list takes no operands\n");
		return IDEM_EXIT_USAGE;
	}
	if ((rc = idemctl_pg_open(cfg, &conn)) != IDEM_EXIT_OK)
		return rc;
	if (idem_quarantine_list(conn, &o.filter, &v, &n, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s\n", err.msg);
		rc = IDEM_EXIT_FAILURE;
		goto out_finish;
	}
	if (o.json) {
		json_object *a = json_object_new_array();

		for (size_t i = 0; i < n; i++)
			json_object_array_add(a, entry_json(&v[i], false));
		idemctl_print_json(a);
		json_object_put(a);
		goto out_free;
	}
	printf("%-8s %-28s %-8s %-8s %-10s %-24s %s\n", "ID", "TOPIC/PARTITION@OFFSET", "ATTEMPTS",
	       "SQLSTATE", "STATUS", "BUSINESS KEY", "REASON");
	for (size_t i = 0; i < n; i++) {
		char where[64];

		snprintf(where, sizeof(where), "%s/%" PRId32 "@%" PRId64, v[i].topic,
		         v[i].partition, v[i].offset);
		printf("%-8" PRId64 " ", v[i].id);
		print_cell(where, 29);
		printf("%-8d %-8s ", v[i].attempts, v[i].sqlstate[0] ? v[i].sqlstate : "-");
		print_cell(v[i].resolution ? v[i].resolution : "open", 11);
		print_cell(v[i].business_key, 25);
		print_cell(v[i].reason, 80);
		printf("\n");
	}
out_free:
	idem_quarantine_entries_free(v, n);
out_finish:
	PQfinish(conn);
	return rc;
}

static void show_text(const struct idem_quarantine_entry *e)
{
	printf("id:              %" PRId64 "\n", e->id);
	char buf[1024];

	printf("consumer:        %s\n", idemctl_esc(buf, sizeof(buf), e->consumer, 0));
	printf("topic:           %s\n", idemctl_esc(buf, sizeof(buf), e->topic, 0));
	printf("partition:       %" PRId32 "\n", e->partition);
	printf("offset:          %" PRId64 "\n", e->offset);
	printf("business key:    ");
	if (e->business_key != NULL)
		print_escaped(e->business_key, strlen(e->business_key));
	else
		printf("(none)");
	printf("\nreason:          ");
	if (e->reason != NULL)
		print_escaped(e->reason, strlen(e->reason));
	printf("\n");
	printf("sqlstate:        %s\n", e->sqlstate[0] ? e->sqlstate : "(none)");
	printf("attempts:        %d\n", e->attempts);
	printf("first failed at: %s\n", e->first_failed_at);
	printf("last failed at:  %s\n", e->last_failed_at);
	printf("status:          %s%s%s\n", e->resolution ? e->resolution : "open",
	       e->resolved_at ? " at " : "", e->resolved_at ? e->resolved_at : "");
	if (e->timestamp_ms >= 0)
		printf("timestamp ms:    %" PRId64 "\n", e->timestamp_ms);
	printf("key:             ");
	if (e->key != NULL)
		print_escaped(e->key, e->key_len);
	else
		printf("(none)");
	printf("\nvalue:           ");
	if (e->value != NULL)
		print_escaped(e->value, e->value_len);
	else
		printf("(none)");
	printf("\nheaders:         %zu\n", e->n_headers);
	for (size_t i = 0; i < e->n_headers; i++) {
		printf("  ");
		print_escaped(e->headers[i].name, strlen(e->headers[i].name));
		printf(": ");
		if (e->headers[i].value != NULL)
			print_escaped(e->headers[i].value, e->headers[i].value_len);
		else
			printf("(null)");
		printf("\n");
	}
}

static int cmd_show(const struct idem_cfg *cfg, int argc, char **argv)
{
	struct idem_quarantine_entry e;
	idem_error err = { 0 };
	PGconn *conn = NULL;
	struct qopts o;
	int64_t id;
	int rc;

	if ((rc = parse_opts(cfg, argc, argv, &o, "j")) != IDEM_EXIT_OK)
		return rc;
	if (optind + 1 != argc) {
		fprintf(stderr, "idemctl: quarantine show takes one ID\n");
		return IDEM_EXIT_USAGE;
	}
	if (!parse_id(argv[optind], &id))
		return IDEM_EXIT_USAGE;
	if ((rc = idemctl_pg_open(cfg, &conn)) != IDEM_EXIT_OK)
		return rc;
	if (idem_quarantine_get(conn, id, &e, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s\n", err.msg);
		PQfinish(conn);
		return IDEM_EXIT_FAILURE;
	}
	if (o.json) {
		json_object *j = entry_json(&e, true);

		idemctl_print_json(j);
		json_object_put(j);
	} else {
		show_text(&e);
	}
	idem_quarantine_entry_done(&e);
	PQfinish(conn);
	return IDEM_EXIT_OK;
}

/* The ids to act on: the operands, or with --all the open entries the routes of @cfg serve. */
static int collect_ids(const struct idem_cfg *cfg, PGconn *conn, int argc, char **argv,
                       const struct qopts *o, int64_t **ret_ids, size_t *ret_n)
{
	struct idem_quarantine_entry *v = NULL;
	struct idem_quarantine_filter f = o->filter;
	idem_error err = { 0 };
	int64_t *ids;
	size_t n = 0, k = 0;

	if (!o->filter.all) {
		ids = calloc((size_t)(argc - optind) + 1, sizeof(*ids));
		if (ids == NULL)
			return IDEM_EXIT_FAILURE;
		for (int i = optind; i < argc; i++) {
			if (!parse_id(argv[i], &ids[k++])) {
				free(ids);
				return IDEM_EXIT_USAGE;
			}
		}
		*ret_ids = ids;
		*ret_n = k;
		return IDEM_EXIT_OK;
	}
	f.all = false; /* open entries only */
	f.scope = cfg; /* those the routes of @cfg serve */
	if (idem_quarantine_list(conn, &f, &v, &n, &err) != IDEM_OK) {
		fprintf(stderr, "idemctl: %s\n", err.msg);
		return IDEM_EXIT_FAILURE;
	}
	ids = calloc(n + 1, sizeof(*ids));
	if (ids == NULL) {
		idem_quarantine_entries_free(v, n);
		return IDEM_EXIT_FAILURE;
	}
	for (size_t i = 0; i < n; i++)
		ids[k++] = v[i].id;
	idem_quarantine_entries_free(v, n);
	*ret_ids = ids;
	*ret_n = k;
	return IDEM_EXIT_OK;
}

static int cmd_retry(const struct idem_cfg *cfg, int argc, char **argv)
{
	enum idem_quarantine_outcome outcome;
	idem_error err = { 0 };
	int64_t *ids = NULL;
	idem_flush *pg = NULL;
	char detail[1024];
	struct qopts o;
	size_t n = 0, counts[3] = { 0, 0, 0 };
	int rc;

	if ((rc = parse_opts(cfg, argc, argv, &o, "aCt")) != IDEM_EXIT_OK)
		return rc;
	if (o.filter.all == (optind < argc)) {
		fprintf(stderr, "idemctl: quarantine retry takes IDs or --all\n");
		return IDEM_EXIT_USAGE;
	}
	/* The daemon's own connection: schema checked, every handler prepared (a broken one
	 * fails here), the same timeouts. */
	if (idem_flush_new(cfg, &pg, &err) != IDEM_OK)
		return idemctl_pg_failed(&err);
	if ((rc = collect_ids(cfg, idem_flush_conn(pg), argc, argv, &o, &ids, &n)) != IDEM_EXIT_OK)
		goto out_free;
	for (size_t i = 0; i < n; i++) {
		detail[0] = '\0';
		if (idem_quarantine_retry(pg, cfg, ids[i], &outcome, detail, sizeof(detail),
		                          &err) != IDEM_OK) {
			fprintf(stderr, "idemctl: quarantine entry %" PRId64 ": %s\n", ids[i],
			        err.msg);
			rc = IDEM_EXIT_FAILURE;
			if (!idem_flush_connected(pg))
				break;
			continue;
		}
		counts[outcome]++;
		/* The detail escaped the business key it quotes already (IDEM_ESC_QUOTE). */
		printf("%" PRId64 ": %s: ", ids[i], idem_quarantine_outcome_str(outcome));
		idemctl_print_esc(detail, strlen(detail), sizeof(detail) * 4,
		                  IDEM_ESC_KEEP_BACKSLASH);
		printf("\n");
		if (outcome == IDEM_QUARANTINE_FAILED)
			rc = IDEM_EXIT_FAILURE;
	}
	if (n > 1 || o.filter.all)
		printf("retried %zu: applied %zu, duplicate %zu, failed %zu\n", n,
		       counts[IDEM_QUARANTINE_APPLIED], counts[IDEM_QUARANTINE_DUPLICATE],
		       counts[IDEM_QUARANTINE_FAILED]);
out_free:
	free(ids);
	idem_flush_free(pg);
	return rc;
}

static int cmd_discard(const struct idem_cfg *cfg, int argc, char **argv)
{
	idem_error err = { 0 };
	PGconn *conn = NULL;
	struct qopts o;
	int64_t *ids;
	int rc;

	if ((rc = parse_opts(cfg, argc, argv, &o, "")) != IDEM_EXIT_OK)
		return rc;
	if (optind >= argc) {
		fprintf(stderr, "idemctl: quarantine discard takes one or more IDs\n");
		return IDEM_EXIT_USAGE;
	}
	if ((ids = calloc((size_t)(argc - optind), sizeof(*ids))) == NULL)
		return IDEM_EXIT_FAILURE;
	for (int i = optind; i < argc; i++) {
		if (!parse_id(argv[i], &ids[i - optind])) {
			free(ids);
			return IDEM_EXIT_USAGE;
		}
	}
	if ((rc = idemctl_pg_open(cfg, &conn)) != IDEM_EXIT_OK) {
		free(ids);
		return rc;
	}
	for (int i = 0; i < argc - optind; i++) {
		if (idem_quarantine_discard(conn, cfg, ids[i], &err) != IDEM_OK) {
			fprintf(stderr, "idemctl: %s\n", err.msg);
			rc = IDEM_EXIT_FAILURE;
			continue;
		}
		printf("%" PRId64 ": discarded\n", ids[i]);
	}
	free(ids);
	PQfinish(conn);
	return rc;
}

int idemctl_quarantine(const struct idem_cfg *cfg, int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*run)(const struct idem_cfg *cfg, int argc, char **argv);
	} subs[] = {
		{ "list", cmd_list },
		{ "show", cmd_show },
		{ "retry", cmd_retry },
		{ "discard", cmd_discard },
	};

	if (argc < 2) {
		fprintf(stderr,
		        "idemctl: quarantine needs a subcommand: list, show, retry or discard\n");
		return IDEM_EXIT_USAGE;
	}
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(subs); i++) {
		if (strcmp(argv[1], subs[i].name) == 0)
			return subs[i].run(cfg, argc - 1, argv + 1);
	}
	fprintf(stderr, "idemctl: unknown quarantine subcommand '%s'\n", argv[1]);
	return IDEM_EXIT_USAGE;
}
