/*
 * idem_jsonschema.c - compiling JSON schemas (idem_jsonschema.h).
 *
 * Who does what. json-c reads the schema text into a tree, which the compiled schema keeps:
 * property names and const/enum values point into it. Each subschema becomes a node (struct
 * js_node) that holds its keywords already read and checked, and each $ref is resolved once, to
 * its node. The module is four files sharing idem_jsonschema_int.h: this one the schema (the
 * text, the draft, the nodes, $refs, numbers), idem_jsonschema_keywords.c each keyword of a
 * subschema, idem_jsonschema_pattern.c patterns (ECMA-262 translated to POSIX extended regular
 * expressions for regcomp()), idem_jsonschema_check.c the walk of a document over the nodes,
 * which never reads the schema's text again.
 */
#include "idem_jsonschema.h"

#include <json-c/json.h>
#include <limits.h>
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_esc.h"
#include "idem_jsonschema_int.h"

/*
 * JSON nesting of a schema text json-c reads: deeper than the subschemas may nest, so that a
 * schema nested too deep is told so (below), rather than "not JSON"; it bounds the recursion
 * over const and enum values when checking.
 */
#define SCHEMA_JSON_DEPTH 256

/*
 * Messages.
 */

static const char *show_path(char *out, size_t outlen, const char *path)
{
	if (path[0] == '\0')
		return "/";
	idem_esc(out, outlen, path, strlen(path), 0);
	return out;
}

const char *idem__jsonschema_show(char *out, size_t outlen, const char *s, size_t len)
{
	idem_esc(out, outlen, s, len, IDEM_ESC_QUOTE);
	return out;
}

idem_status idem__jsonschema_fail(struct compiler *c, const char *path, const char *fmt, ...)
{
	char where[SHOW_PATH], what[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	return idem_error_set(c->err, IDEM_ERR_INVALID, "at %s: %s",
	                      show_path(where, sizeof(where), path), what);
}

static const char *json_type_word(json_object *j)
{
	switch (json_object_get_type(j)) {
	case json_type_null:
		return "null";
	case json_type_boolean:
		return "a boolean";
	case json_type_int:
	case json_type_double:
		return "a number";
	case json_type_string:
		return "a string";
	case json_type_array:
		return "an array";
	case json_type_object:
		return "an object";
	}
	return "a value";
}

/*
 * Numbers, as json-c holds them (the keywords' and the documents').
 */

bool idem__jsonschema_num(json_object *v, struct js_num *ret_n)
{
	int64_t i;
	uint64_t u;

	switch (json_object_get_type(v)) {
	case json_type_int:
		/* json-c holds an integer beyond INT64_MAX as a uint64, read as INT64_MAX */
		i = json_object_get_int64(v);
		u = i == INT64_MAX ? json_object_get_uint64(v) : 0;
		if (u > (uint64_t)INT64_MAX)
			*ret_n = (struct js_num){ .kind = JS_NUM_UINT, .u = u };
		else
			*ret_n = (struct js_num){ .kind = JS_NUM_INT, .i = i };
		return true;
	case json_type_double:
		*ret_n = (struct js_num){ .kind = JS_NUM_DOUBLE, .d = json_object_get_double(v) };
		return true;
	default:
		return false;
	}
}

/* An int64 against a double, exactly (no rounding of the integer to a double). */
static int cmp_int_double(int64_t i, double d)
{
	double t;
	int64_t ti;

	if (isnan(d))
		return 2;
	if (d >= 9223372036854775808.0)
		return -1;
	if (d < -9223372036854775808.0)
		return 1;
	t = trunc(d);
	ti = (int64_t)t;
	if (i != ti)
		return i < ti ? -1 : 1;
	return d > t ? -1 : d < t;
}

/* A uint64 beyond INT64_MAX against a double, exactly. */
static int cmp_uint_double(uint64_t u, double d)
{
	double t;
	uint64_t tu;

	if (isnan(d))
		return 2;
	if (d >= 18446744073709551616.0)
		return -1;
	if (d < 9223372036854775808.0)
		return 1;
	t = trunc(d);
	tu = (uint64_t)t;
	if (u != tu)
		return u < tu ? -1 : 1;
	return d > t ? -1 : d < t;
}

int idem__jsonschema_num_cmp(const struct js_num *a, const struct js_num *b)
{
	int r;

	if (a->kind == JS_NUM_DOUBLE && b->kind == JS_NUM_DOUBLE) {
		if (isnan(a->d) || isnan(b->d))
			return 2;
		return a->d < b->d ? -1 : a->d > b->d;
	}
	if (a->kind == JS_NUM_DOUBLE) {
		r = idem__jsonschema_num_cmp(b, a);
		return r == 2 ? 2 : -r;
	}
	switch (b->kind) {
	case JS_NUM_DOUBLE:
		return a->kind == JS_NUM_INT ? cmp_int_double(a->i, b->d)
		                             : cmp_uint_double(a->u, b->d);
	case JS_NUM_INT:
		if (a->kind == JS_NUM_UINT)
			return 1;
		return a->i < b->i ? -1 : a->i > b->i;
	case JS_NUM_UINT:
		if (a->kind == JS_NUM_INT)
			return -1;
		return a->u < b->u ? -1 : a->u > b->u;
	}
	return 2;
}

/*
 * Nodes, their paths and the map from json-c objects to nodes.
 */

static void node_free(struct js_node *n)
{
	free(n->path);
	free(n->prefix);
	free(n->props);
	free(n->patprops);
	free(n->dep_required);
	free(n->dep_schemas);
	free(n->all_of);
	free(n->any_of);
	free(n->one_of);
	free(n);
}

static void schema_free(idem_jsonschema *s)
{
	for (size_t i = 0; i < s->n_nodes; i++)
		node_free(s->nodes[i]);
	free(s->nodes);
	for (size_t i = 0; i < s->n_patterns; i++) {
		regfree(&s->patterns[i]->re);
		free(s->patterns[i]);
	}
	free(s->patterns);
	if (s->loc != (locale_t)0)
		freelocale(s->loc);
	json_object_put(s->json);
	free(s);
}

static size_t map_hash(const json_object *j, size_t cap)
{
	uint64_t h = (uint64_t)(uintptr_t)j * UINT64_C(0x9e3779b97f4a7c15);

	return (size_t)(h >> 32) & (cap - 1);
}

static struct js_node *map_get(const struct compiler *c, const json_object *j)
{
	if (c->map_cap == 0)
		return NULL;
	for (size_t i = map_hash(j, c->map_cap);; i = (i + 1) & (c->map_cap - 1)) {
		if (c->map[i].key == NULL)
			return NULL;
		if (c->map[i].key == j)
			return c->map[i].node;
	}
}

static bool map_put(struct compiler *c, json_object *j, struct js_node *node)
{
	if (2 * (c->map_n + 1) > c->map_cap) {
		size_t cap = c->map_cap ? 2 * c->map_cap : 64;
		struct map_slot *m = calloc(cap, sizeof(*m));

		if (m == NULL)
			return false;
		for (size_t k = 0; k < c->map_cap; k++) {
			size_t i = map_hash(c->map[k].key, cap);

			if (c->map[k].key == NULL)
				continue;
			while (m[i].key != NULL)
				i = (i + 1) & (cap - 1);
			m[i] = c->map[k];
		}
		free(c->map);
		c->map = m;
		c->map_cap = cap;
	}
	size_t i = map_hash(j, c->map_cap);

	while (c->map[i].key != NULL)
		i = (i + 1) & (c->map_cap - 1);
	c->map[i].key = j;
	c->map[i].node = node;
	c->map_n++;
	return true;
}

/* Appends @tok to @b as an RFC 6901 reference token: '~' as "~0", '/' as "~1". */
static idem_status append_token(struct idem_buf *b, const char *tok)
{
	for (const char *p = tok; *p != '\0'; p++) {
		idem_status r;

		if (*p == '~')
			r = idem_buf_append_str(b, "~0");
		else if (*p == '/')
			r = idem_buf_append_str(b, "~1");
		else
			r = idem_buf_append(b, p, 1);
		if (r != IDEM_OK)
			return r;
	}
	return IDEM_OK;
}

/*
 * @returns the pointer @path/@kw[/@name][/@index] (@name NULL: no name; @index SIZE_MAX: no
 * index), allocated; NULL on out of memory.
 */
char *idem__jsonschema_child_path(const char *path, const char *kw, const char *name, size_t index)
{
	struct idem_buf b = { 0 };

	if (idem_buf_append_str(&b, path) != IDEM_OK || idem_buf_append_str(&b, "/") != IDEM_OK ||
	    append_token(&b, kw) != IDEM_OK)
		goto out_nomem;
	if (name != NULL &&
	    (idem_buf_append_str(&b, "/") != IDEM_OK || append_token(&b, name) != IDEM_OK))
		goto out_nomem;
	if (index != SIZE_MAX && idem_buf_printf(&b, "/%zu", index) != IDEM_OK)
		goto out_nomem;
	return b.data;

out_nomem:
	idem_buf_done(&b);
	return NULL;
}

/*
 * Subschemas.
 */

/* A new node for @j at @path, which it owns from now on (freed here on failure). */
static struct js_node *node_new(struct compiler *c, json_object *j, char *path)
{
	idem_jsonschema *s = c->s;
	struct js_node *n, **nodes;

	nodes = idem__jsonschema_grow(s->nodes, &s->cap_nodes, s->n_nodes, sizeof(*nodes));
	if (nodes == NULL)
		goto out_free_path;
	s->nodes = nodes;
	n = calloc(1, sizeof(*n));
	if (n == NULL)
		goto out_free_path;
	n->path = path;
	n->boolean = -1;
	n->max_length = n->max_items = n->max_props = n->max_contains = JS_NO_MAX;
	n->min_contains = 1;
	s->nodes[s->n_nodes++] = n;
	if (!map_put(c, j, n))
		return NULL; /* n is freed with the schema */
	return n;

out_free_path:
	free(path);
	return NULL;
}

/* Compiles @j at @path (which it owns from now on), unless it was compiled already. */
idem_status idem__jsonschema_compile(struct compiler *c, json_object *j, char *path, int depth,
                                     struct js_node **ret_node)
{
	struct js_node *n = map_get(c, j);
	idem_status r;

	if (n != NULL) {
		free(path);
		*ret_node = n;
		return IDEM_OK;
	}
	if (depth > IDEM_JSONSCHEMA_MAX_DEPTH) {
		r = idem__jsonschema_fail(c, path, "schema nested deeper than %d levels",
		                          IDEM_JSONSCHEMA_MAX_DEPTH);
		free(path);
		return r;
	}
	if (!json_object_is_type(j, json_type_object) &&
	    !json_object_is_type(j, json_type_boolean)) {
		r = idem__jsonschema_fail(c, path,
		                          "a schema must be an object or a boolean, not %s",
		                          json_type_word(j));
		free(path);
		return r;
	}
	n = node_new(c, j, path);
	if (n == NULL)
		return idem_error_nomem(c->err);
	if (json_object_is_type(j, json_type_boolean))
		n->boolean = json_object_get_boolean(j);
	else if ((r = idem__jsonschema_compile_object(c, n, j, depth)) != IDEM_OK)
		return r;
	*ret_node = n;
	return IDEM_OK;
}

/*
 * $refs.
 */

/* Whether @ref[0..@n), the part of a $ref before '#', names this document: the root's $id. */
static bool same_document(const struct compiler *c, const char *ref, size_t n)
{
	size_t id_len, base;

	if (c->root_id == NULL)
		return false;
	id_len = strcspn(c->root_id, "#");
	if (n == id_len && memcmp(ref, c->root_id, n) == 0)
		return true;
	for (base = id_len; base > 0 && c->root_id[base - 1] != '/'; base--)
		;
	/* relative to the $id: its last segment */
	return n == id_len - base && memcmp(ref, c->root_id + base, n) == 0;
}

/*
 * @s with its %-escapes decoded (%00 too: *@ret_len counts it), allocated; *@ret_bad when one
 * is not valid.
 */
static char *percent_decode(const char *s, size_t *ret_len, bool *ret_bad)
{
	char *out = malloc(strlen(s) + 1), *o = out;

	*ret_bad = false;
	if (out == NULL)
		return NULL;
	for (; *s != '\0'; s++) {
		if (*s != '%') {
			*o++ = *s;
			continue;
		}
		if (idem_hex_digit(s[1]) < 0 || idem_hex_digit(s[2]) < 0) {
			*ret_bad = true;
			break;
		}
		*o++ = (char)(idem_hex_digit(s[1]) * 16 + idem_hex_digit(s[2]));
		s += 2;
	}
	*o = '\0';
	*ret_len = (size_t)(o - out);
	return out;
}

/*
 * The value at the RFC 6901 pointer @ptr[0..@len) (may hold NULs from %00) in @root.
 * @returns false when it names nothing; *@ret_v is NULL for JSON null.
 */
static bool pointer_walk(json_object *root, const char *ptr, size_t len, json_object **ret_v)
{
	json_object *cur = root;
	size_t i = 0;
	char *tok = malloc(len + 1);
	bool found = false;

	if (tok == NULL)
		return false;
	while (i < len) {
		size_t n = 0;

		for (i++; i < len && ptr[i] != '/'; i++) {
			char ch = ptr[i];

			if (ch == '~') {
				if (i + 1 >= len || (ptr[i + 1] != '0' && ptr[i + 1] != '1'))
					goto out_free_tok;
				ch = ptr[++i] == '0' ? '~' : '/';
			}
			if (ch == '\0')
				goto out_free_tok;
			tok[n++] = ch;
		}
		tok[n] = '\0';
		if (json_object_is_type(cur, json_type_object)) {
			if (!json_object_object_get_ex(cur, tok, &cur))
				goto out_free_tok;
		} else if (json_object_is_type(cur, json_type_array)) {
			size_t idx = 0;

			if (n == 0 || (n > 1 && tok[0] == '0'))
				goto out_free_tok;
			for (size_t d = 0; d < n; d++) {
				if (tok[d] < '0' || tok[d] > '9' || idx > SIZE_MAX / 10 - 1)
					goto out_free_tok;
				idx = idx * 10 + (size_t)(tok[d] - '0');
			}
			if (idx >= json_object_array_length(cur))
				goto out_free_tok;
			cur = json_object_array_get_idx(cur, idx);
		} else {
			goto out_free_tok;
		}
	}
	*ret_v = cur;
	found = true;

out_free_tok:
	free(tok);
	return found;
}

static idem_status resolve(struct compiler *c, const struct pending_ref *p)
{
	const char *hash = strchr(p->ref, '#');
	size_t base = hash != NULL ? (size_t)(hash - p->ref) : strlen(p->ref);
	char *where = idem__jsonschema_child_path(p->node->path, "$ref", NULL, SIZE_MAX),
	     *ptr = NULL, show[SHOW_TEXT];
	json_object *target;
	size_t ptr_len;
	bool bad;
	idem_status r;

	if (where == NULL)
		return idem_error_nomem(c->err);
	idem__jsonschema_show(show, sizeof(show), p->ref, strlen(p->ref));
	if (base > 0 && !same_document(c, p->ref, base)) {
		r = idem__jsonschema_fail(c, where,
		                          "remote reference '%s' is not one idemd can check", show);
		goto out_free;
	}
	ptr = percent_decode(hash != NULL ? hash + 1 : "", &ptr_len, &bad);
	if (ptr == NULL) {
		r = idem_error_nomem(c->err);
		goto out_free;
	}
	if (bad) {
		r = idem__jsonschema_fail(c, where, "'%s' is not a valid URI fragment", show);
		goto out_free;
	}
	if (ptr[0] != '\0' && ptr[0] != '/') {
		r = idem__jsonschema_fail(
		        c, where, "'%s' names an anchor, which is not one idemd can check", show);
		goto out_free;
	}
	if (!pointer_walk(c->s->json, ptr, ptr_len, &target)) {
		r = idem__jsonschema_fail(c, where, "'%s' names nothing in the schema", show);
		goto out_free;
	}
	r = idem__jsonschema_compile(c, target, ptr, 0, &p->node->ref);
	ptr = NULL; /* owned by the node now */

out_free:
	free(ptr);
	free(where);
	return r;
}

/*
 * The schema.
 */

/* The drafts the root's $schema says the schema is read by (idem_jsonschema.h). */
static idem_status read_draft(struct compiler *c, json_object *root)
{
	json_object *v;
	const char *uri;

	c->drafts = DALL;
	if (!json_object_is_type(root, json_type_object) ||
	    !json_object_object_get_ex(root, "$schema", &v))
		return IDEM_OK;
	if (!json_object_is_type(v, json_type_string))
		return idem__jsonschema_fail(c, "", "'$schema' must be a string");
	uri = json_object_get_string(v);
	if (strstr(uri, "/draft/2020-12/") != NULL)
		c->drafts = D2020;
	else if (strstr(uri, "/draft-07/") != NULL || strstr(uri, "/draft-06/") != NULL ||
	         strstr(uri, "/draft-04/") != NULL)
		c->drafts = D7;
	return IDEM_OK;
}

static idem_status parse(const char *text, size_t len, json_object **ret_root, idem_error *err)
{
	const char *nul = memchr(text, '\0', len);
	json_tokener *tok;
	json_object *root;
	enum json_tokener_error jerr;
	size_t at;

	if (len > INT_MAX - 1)
		return idem_error_set(err, IDEM_ERR_INVALID, "not JSON: %zu bytes is too long",
		                      len);
	if (nul != NULL)
		return idem_error_set(err, IDEM_ERR_INVALID, "not JSON: NUL byte at byte %zu",
		                      (size_t)(nul - text));
	tok = json_tokener_new_ex(SCHEMA_JSON_DEPTH);
	if (tok == NULL)
		return idem_error_nomem(err);
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	root = json_tokener_parse_ex(tok, text, (int)len);
	jerr = json_tokener_get_error(tok);
	at = json_tokener_get_parse_end(tok);
	if (root == NULL && jerr == json_tokener_continue) {
		/* a number, or text cut short: the NUL tells json-c the text has ended */
		root = json_tokener_parse_ex(tok, "", 1);
		jerr = json_tokener_get_error(tok);
		at = len;
	}
	json_tokener_free(tok);
	if (jerr != json_tokener_success) {
		json_object_put(root);
		return idem_error_set(err, IDEM_ERR_INVALID, "not JSON: %s at byte %zu",
		                      json_tokener_error_desc(jerr), at);
	}
	for (; at < len; at++) {
		if (strchr(" \t\r\n", text[at]) == NULL) {
			json_object_put(root);
			return idem_error_set(err, IDEM_ERR_INVALID,
			                      "not JSON: text after the value at byte %zu", at);
		}
	}
	*ret_root = root;
	return IDEM_OK;
}

idem_status idem_jsonschema_new(const char *text, size_t len, idem_jsonschema **ret_schema,
                                idem_error *err)
{
	struct compiler c = { .err = err };
	idem_jsonschema *s;
	char *path;
	idem_status r;

	s = calloc(1, sizeof(*s));
	if (s == NULL)
		return idem_error_nomem(err);
	atomic_init(&s->refs, 1);
	c.s = s;
	r = parse(text, len, &s->json, err);
	if (r != IDEM_OK)
		goto out_free_schema;
	r = read_draft(&c, s->json);
	if (r != IDEM_OK)
		goto out_free_schema;
	path = strdup("");
	if (path == NULL) {
		r = idem_error_nomem(err);
		goto out_free_schema;
	}
	r = idem__jsonschema_compile(&c, s->json, path, 0, &s->root);
	/* resolving may compile more nodes (a pointer into an unknown keyword), and more $refs */
	for (size_t i = 0; r == IDEM_OK && i < c.n_refs; i++) {
		struct pending_ref p = c.refs[i];

		r = resolve(&c, &p);
	}
	free(c.map);
	free(c.refs);
	if (r != IDEM_OK)
		goto out_free_schema;
	*ret_schema = s;
	return IDEM_OK;

out_free_schema:
	schema_free(s);
	return r;
}

idem_jsonschema *idem_jsonschema_ref(idem_jsonschema *s)
{
	atomic_fetch_add(&s->refs, 1);
	return s;
}

void idem_jsonschema_unref(idem_jsonschema *s)
{
	if (s != NULL && atomic_fetch_sub(&s->refs, 1) == 1)
		schema_free(s);
}
