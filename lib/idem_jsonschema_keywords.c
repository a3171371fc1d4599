/*
 * idem_jsonschema_keywords.c - the keywords of a subschema, each read into its node and checked
 * (idem_jsonschema.h lists them; idem_jsonschema.c compiles the schema around them).
 */
#include <json-c/json.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "idem_jsonschema_int.h"

/* What a subschema's keywords leave for each other: the forms of "items". */
struct kw_state {
	struct js_node *node;
	int depth;
	struct js_node *items, *additional_items;
	struct js_node **tuple, **prefix_items; /* "items" as an array; "prefixItems" */
	size_t n_tuple, n_prefix_items;
	bool has_tuple, has_prefix_items;
};

static idem_status compile_child(struct compiler *c, struct kw_state *k, const char *kw,
                                 const char *name, size_t index, json_object *j,
                                 struct js_node **ret_node)
{
	char *path = idem__jsonschema_child_path(k->node->path, kw, name, index);

	if (path == NULL)
		return idem_error_nomem(c->err);
	return idem__jsonschema_compile(c, j, path, k->depth + 1, ret_node);
}

/* Compiles the array @v of schemas (non-empty unless @may_be_empty) into *@ret_nodes. */
static idem_status compile_list(struct compiler *c, struct kw_state *k, const char *kw,
                                json_object *v, bool may_be_empty, struct js_node ***ret_nodes,
                                size_t *ret_n)
{
	size_t n;
	struct js_node **nodes;

	if (!json_object_is_type(v, json_type_array) ||
	    (json_object_array_length(v) == 0 && !may_be_empty))
		return idem__jsonschema_fail(c, k->node->path,
		                             "'%s' must be a non-empty array of schemas", kw);
	n = json_object_array_length(v);
	nodes = calloc(n ? n : 1, sizeof(*nodes));
	if (nodes == NULL)
		return idem_error_nomem(c->err);
	for (size_t i = 0; i < n; i++) {
		idem_status r = compile_child(c, k, kw, NULL, i, json_object_array_get_idx(v, i),
		                              &nodes[i]);

		if (r != IDEM_OK) {
			free(nodes);
			return r;
		}
	}
	*ret_nodes = nodes;
	*ret_n = n;
	return IDEM_OK;
}

/*
 * Keywords. Each reads its value into the node, or says why it cannot.
 */

typedef idem_status (*kw_fn)(struct compiler *c, struct kw_state *k, const char *kw,
                             json_object *v);

static idem_status pattern_at(struct compiler *c, const char *where, const char *src, size_t len,
                              struct js_pattern **ret_pat)
{
	char why[200], show[SHOW_TEXT];
	idem_status r = idem__jsonschema_pattern_new(c->s, src, len, ret_pat, why, sizeof(why));

	if (r == IDEM_ERR_INVALID)
		return idem__jsonschema_fail(c, where, "'%s' cannot be read: %s",
		                             idem__jsonschema_show(show, sizeof(show), src, len),
		                             why);
	if (r != IDEM_OK)
		return idem_error_nomem(c->err);
	return IDEM_OK;
}

static bool is_string_array(json_object *v)
{
	if (!json_object_is_type(v, json_type_array))
		return false;
	for (size_t i = 0; i < json_object_array_length(v); i++) {
		if (!json_object_is_type(json_object_array_get_idx(v, i), json_type_string))
			return false;
	}
	return true;
}

static unsigned type_bit(json_object *v)
{
	const char *name = json_object_get_string(v);

	for (unsigned i = 0; i < IDEM_ARRAY_SIZE(idem__jsonschema_types); i++) {
		if (strcmp(name, idem__jsonschema_types[i]) == 0)
			return 1u << i;
	}
	return 0;
}

static idem_status kw_type(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	struct js_node *n = k->node;
	bool list = json_object_is_type(v, json_type_array);
	size_t count = list ? json_object_array_length(v) : 1;
	char show[SHOW_TEXT];

	(void)kw;
	if (list ? count == 0 || !is_string_array(v) : !json_object_is_type(v, json_type_string))
		return idem__jsonschema_fail(c, n->path,
		                             "'type' must be a string or an array of strings");
	for (size_t i = 0; i < count; i++) {
		json_object *t = list ? json_object_array_get_idx(v, i) : v;
		unsigned bit = type_bit(t);

		if (bit == 0)
			return idem__jsonschema_fail(
			        c, n->path, "'type' names unknown type '%s'",
			        idem__jsonschema_show(show, sizeof(show), json_object_get_string(t),
			                              (size_t)json_object_get_string_len(t)));
		n->types |= bit;
	}
	return IDEM_OK;
}

static idem_status kw_enum(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	(void)kw;
	if (!json_object_is_type(v, json_type_array))
		return idem__jsonschema_fail(c, k->node->path, "'enum' must be an array");
	k->node->enum_values = v;
	return IDEM_OK;
}

static idem_status kw_const(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	(void)c;
	(void)kw;
	k->node->konst = v;
	k->node->has_const = true;
	return IDEM_OK;
}

/* multipleOf, maximum, exclusiveMaximum, minimum, exclusiveMinimum */
static idem_status kw_limit(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	struct js_node *n = k->node;
	struct js_num num, zero = { .kind = JS_NUM_INT };

	if (json_object_is_type(v, json_type_boolean) && strncmp(kw, "exclusive", 9) == 0)
		return idem__jsonschema_fail(
		        c, n->path, "boolean '%s' is draft-04's form, not one idemd can check", kw);
	if (!idem__jsonschema_num(v, &num))
		return idem__jsonschema_fail(c, n->path, "'%s' must be a number", kw);
	if (strcmp(kw, "multipleOf") == 0) {
		if (idem__jsonschema_num_cmp(&num, &zero) != 1)
			return idem__jsonschema_fail(c, n->path,
			                             "'multipleOf' must be greater than 0");
		n->multiple = num;
		n->has_multiple = true;
	} else if (strcmp(kw, "maximum") == 0) {
		n->max = num;
		n->has_max = true;
	} else if (strcmp(kw, "exclusiveMaximum") == 0) {
		n->xmax = num;
		n->has_xmax = true;
	} else if (strcmp(kw, "minimum") == 0) {
		n->min = num;
		n->has_min = true;
	} else {
		n->xmin = num;
		n->has_xmin = true;
	}
	return IDEM_OK;
}

/* maxLength, minLength, maxItems, minItems, maxProperties, minProperties, max/minContains */
static idem_status kw_count(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	static const struct {
		const char *name;
		size_t off;
	} counts[] = {
		{ "maxLength", offsetof(struct js_node, max_length) },
		{ "minLength", offsetof(struct js_node, min_length) },
		{ "maxItems", offsetof(struct js_node, max_items) },
		{ "minItems", offsetof(struct js_node, min_items) },
		{ "maxProperties", offsetof(struct js_node, max_props) },
		{ "minProperties", offsetof(struct js_node, min_props) },
		{ "maxContains", offsetof(struct js_node, max_contains) },
		{ "minContains", offsetof(struct js_node, min_contains) },
	};
	struct js_num num;
	uint64_t count;

	if (!idem__jsonschema_num(v, &num) || (num.kind == JS_NUM_INT && num.i < 0) ||
	    (num.kind == JS_NUM_DOUBLE && !(num.d >= 0 && num.d == floor(num.d))))
		return idem__jsonschema_fail(c, k->node->path,
		                             "'%s' must be a non-negative integer", kw);
	if (num.kind == JS_NUM_INT)
		count = (uint64_t)num.i;
	else if (num.kind == JS_NUM_UINT)
		count = num.u;
	else
		count = num.d >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)num.d;
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(counts); i++) {
		if (strcmp(kw, counts[i].name) == 0)
			memcpy((char *)k->node + counts[i].off, &count, sizeof(count));
	}
	return IDEM_OK;
}

static idem_status kw_pattern(struct compiler *c, struct kw_state *k, const char *kw,
                              json_object *v)
{
	char *where;
	idem_status r;

	if (!json_object_is_type(v, json_type_string))
		return idem__jsonschema_fail(c, k->node->path, "'pattern' must be a string");
	where = idem__jsonschema_child_path(k->node->path, kw, NULL, SIZE_MAX);
	if (where == NULL)
		return idem_error_nomem(c->err);
	r = pattern_at(c, where, json_object_get_string(v), (size_t)json_object_get_string_len(v),
	               &k->node->pattern);
	free(where);
	return r;
}

static idem_status kw_unique(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	(void)kw;
	if (!json_object_is_type(v, json_type_boolean))
		return idem__jsonschema_fail(c, k->node->path, "'uniqueItems' must be a boolean");
	k->node->unique = json_object_get_boolean(v);
	return IDEM_OK;
}

static idem_status kw_items(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	if (!json_object_is_type(v, json_type_array))
		return compile_child(c, k, kw, NULL, SIZE_MAX, v, &k->items);
	if (!(c->drafts & (D7 | D2019)))
		return idem__jsonschema_fail(
		        c, k->node->path,
		        "'items' must be a schema in draft 2020-12 (an array is draft-07's form: see 'prefixItems')");
	k->has_tuple = true;
	return compile_list(c, k, kw, v, true, &k->tuple, &k->n_tuple);
}

static idem_status kw_prefix_items(struct compiler *c, struct kw_state *k, const char *kw,
                                   json_object *v)
{
	k->has_prefix_items = true;
	return compile_list(c, k, kw, v, false, &k->prefix_items, &k->n_prefix_items);
}

/* A keyword whose value is one schema. */
static idem_status kw_schema(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	struct js_node *n = k->node, **slot;

	if (strcmp(kw, "additionalItems") == 0)
		slot = &k->additional_items;
	else if (strcmp(kw, "contains") == 0)
		slot = &n->contains;
	else if (strcmp(kw, "additionalProperties") == 0)
		slot = &n->additional;
	else if (strcmp(kw, "propertyNames") == 0)
		slot = &n->names;
	else if (strcmp(kw, "not") == 0)
		slot = &n->not_;
	else if (strcmp(kw, "if") == 0)
		slot = &n->if_;
	else if (strcmp(kw, "then") == 0)
		slot = &n->then_;
	else
		slot = &n->else_;
	return compile_child(c, k, kw, NULL, SIZE_MAX, v, slot);
}

/* allOf, anyOf, oneOf */
static idem_status kw_list(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	struct js_node *n = k->node;

	if (strcmp(kw, "allOf") == 0)
		return compile_list(c, k, kw, v, false, &n->all_of, &n->n_all_of);
	if (strcmp(kw, "anyOf") == 0)
		return compile_list(c, k, kw, v, false, &n->any_of, &n->n_any_of);
	return compile_list(c, k, kw, v, false, &n->one_of, &n->n_one_of);
}

static idem_status kw_required(struct compiler *c, struct kw_state *k, const char *kw,
                               json_object *v)
{
	(void)kw;
	if (!is_string_array(v))
		return idem__jsonschema_fail(c, k->node->path,
		                             "'required' must be an array of strings");
	k->node->required = v;
	return IDEM_OK;
}

static int prop_cmp(const void *a, const void *b)
{
	const struct js_prop *x = a, *y = b;

	return strcmp(x->name, y->name);
}

static idem_status kw_properties(struct compiler *c, struct kw_state *k, const char *kw,
                                 json_object *v)
{
	struct js_node *n = k->node;
	struct json_object_iterator it, end;

	if (!json_object_is_type(v, json_type_object))
		return idem__jsonschema_fail(c, n->path, "'%s' must be an object of schemas", kw);
	n->props = calloc((size_t)json_object_object_length(v) + 1, sizeof(*n->props));
	if (n->props == NULL)
		return idem_error_nomem(c->err);
	it = json_object_iter_begin(v);
	end = json_object_iter_end(v);
	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		struct js_prop *p = &n->props[n->n_props];
		idem_status r;

		p->name = json_object_iter_peek_name(&it);
		r = compile_child(c, k, kw, p->name, SIZE_MAX, json_object_iter_peek_value(&it),
		                  &p->node);
		if (r != IDEM_OK)
			return r;
		n->n_props++;
	}
	qsort(n->props, n->n_props, sizeof(*n->props), prop_cmp);
	return IDEM_OK;
}

static idem_status kw_pattern_properties(struct compiler *c, struct kw_state *k, const char *kw,
                                         json_object *v)
{
	struct js_node *n = k->node;
	struct json_object_iterator it, end;

	if (!json_object_is_type(v, json_type_object))
		return idem__jsonschema_fail(c, n->path, "'%s' must be an object of schemas", kw);
	n->patprops = calloc((size_t)json_object_object_length(v) + 1, sizeof(*n->patprops));
	if (n->patprops == NULL)
		return idem_error_nomem(c->err);
	it = json_object_iter_begin(v);
	end = json_object_iter_end(v);
	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		struct js_patprop *p = &n->patprops[n->n_patprops];
		const char *name = json_object_iter_peek_name(&it);
		char *where = idem__jsonschema_child_path(n->path, kw, name, SIZE_MAX);
		idem_status r;

		if (where == NULL)
			return idem_error_nomem(c->err);
		r = pattern_at(c, where, name, strlen(name), &p->pat);
		free(where);
		if (r == IDEM_OK)
			r = compile_child(c, k, kw, name, SIZE_MAX,
			                  json_object_iter_peek_value(&it), &p->node);
		if (r != IDEM_OK)
			return r;
		n->n_patprops++;
	}
	return IDEM_OK;
}

/*
 * dependentRequired (@schemas false), dependentSchemas (@schemas true) and draft-07's
 * dependencies (either, member by member: @schemas ignored).
 */
static idem_status dependencies(struct compiler *c, struct kw_state *k, const char *kw,
                                json_object *v, bool draft7, bool schemas)
{
	struct js_node *n = k->node;
	size_t more =
	        json_object_is_type(v, json_type_object) ? (size_t)json_object_object_length(v) : 0;
	struct json_object_iterator it, end;
	struct js_dep *d;

	if (!json_object_is_type(v, json_type_object))
		return idem__jsonschema_fail(c, n->path, "'%s' must be an object", kw);
	d = realloc(n->dep_required, (n->n_dep_required + more + 1) * sizeof(*d));
	if (d == NULL)
		return idem_error_nomem(c->err);
	n->dep_required = d;
	d = realloc(n->dep_schemas, (n->n_dep_schemas + more + 1) * sizeof(*d));
	if (d == NULL)
		return idem_error_nomem(c->err);
	n->dep_schemas = d;
	it = json_object_iter_begin(v);
	end = json_object_iter_end(v);
	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		const char *name = json_object_iter_peek_name(&it);
		json_object *dv = json_object_iter_peek_value(&it);
		idem_status r;

		if (draft7 ? json_object_is_type(dv, json_type_array) : !schemas) {
			if (!is_string_array(dv))
				return idem__jsonschema_fail(c, n->path,
				                             "'%s' must hold arrays of strings%s",
				                             kw, draft7 ? " or schemas" : "");
			d = &n->dep_required[n->n_dep_required++];
			*d = (struct js_dep){ .name = name, .names = dv };
			continue;
		}
		d = &n->dep_schemas[n->n_dep_schemas];
		*d = (struct js_dep){ .name = name };
		r = compile_child(c, k, kw, name, SIZE_MAX, dv, &d->node);
		if (r != IDEM_OK)
			return r;
		n->n_dep_schemas++;
	}
	return IDEM_OK;
}

static idem_status kw_dependent_required(struct compiler *c, struct kw_state *k, const char *kw,
                                         json_object *v)
{
	return dependencies(c, k, kw, v, false, false);
}

static idem_status kw_dependent_schemas(struct compiler *c, struct kw_state *k, const char *kw,
                                        json_object *v)
{
	return dependencies(c, k, kw, v, false, true);
}

static idem_status kw_dependencies(struct compiler *c, struct kw_state *k, const char *kw,
                                   json_object *v)
{
	return dependencies(c, k, kw, v, true, false);
}

/* $defs, definitions: compiled where they are, for $refs to find (and their errors told). */
static idem_status kw_defs(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	struct json_object_iterator it, end;

	if (!json_object_is_type(v, json_type_object))
		return idem__jsonschema_fail(c, k->node->path, "'%s' must be an object of schemas",
		                             kw);
	it = json_object_iter_begin(v);
	end = json_object_iter_end(v);
	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		struct js_node *def;
		idem_status r = compile_child(c, k, kw, json_object_iter_peek_name(&it), SIZE_MAX,
		                              json_object_iter_peek_value(&it), &def);

		if (r != IDEM_OK)
			return r;
	}
	return IDEM_OK;
}

static idem_status kw_ref(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	struct pending_ref *refs;

	(void)kw;
	if (!json_object_is_type(v, json_type_string))
		return idem__jsonschema_fail(c, k->node->path, "'$ref' must be a string");
	refs = idem__jsonschema_grow(c->refs, &c->cap_refs, c->n_refs, sizeof(*refs));
	if (refs == NULL)
		return idem_error_nomem(c->err);
	c->refs = refs;
	c->refs[c->n_refs++] = (struct pending_ref){ k->node, json_object_get_string(v) };
	return IDEM_OK;
}

static idem_status kw_id(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	(void)kw;
	if (k->node->path[0] != '\0')
		return idem__jsonschema_fail(
		        c, k->node->path,
		        "'$id' below the root (a schema resource of its own, for remote references) is not one idemd can check");
	if (!json_object_is_type(v, json_type_string))
		return idem__jsonschema_fail(c, k->node->path, "'$id' must be a string");
	c->root_id = json_object_get_string(v);
	return IDEM_OK;
}

static idem_status kw_refuse(struct compiler *c, struct kw_state *k, const char *kw, json_object *v)
{
	(void)v;
	return idem__jsonschema_fail(c, k->node->path, "keyword '%s' is not one idemd can check",
	                             kw);
}

/*
 * Every keyword of the drafts, with the drafts it belongs to: a keyword of no draft the schema
 * is read by is not a keyword there, and is ignored, as is every name not listed. fn NULL: an
 * annotation, ignored.
 */
static const struct keyword {
	const char *name;
	unsigned drafts;
	kw_fn fn;
} keywords[] = {
	{ "$schema", DALL, NULL },
	{ "$id", DALL, kw_id },
	{ "$ref", DALL, kw_ref },
	{ "$defs", DALL, kw_defs },
	{ "definitions", DALL, kw_defs },
	{ "$comment", DALL, NULL },
	{ "$vocabulary", DALL, NULL },
	{ "title", DALL, NULL },
	{ "description", DALL, NULL },
	{ "default", DALL, NULL },
	{ "examples", DALL, NULL },
	{ "readOnly", DALL, NULL },
	{ "writeOnly", DALL, NULL },
	{ "deprecated", DALL, NULL },
	{ "format", DALL, NULL },
	{ "contentEncoding", DALL, NULL },
	{ "contentMediaType", DALL, NULL },
	{ "contentSchema", DALL, NULL },
	{ "type", DALL, kw_type },
	{ "enum", DALL, kw_enum },
	{ "const", DALL, kw_const },
	{ "multipleOf", DALL, kw_limit },
	{ "maximum", DALL, kw_limit },
	{ "exclusiveMaximum", DALL, kw_limit },
	{ "minimum", DALL, kw_limit },
	{ "exclusiveMinimum", DALL, kw_limit },
	{ "maxLength", DALL, kw_count },
	{ "minLength", DALL, kw_count },
	{ "pattern", DALL, kw_pattern },
	{ "maxItems", DALL, kw_count },
	{ "minItems", DALL, kw_count },
	{ "uniqueItems", DALL, kw_unique },
	{ "items", DALL, kw_items },
	{ "prefixItems", D2020, kw_prefix_items },
	{ "additionalItems", D7 | D2019, kw_schema },
	{ "contains", DALL, kw_schema },
	{ "maxContains", D2019 | D2020, kw_count },
	{ "minContains", D2019 | D2020, kw_count },
	{ "maxProperties", DALL, kw_count },
	{ "minProperties", DALL, kw_count },
	{ "required", DALL, kw_required },
	{ "properties", DALL, kw_properties },
	{ "patternProperties", DALL, kw_pattern_properties },
	{ "additionalProperties", DALL, kw_schema },
	{ "propertyNames", DALL, kw_schema },
	{ "dependentRequired", D2019 | D2020, kw_dependent_required },
	{ "dependentSchemas", D2019 | D2020, kw_dependent_schemas },
	{ "dependencies", D7, kw_dependencies },
	{ "allOf", DALL, kw_list },
	{ "anyOf", DALL, kw_list },
	{ "oneOf", DALL, kw_list },
	{ "not", DALL, kw_schema },
	{ "if", DALL, kw_schema },
	{ "then", DALL, kw_schema },
	{ "else", DALL, kw_schema },
	/* refused */
	{ "unevaluatedProperties", D2019 | D2020, kw_refuse },
	{ "unevaluatedItems", D2019 | D2020, kw_refuse },
	{ "$dynamicRef", D2020, kw_refuse },
	{ "$dynamicAnchor", D2020, kw_refuse },
	{ "$recursiveRef", D2019, kw_refuse },
	{ "$recursiveAnchor", D2019, kw_refuse },
	{ "$anchor", D2019 | D2020, kw_refuse },
	{ "divisibleBy", DALL, kw_refuse }, /* draft-03's, which asserted */
	{ "disallow", DALL, kw_refuse },
	{ "extends", DALL, kw_refuse },
};

static const struct keyword *keyword_find(const char *name)
{
	for (size_t i = 0; i < IDEM_ARRAY_SIZE(keywords); i++) {
		if (strcmp(keywords[i].name, name) == 0)
			return &keywords[i];
	}
	return NULL;
}

idem_status idem__jsonschema_compile_object(struct compiler *c, struct js_node *n, json_object *j,
                                            int depth)
{
	struct kw_state k = { .node = n, .depth = depth };
	struct json_object_iterator it = json_object_iter_begin(j), end = json_object_iter_end(j);
	json_object *ref;
	/* draft-07 ignores what is beside "$ref" (but definitions are still found by pointers) */
	bool ref_only = c->drafts == D7 && json_object_object_get_ex(j, "$ref", &ref);
	idem_status r = IDEM_OK;

	for (; !json_object_iter_equal(&it, &end); json_object_iter_next(&it)) {
		const char *name = json_object_iter_peek_name(&it);
		const struct keyword *kwd = keyword_find(name);

		if (kwd == NULL || kwd->fn == NULL || !(kwd->drafts & c->drafts))
			continue;
		if (ref_only && kwd->fn != kw_ref && kwd->fn != kw_defs && kwd->fn != kw_id)
			continue;
		r = kwd->fn(c, &k, name, json_object_iter_peek_value(&it));
		if (r != IDEM_OK)
			goto out_free_lists;
	}
	if (k.has_tuple && k.has_prefix_items) {
		r = idem__jsonschema_fail(c, n->path,
		                          "'items' as an array and 'prefixItems' together");
		goto out_free_lists;
	}
	if (k.has_tuple) {
		n->prefix = k.tuple;
		n->n_prefix = k.n_tuple;
		n->rest = k.additional_items;
		k.tuple = NULL;
	} else if (k.has_prefix_items) {
		n->prefix = k.prefix_items;
		n->n_prefix = k.n_prefix_items;
		n->rest = k.items;
		k.prefix_items = NULL;
	} else {
		n->rest = k.items; /* additionalItems has no effect without an "items" array */
	}

out_free_lists:
	free(k.tuple);
	free(k.prefix_items);
	return r;
}
