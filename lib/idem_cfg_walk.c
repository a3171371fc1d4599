/*
 * idem_cfg_walk.c - check a libyaml document against a schema of section tables, convert the
 * values, collect every error with its position. See idem_cfg_walk.h.
 *
 * libyaml's document API composes the file into a node graph in which aliases resolve to shared
 * nodes; the walk visits that graph from the root, one table per mapping.
 */
#include "idem_cfg_walk.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CFG_VISITS_PER_NODE 10 /* walk budget: nodes in the file times this */

IDEM_TESTABLE size_t idem__cfg_edit_distance(const char *a, size_t la, const char *b, size_t lb);
static void cfg_error_at(struct cfg_ctx *ctx, size_t line, size_t col, const char *fmt, ...)
        IDEM_PRINTF(4, 5);

/* Errors. */

/*
 * A user value fit for a message: at most CFG_QUOTE_CHARS characters, control characters
 * escaped, so that one error stays one line. Valid until three more calls.
 */
static const char *cfg_q(struct cfg_ctx *ctx, const char *s, size_t len)
{
	char *out = ctx->qbuf[ctx->qnext++ % IDEM_ARRAY_SIZE(ctx->qbuf)];
	size_t o = 0, chars = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		/* Count characters, not bytes, and never cut a UTF-8 sequence. */
		if ((c & 0xc0) != 0x80 && chars++ == CFG_QUOTE_CHARS) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		if (c == '\n' || c == '\t' || c == '\r') {
			out[o++] = '\\';
			out[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
		} else if (c < 0x20 || c == 0x7f) {
			o += (size_t)snprintf(out + o, CFG_QUOTE_BUF - o, "\\x%02x", c);
		} else {
			out[o++] = (char)c;
		}
	}
	out[o] = '\0';
	return out;
}

const char *idem__cfg_qs(struct cfg_ctx *ctx, const char *s)
{
	return cfg_q(ctx, s, strlen(s));
}

static const char *cfg_qn(struct cfg_ctx *ctx, const yaml_node_t *node)
{
	return cfg_q(ctx, (const char *)node->data.scalar.value, node->data.scalar.length);
}

static void cfg_verror(struct cfg_ctx *ctx, size_t line, size_t col, const char *fmt, va_list ap)
        IDEM_PRINTF(4, 0);

static void cfg_verror(struct cfg_ctx *ctx, size_t line, size_t col, const char *fmt, va_list ap)
{
	struct idem_buf b = { 0 };
	struct cfg_error_line *e;
	char msg[2048];

	vsnprintf(msg, sizeof(msg), fmt, ap);
	/* Library texts (librdkafka, libyaml) may carry raw user bytes: keep one error per line. */
	for (char *p = msg; *p != '\0'; p++) {
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
	}
	if (ctx->n_errs == ctx->cap_errs) {
		size_t cap = ctx->cap_errs ? ctx->cap_errs * 2 : 16;

		e = realloc(ctx->errs, cap * sizeof(*e));
		if (e == NULL) {
			ctx->nomem = true;
			return;
		}
		ctx->errs = e;
		ctx->cap_errs = cap;
	}
	if ((line > 0 ? idem_buf_printf(&b, "%s:%zu:%zu: error: %s\n", ctx->name, line, col, msg)
	              : idem_buf_printf(&b, "%s: error: %s\n", ctx->name, msg)) != IDEM_OK) {
		idem_buf_done(&b);
		ctx->nomem = true;
		return;
	}
	e = &ctx->errs[ctx->n_errs];
	e->line = line;
	e->col = col;
	e->seq = ctx->n_errs;
	e->text = b.data;
	ctx->n_errs++;
}

/* Reports a problem at @node (1-based line:column), or about the whole file if @node is NULL. */
void idem__cfg_error(struct cfg_ctx *ctx, const yaml_node_t *node, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (node != NULL)
		cfg_verror(ctx, node->start_mark.line + 1, node->start_mark.column + 1, fmt, ap);
	else
		cfg_verror(ctx, 0, 0, fmt, ap);
	va_end(ap);
}

static void cfg_error_at(struct cfg_ctx *ctx, size_t line, size_t col, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	cfg_verror(ctx, line, col, fmt, ap);
	va_end(ap);
}

static int cfg_error_cmp(const void *a, const void *b)
{
	const struct cfg_error_line *x = a, *y = b;

	if (x->line != y->line)
		return x->line < y->line ? -1 : 1;
	if (x->col != y->col)
		return x->col < y->col ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

idem_status idem__cfg_result(struct cfg_ctx *ctx, char **ret_errors)
{
	struct idem_buf b = { 0 };

	if (ctx->nomem)
		return IDEM_ERR_NOMEM;
	if (ctx->n_errs == 0)
		return IDEM_OK;
	/* All errors in file order, one per line. */
	qsort(ctx->errs, ctx->n_errs, sizeof(*ctx->errs), cfg_error_cmp);
	for (size_t i = 0; i < ctx->n_errs; i++) {
		if (idem_buf_append_str(&b, ctx->errs[i].text) != IDEM_OK) {
			idem_buf_done(&b);
			return IDEM_ERR_NOMEM;
		}
	}
	if (ret_errors != NULL)
		*ret_errors = b.data;
	else
		idem_buf_done(&b);
	return IDEM_ERR_CONFIG;
}

/* libyaml could not compose the document: report its problem at its mark. */
static void cfg_yaml_error(struct cfg_ctx *ctx, const yaml_parser_t *parser, const char *buf,
                           size_t len)
{
	const char *problem = parser->problem ? parser->problem : "unknown error";
	size_t line = 1, col = 1;

	switch (parser->error) {
	case YAML_MEMORY_ERROR:
		ctx->nomem = true;
		return;
	case YAML_READER_ERROR:
		/* Reader errors (bad encoding) carry a byte offset instead of a mark. */
		for (size_t i = 0; i < parser->problem_offset && i < len; i++) {
			if (buf[i] == '\n') {
				line++;
				col = 1;
			} else if (((unsigned char)buf[i] & 0xc0) != 0x80) {
				col++;
			}
		}
		if (parser->problem_value != -1)
			cfg_error_at(ctx, line, col, "invalid yaml: %s (byte 0x%02x)", problem,
			             (unsigned)parser->problem_value & 0xffu);
		else
			cfg_error_at(ctx, line, col, "invalid yaml: %s", problem);
		return;
	default:
		line = parser->problem_mark.line + 1;
		col = parser->problem_mark.column + 1;
		if (parser->context != NULL)
			cfg_error_at(ctx, line, col,
			             "invalid yaml: %s (%s at line %zu, column %zu)", problem,
			             parser->context, parser->context_mark.line + 1,
			             parser->context_mark.column + 1);
		else
			cfg_error_at(ctx, line, col, "invalid yaml: %s", problem);
		return;
	}
}

/* Node helpers. */

static yaml_node_t *cfg_node(struct cfg_ctx *ctx, int index)
{
	return yaml_document_get_node(ctx->doc, index);
}

static const char *cfg_kind(const yaml_node_t *node)
{
	switch (node->type) {
	case YAML_SCALAR_NODE:
		return "a scalar";
	case YAML_SEQUENCE_NODE:
		return "a sequence";
	case YAML_MAPPING_NODE:
		return "a mapping";
	default:
		return "nothing";
	}
}

/* A plain "", "~" or "null": an empty section or list, an empty string. */
static bool cfg_is_null(const yaml_node_t *node)
{
	static const char *const nulls[] = { "", "~", "null", "Null", "NULL" };

	if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
		return false;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(nulls); i++) {
		if (strcmp((const char *)node->data.scalar.value, nulls[i]) == 0 &&
		    node->data.scalar.length == strlen(nulls[i]))
			return true;
	}
	return false;
}

static bool cfg_scalar_eq(const yaml_node_t *node, const char *s)
{
	size_t n = strlen(s);

	return node->type == YAML_SCALAR_NODE && node->data.scalar.length == n &&
	       memcmp(node->data.scalar.value, s, n) == 0;
}

/* The value node of @key in mapping @map (the first if repeated), or NULL. */
yaml_node_t *idem__cfg_map_get(struct cfg_ctx *ctx, yaml_node_t *map, const char *key)
{
	if (map == NULL || map->type != YAML_MAPPING_NODE)
		return NULL;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *k = cfg_node(ctx, p->key);

		if (k != NULL && cfg_scalar_eq(k, key))
			return cfg_node(ctx, p->value);
	}
	return NULL;
}

/* Item @i of sequence @seq, or NULL. */
yaml_node_t *idem__cfg_seq_get(struct cfg_ctx *ctx, yaml_node_t *seq, size_t i)
{
	if (seq == NULL || seq->type != YAML_SEQUENCE_NODE ||
	    i >= (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start))
		return NULL;
	return cfg_node(ctx, seq->data.sequence.items.start[i]);
}

/* Counts one step of the walk; false once the budget is spent (reported once). */
static bool cfg_visit(struct cfg_ctx *ctx)
{
	if (ctx->overflow)
		return false;
	if (++ctx->visits <= ctx->max_visits)
		return true;
	ctx->overflow = true;
	idem__cfg_error(ctx, NULL,
	                "configuration is too large: more than %zu nodes after expanding aliases",
	                ctx->max_visits);
	return false;
}

/* A path for messages ("routes[0].handler"); paths are ours and short, so truncation is moot. */
static void cfg_path(char dst[CFG_PATH_MAX], const char *fmt, ...) IDEM_PRINTF(2, 3);

static void cfg_path(char dst[CFG_PATH_MAX], const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(dst, CFG_PATH_MAX, fmt, ap);
	va_end(ap);
}

void *idem__cfg_field(void *target, size_t off)
{
	return (char *)target + off;
}

/* The text of scalar @node ("" for null), or NULL after reporting why it cannot be used. */
static const char *cfg_text(struct cfg_ctx *ctx, yaml_node_t *node, const char *path)
{
	if (node->type != YAML_SCALAR_NODE) {
		idem__cfg_error(ctx, node, "expected a scalar for '%s', found %s", path,
		                cfg_kind(node));
		return NULL;
	}
	if (cfg_is_null(node))
		return "";
	if (memchr(node->data.scalar.value, '\0', node->data.scalar.length) != NULL) {
		idem__cfg_error(ctx, node, "'%s' must not contain a nul character", path);
		return NULL;
	}
	return (const char *)node->data.scalar.value;
}

char *idem__cfg_strdup(struct cfg_ctx *ctx, const char *s)
{
	char *d = strdup(s);

	if (d == NULL)
		ctx->nomem = true;
	return d;
}

/* Suggestions. */

/*
 * Optimal string alignment distance (Levenshtein plus adjacent transpositions), the usual
 * typo measure. Strings longer than 32 bytes are "too far" (SIZE_MAX): table keys are short.
 */
IDEM_TESTABLE size_t idem__cfg_edit_distance(const char *a, size_t la, const char *b, size_t lb)
{
	size_t d[33][33];

	if (la > 32 || lb > 32)
		return SIZE_MAX;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
			size_t v = d[i - 1][j] + 1;

			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (d[i - 1][j - 1] + cost < v)
				v = d[i - 1][j - 1] + cost;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < v)
				v = d[i - 2][j - 2] + 1;
			d[i][j] = v;
		}
	}
	return d[la][lb];
}

/* The key of @sec closest to @node's text, if within two edits. */
static const char *cfg_suggest(const struct cfg_section *sec, const yaml_node_t *node)
{
	const char *s = (const char *)node->data.scalar.value;
	size_t len = node->data.scalar.length, best = 3;
	const char *found = NULL;

	for (size_t i = 0; i < sec->n_keys; i++) {
		size_t d = idem__cfg_edit_distance(s, len, sec->keys[i].name,
		                                   strlen(sec->keys[i].name));

		if (d < best) {
			best = d;
			found = sec->keys[i].name;
		}
	}
	return found;
}

/* Values by type. */

static bool cfg_string(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                       const char *path, void *target)
{
	char **slot = idem__cfg_field(target, key->off);
	const char *s = cfg_text(ctx, node, path);

	if (s == NULL)
		return false;
	if (*s == '\0') {
		idem__cfg_error(ctx, node, "'%s' must not be empty", path);
		return false;
	}
	if (key->check != NULL && !key->check(ctx, node, path, s))
		return false;
	*slot = idem__cfg_strdup(ctx, s);
	return *slot != NULL;
}

static bool cfg_int(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                    const char *path, void *target)
{
	const char *s = cfg_text(ctx, node, path);
	const char *p;
	char *end;
	long long v;

	if (s == NULL)
		return false;
	p = s + (*s == '-' || *s == '+');
	if (*p < '0' || *p > '9') {
		idem__cfg_error(ctx, node, "'%s' must be an integer, got '%s'", path,
		                idem__cfg_qs(ctx, s));
		return false;
	}
	errno = 0;
	v = strtoll(s, &end, 10);
	if (*end != '\0') {
		idem__cfg_error(ctx, node, "'%s' must be an integer, got '%s'", path,
		                idem__cfg_qs(ctx, s));
		return false;
	}
	if (errno == ERANGE || v < key->min || v > key->max) {
		idem__cfg_error(ctx, node, "'%s' must be between %lld and %lld%s%s%s, got '%s'",
		                path, key->min, key->max, key->range_why != NULL ? " (" : "",
		                key->range_why != NULL ? key->range_why : "",
		                key->range_why != NULL ? ")" : "", idem__cfg_qs(ctx, s));
		return false;
	}
	if (key->type == CFG_SIZE)
		*(size_t *)idem__cfg_field(target, key->off) = (size_t)v;
	else
		*(int *)idem__cfg_field(target, key->off) = (int)v;
	return true;
}

static bool cfg_duration(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                         const char *path, void *target)
{
	const char *s = cfg_text(ctx, node, path);
	int64_t v;

	if (s == NULL)
		return false;
	if (!idem_duration_parse(s, &v)) {
		idem__cfg_error(ctx, node,
		                "'%s' must be a duration such as 30d, 12h, 90m or 45s, got '%s'",
		                path, idem__cfg_qs(ctx, s));
		return false;
	}
	if (v < key->min || v > key->max) {
		idem__cfg_error(ctx, node, "'%s' must be between %llds and %llds, got '%s'", path,
		                key->min, key->max, idem__cfg_qs(ctx, s));
		return false;
	}
	*(int64_t *)idem__cfg_field(target, key->off) = v;
	return true;
}

static bool cfg_enum(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                     const char *path, void *target)
{
	const char *s = cfg_text(ctx, node, path);
	struct idem_buf choices = { 0 };
	size_t n = 0;

	if (s == NULL)
		return false;
	for (size_t i = 0; key->names[i] != NULL; i++) {
		if (strcmp(s, key->names[i]) == 0) {
			*(int *)idem__cfg_field(target, key->off) = (int)i;
			return true;
		}
		n++;
	}
	/* "a, b or c", from the table, so the message never goes stale. */
	for (size_t i = 0; i < n; i++) {
		const char *sep = i == 0 ? "" : i + 1 == n ? " or " : ", ";

		if (idem_buf_printf(&choices, "%s%s", sep, key->names[i]) != IDEM_OK) {
			idem_buf_done(&choices);
			ctx->nomem = true;
			return false;
		}
	}
	idem__cfg_error(ctx, node, "'%s' must be %s, got '%s'", path, choices.data,
	                idem__cfg_qs(ctx, s));
	idem_buf_done(&choices);
	return false;
}

/*
 * A sequence (or null) @node: its item count, or false after reporting that it is not one.
 */
static bool cfg_seq(struct cfg_ctx *ctx, yaml_node_t *node, const char *path, size_t *ret_n)
{
	if (cfg_is_null(node)) {
		*ret_n = 0;
		return true;
	}
	if (node->type != YAML_SEQUENCE_NODE) {
		idem__cfg_error(ctx, node, "expected a sequence for '%s', found %s", path,
		                cfg_kind(node));
		return false;
	}
	*ret_n = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
	return true;
}

static bool cfg_strings(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                        const char *path, void *target)
{
	char ***slot = idem__cfg_field(target, key->off);
	size_t *count = idem__cfg_field(target, key->n_off);
	char item_path[CFG_PATH_MAX];
	char **items;
	size_t n;

	if (!cfg_seq(ctx, node, path, &n))
		return false;
	if (n == 0) {
		idem__cfg_error(ctx, node, "'%s' must list at least one %s", path, key->noun);
		return false;
	}
	items = calloc(n, sizeof(*items));
	if (items == NULL) {
		ctx->nomem = true;
		return false;
	}
	*slot = items;
	*count = n;
	for (size_t i = 0; i < n && cfg_visit(ctx); i++) {
		yaml_node_t *item = idem__cfg_seq_get(ctx, node, i);
		const char *s;

		cfg_path(item_path, "%s[%zu]", path, i);
		if (item == NULL || (s = cfg_text(ctx, item, item_path)) == NULL)
			continue;
		if (key->check != NULL && !key->check(ctx, item, item_path, s))
			continue;
		items[i] = idem__cfg_strdup(ctx, s);
	}
	return true;
}

static bool cfg_conv_values(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                            const char *path, void *target)
{
	void **slot = idem__cfg_field(target, key->off);
	size_t *count = idem__cfg_field(target, key->n_off);
	char item_path[CFG_PATH_MAX], why[512];
	char *values;
	size_t n;

	if (!cfg_seq(ctx, node, path, &n))
		return false;
	if (n == 0)
		return true;
	values = calloc(n, key->conv->size);
	if (values == NULL) {
		ctx->nomem = true;
		return false;
	}
	*slot = values;
	*count = n;
	for (size_t i = 0; i < n && cfg_visit(ctx); i++) {
		yaml_node_t *item = idem__cfg_seq_get(ctx, node, i);
		const char *s;
		idem_status r;

		cfg_path(item_path, "%s[%zu]", path, i);
		if (item == NULL || (s = cfg_text(ctx, item, item_path)) == NULL)
			continue;
		r = key->conv->parse(s, values + i * key->conv->size, why, sizeof(why));
		if (r == IDEM_ERR_NOMEM)
			ctx->nomem = true;
		else if (r != IDEM_OK)
			idem__cfg_error(ctx, item, "invalid '%s': %s", item_path, why);
	}
	return true;
}

static bool cfg_conv_value(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                           const char *path, void *target)
{
	const char *s = cfg_text(ctx, node, path);
	char why[512];
	idem_status r;

	if (s == NULL)
		return false;
	r = key->conv->parse(s, idem__cfg_field(target, key->off), why, sizeof(why));
	if (r == IDEM_ERR_NOMEM)
		ctx->nomem = true;
	else if (r != IDEM_OK)
		idem__cfg_error(ctx, node, "invalid '%s': %s", path, why);
	return r == IDEM_OK;
}

int idem__cfg_name_ref_cmp(const void *x, const void *y)
{
	const struct cfg_name_ref *p = x, *q = y;
	int c = strcmp(p->name, q->name);

	if (c != 0)
		return c;
	if (p->a != q->a)
		return p->a < q->a ? -1 : 1;
	return p->b < q->b ? -1 : p->b > q->b;
}

bool idem__cfg_name_ref_find(const struct cfg_name_ref *refs, size_t n, const char *name)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(refs[mid].name, name);

		if (c == 0)
			return true;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

static bool cfg_properties(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                           const char *path, void *target)
{
	void **slot = idem__cfg_field(target, key->off);
	size_t *count = idem__cfg_field(target, key->n_off);
	struct cfg_name_ref *refs;
	size_t n, n_refs = 0, i = 0;
	char *kv;

	if (cfg_is_null(node))
		return true;
	if (node->type != YAML_MAPPING_NODE) {
		idem__cfg_error(ctx, node, "expected a mapping for '%s', found %s", path,
		                cfg_kind(node));
		return false;
	}
	n = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
	if (n == 0)
		return true;
	kv = calloc(n, key->conv->size);
	refs = calloc(n, sizeof(*refs));
	if (kv == NULL || refs == NULL) {
		free(kv);
		free(refs);
		ctx->nomem = true;
		return false;
	}
	*slot = kv;
	*count = 0;
	for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
	     p < node->data.mapping.pairs.top && cfg_visit(ctx); p++, i++) {
		yaml_node_t *k = cfg_node(ctx, p->key), *v = cfg_node(ctx, p->value);
		char vpath[CFG_PATH_MAX];
		const char *name, *value;

		if (k == NULL || v == NULL)
			continue;
		if (k->type != YAML_SCALAR_NODE) {
			idem__cfg_error(ctx, k, "expected a scalar key in '%s', found %s", path,
			                cfg_kind(k));
			continue;
		}
		if ((name = cfg_text(ctx, k, path)) == NULL)
			continue;
		refs[n_refs++] = (struct cfg_name_ref){ name, i, 0, k };
		cfg_path(vpath, "%s.%s", path, idem__cfg_qs(ctx, name));
		if ((value = cfg_text(ctx, v, vpath)) == NULL)
			continue;
		if (key->check_pair != NULL && !key->check_pair(ctx, k, v, name, value))
			continue;
		if (key->conv->pair(name, value, kv + *count * key->conv->size) != IDEM_OK)
			ctx->nomem = true;
		(*count)++;
	}
	qsort(refs, n_refs, sizeof(*refs), idem__cfg_name_ref_cmp);
	for (size_t j = 1; j < n_refs; j++) {
		if (strcmp(refs[j].name, refs[j - 1].name) != 0)
			continue;
		/* refs[j - 1] may itself be a repeat; the first of the run is the definition. */
		for (i = j - 1; i > 0 && strcmp(refs[i - 1].name, refs[j].name) == 0; i--)
			;
		idem__cfg_error(
		        ctx, refs[j].node, "duplicate key '%s' in '%s' (first defined at line %zu)",
		        idem__cfg_qs(ctx, refs[j].name), path, refs[i].node->start_mark.line + 1);
	}
	free(refs);
	return true;
}

static bool cfg_section_walk(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                             const struct cfg_section *sec, void *target);

static bool cfg_list(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                     const char *path, void *target)
{
	void **slot = idem__cfg_field(target, key->off);
	size_t *count = idem__cfg_field(target, key->n_off);
	char item_path[CFG_PATH_MAX];
	char *items;
	size_t n;

	if (!cfg_seq(ctx, node, path, &n))
		return false;
	if (n == 0) {
		idem__cfg_error(ctx, node, "'%s' must list at least one %s", path, key->noun);
		return false;
	}
	items = calloc(n, key->size);
	if (items == NULL) {
		ctx->nomem = true;
		return false;
	}
	*slot = items;
	*count = n;
	for (size_t i = 0; i < n; i++) {
		yaml_node_t *item = idem__cfg_seq_get(ctx, node, i);

		idem__cfg_set_defaults(key->sub, items + i * key->size);
		cfg_path(item_path, "%s[%zu]", path, i);
		if (item != NULL)
			cfg_section_walk(ctx, item, item_path, key->sub, items + i * key->size);
	}
	return true;
}

static bool cfg_value(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                      const char *path, void *target)
{
	switch (key->type) {
	case CFG_STRING:
		return cfg_string(ctx, key, node, path, target);
	case CFG_INT:
	case CFG_SIZE:
		return cfg_int(ctx, key, node, path, target);
	case CFG_DURATION:
		return cfg_duration(ctx, key, node, path, target);
	case CFG_ENUM:
		return cfg_enum(ctx, key, node, path, target);
	case CFG_STRINGS:
		return cfg_strings(ctx, key, node, path, target);
	case CFG_PROPERTIES:
		return cfg_properties(ctx, key, node, path, target);
	case CFG_VALUE:
		return cfg_conv_value(ctx, key, node, path, target);
	case CFG_VALUES:
		return cfg_conv_values(ctx, key, node, path, target);
	case CFG_SECTION:
		return cfg_section_walk(ctx, node, path, key->sub, target);
	case CFG_LIST:
		return cfg_list(ctx, key, node, path, target);
	}
	return false;
}

/*
 * Reports every item of list @key (@node in the file, walked into @target) whose .unique key
 * repeats an earlier item's: "duplicate route name 'a' (first defined at line 3)".
 */
static void cfg_check_unique(struct cfg_ctx *ctx, const struct cfg_key *key, yaml_node_t *node,
                             void *target)
{
	char *items = *(void **)idem__cfg_field(target, key->off);
	size_t n = *(size_t *)idem__cfg_field(target, key->n_off);

	for (size_t k = 0; k < key->sub->n_keys; k++) {
		const struct cfg_key *sub = &key->sub->keys[k];
		struct cfg_name_ref *refs;
		size_t n_refs = 0;

		if (!sub->unique)
			continue;
		refs = calloc(n ? n : 1, sizeof(*refs));
		if (refs == NULL) {
			ctx->nomem = true;
			return;
		}
		for (size_t i = 0; i < n; i++) {
			const char *name =
			        *(char **)idem__cfg_field(items + i * key->size, sub->off);
			yaml_node_t *v =
			        idem__cfg_map_get(ctx, idem__cfg_seq_get(ctx, node, i), sub->name);

			if (name != NULL && v != NULL)
				refs[n_refs++] = (struct cfg_name_ref){ name, i, 0, v };
		}
		qsort(refs, n_refs, sizeof(*refs), idem__cfg_name_ref_cmp);
		for (size_t i = 1, first = 0; i < n_refs; i++) {
			if (strcmp(refs[i].name, refs[first].name) != 0) {
				first = i;
				continue;
			}
			idem__cfg_error(ctx, refs[i].node,
			                "duplicate %s %s '%s' (first defined at line %zu)",
			                key->noun, sub->name, idem__cfg_qs(ctx, refs[i].name),
			                refs[first].node->start_mark.line + 1);
		}
		free(refs);
	}
}

/*
 * Checks mapping @node against @sec, storing values into @target. Path "" is the top level.
 * @returns true if nothing in it was wrong.
 */
static bool cfg_section_walk(struct cfg_ctx *ctx, yaml_node_t *node, const char *path,
                             const struct cfg_section *sec, void *target)
{
	struct cfg_slot slots[CFG_MAX_KEYS];
	yaml_node_pair_t *pairs = NULL, *end = NULL;
	size_t errors = ctx->n_errs;
	bool top = path[0] == '\0';

	if (!cfg_visit(ctx))
		return false;
	if (node->type != YAML_MAPPING_NODE && !cfg_is_null(node)) {
		if (top)
			idem__cfg_error(ctx, node, "expected a mapping at the top level, found %s",
			                cfg_kind(node));
		else
			idem__cfg_error(ctx, node, "expected a mapping for '%s', found %s", path,
			                cfg_kind(node));
		return false;
	}
	for (size_t i = 0; i < sec->n_keys; i++)
		slots[i] = (struct cfg_slot){ NULL, NULL, true };
	if (node->type == YAML_MAPPING_NODE) {
		pairs = node->data.mapping.pairs.start;
		end = node->data.mapping.pairs.top;
	}
	for (yaml_node_pair_t *p = pairs; p < end && cfg_visit(ctx); p++) {
		yaml_node_t *k = cfg_node(ctx, p->key), *v = cfg_node(ctx, p->value);
		char child[CFG_PATH_MAX];
		const char *suggest;
		size_t i;

		if (k == NULL || v == NULL)
			continue;
		if (k->type != YAML_SCALAR_NODE) {
			if (top)
				idem__cfg_error(ctx, k,
				                "expected a scalar key at the top level, found %s",
				                cfg_kind(k));
			else
				idem__cfg_error(ctx, k, "expected a scalar key in '%s', found %s",
				                path, cfg_kind(k));
			continue;
		}
		for (i = 0; i < sec->n_keys && !cfg_scalar_eq(k, sec->keys[i].name); i++)
			;
		if (i == sec->n_keys) {
			suggest = cfg_suggest(sec, k);
			if (top && suggest != NULL)
				idem__cfg_error(ctx, k, "unknown section '%s' (did you mean '%s'?)",
				                cfg_qn(ctx, k), suggest);
			else if (top)
				idem__cfg_error(ctx, k, "unknown section '%s'", cfg_qn(ctx, k));
			else if (suggest != NULL)
				idem__cfg_error(ctx, k,
				                "unknown key '%s' in '%s' (did you mean '%s'?)",
				                cfg_qn(ctx, k), path, suggest);
			else
				idem__cfg_error(ctx, k, "unknown key '%s' in '%s'", cfg_qn(ctx, k),
				                path);
			continue;
		}
		if (slots[i].key != NULL) {
			if (top)
				idem__cfg_error(
				        ctx, k,
				        "duplicate section '%s' (first defined at line %zu)",
				        sec->keys[i].name, slots[i].key->start_mark.line + 1);
			else
				idem__cfg_error(
				        ctx, k,
				        "duplicate key '%s' in '%s' (first defined at line %zu)",
				        sec->keys[i].name, path, slots[i].key->start_mark.line + 1);
			continue;
		}
		slots[i].key = k;
		slots[i].value = v;
		if (top)
			cfg_path(child, "%s", sec->keys[i].name);
		else
			cfg_path(child, "%s.%s", path, sec->keys[i].name);
		slots[i].ok = cfg_value(ctx, &sec->keys[i], v, child, target);
	}
	for (size_t i = 0; i < sec->n_keys; i++) {
		if (!sec->keys[i].required || slots[i].key != NULL)
			continue;
		slots[i].ok = false;
		if (ctx->overflow)
			continue;
		if (top)
			idem__cfg_error(ctx, node, "missing required section '%s'",
			                sec->keys[i].name);
		else
			idem__cfg_error(ctx, node, "missing required key '%s' in '%s'",
			                sec->keys[i].name, path);
	}
	for (size_t i = 0; i < sec->n_keys && !ctx->overflow; i++) {
		if (sec->keys[i].type == CFG_LIST && slots[i].value != NULL && slots[i].ok)
			cfg_check_unique(ctx, &sec->keys[i], slots[i].value, target);
	}
	if (sec->check != NULL && !ctx->overflow)
		sec->check(ctx, slots, target);
	return ctx->n_errs == errors;
}

/* Building. */

static void cfg_walk_document(struct cfg_ctx *ctx, yaml_parser_t *parser, const char *buf,
                              size_t len, const struct cfg_section *sec, void *target)
{
	yaml_document_t extra;
	yaml_node_t *root;
	size_t nodes;

	root = yaml_document_get_root_node(ctx->doc);
	if (root == NULL) {
		idem__cfg_error(ctx, NULL, "configuration is empty (no yaml document)");
		return;
	}
	/*
	 * A reader that stopped at the first document would silently ignore the rest. Empty ones
	 * (a bare "---" at the end) hold nothing to ignore.
	 */
	for (bool more = true; more;) {
		yaml_node_t *extra_root;

		if (!yaml_parser_load(parser, &extra)) {
			cfg_yaml_error(ctx, parser, buf, len);
			break;
		}
		extra_root = yaml_document_get_root_node(&extra);
		more = extra_root != NULL && cfg_is_null(extra_root);
		if (extra_root != NULL && !more)
			cfg_error_at(ctx, extra.start_mark.line + 1, extra.start_mark.column + 1,
			             "more than one yaml document");
		yaml_document_delete(&extra);
	}
	nodes = (size_t)(ctx->doc->nodes.top - ctx->doc->nodes.start);
	ctx->max_visits = nodes * CFG_VISITS_PER_NODE + 1000;
	cfg_section_walk(ctx, root, "", sec, target);
}

void idem__cfg_walk(struct cfg_ctx *ctx, const char *buf, size_t len, const struct cfg_section *sec,
                    void *target)
{
	yaml_parser_t parser;
	yaml_document_t doc;

	if (!yaml_parser_initialize(&parser)) {
		ctx->nomem = true;
		return;
	}
	yaml_parser_set_input_string(&parser, (const unsigned char *)(len ? buf : ""), len);
	if (yaml_parser_load(&parser, &doc)) {
		ctx->doc = &doc;
		cfg_walk_document(ctx, &parser, buf, len, sec, target);
		ctx->doc = NULL;
		yaml_document_delete(&doc);
	} else {
		cfg_yaml_error(ctx, &parser, buf, len);
	}
	yaml_parser_delete(&parser);
}

void idem__cfg_ctx_done(struct cfg_ctx *ctx)
{
	for (size_t i = 0; i < ctx->n_errs; i++)
		free(ctx->errs[i].text);
	free(ctx->errs);
	ctx->errs = NULL;
	ctx->n_errs = ctx->cap_errs = 0;
}
