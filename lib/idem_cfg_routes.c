/*
 * idem_cfg_routes.c - the checks across the routes of a configuration: each topic read by one
 * route and subscribed, consumer names, replies and dead letters with the outbox, avro: fields
 * and JSON Schema values with a schema registry. Beside idem_cfg.c, which holds the settings
 * tables and calls idem__cfg_check_routes() once the sections are read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idem_cfg.h"
#include "idem_cfg_int.h"
#include "idem_cfg_walk.h"

static const char *cfg_route_label(struct cfg_ctx *ctx, const struct idem_cfg *cfg, size_t i,
                                   char *buf, size_t len)
{
	if (cfg->routes[i].name != NULL)
		return idem__cfg_qs(ctx, cfg->routes[i].name);
	snprintf(buf, len, "routes[%zu]", i);
	return buf;
}

/* Every topic of every route, sorted by name, or NULL (out of memory). */
static struct cfg_name_ref *cfg_route_topics(struct cfg_ctx *ctx, struct idem_cfg *cfg,
                                             yaml_node_t *routes, size_t *ret_n)
{
	struct cfg_name_ref *refs;
	size_t total = 0, n = 0;

	for (size_t i = 0; i < cfg->n_routes; i++)
		total += cfg->routes[i].n_topics;
	refs = calloc(total ? total : 1, sizeof(*refs));
	if (refs == NULL) {
		ctx->nomem = true;
		return NULL;
	}
	for (size_t i = 0; i < cfg->n_routes; i++) {
		const struct idem_route *route = &cfg->routes[i];
		yaml_node_t *list =
		        idem__cfg_map_get(ctx, idem__cfg_seq_get(ctx, routes, i), "topics");

		for (size_t j = 0; j < route->n_topics; j++) {
			yaml_node_t *node = idem__cfg_seq_get(ctx, list, j);

			if (route->topics[j] != NULL && node != NULL)
				refs[n++] = (struct cfg_name_ref){ route->topics[j], i, j, node };
		}
	}
	qsort(refs, n, sizeof(*refs), idem__cfg_name_ref_cmp);
	*ret_n = n;
	return refs;
}

static void cfg_check_route_topics(struct cfg_ctx *ctx, struct idem_cfg *cfg, yaml_node_t *routes,
                                   yaml_node_t *kafka_topics)
{
	struct cfg_name_ref *refs, *krefs = NULL;
	size_t n, nk = 0;
	char label[64];

	refs = cfg_route_topics(ctx, cfg, routes, &n);
	if (refs == NULL)
		return;
	for (size_t i = 1, first = 0; i < n; i++) {
		if (strcmp(refs[i].name, refs[first].name) != 0) {
			first = i;
			continue;
		}
		if (refs[i].a == refs[first].a)
			idem__cfg_error(ctx, refs[i].node,
			                "duplicate topic '%s' in 'routes[%zu].topics'",
			                idem__cfg_qs(ctx, refs[i].name), refs[i].a);
		else
			idem__cfg_error(
			        ctx, refs[i].node,
			        "topic '%s' already belongs to route '%s' (a topic may belong to one route only)",
			        idem__cfg_qs(ctx, refs[i].name),
			        cfg_route_label(ctx, cfg, refs[first].a, label, sizeof(label)));
	}
	if (cfg->topics == NULL)
		goto out_free_refs;
	krefs = calloc(cfg->n_topics, sizeof(*krefs));
	if (krefs == NULL) {
		ctx->nomem = true;
		goto out_free_refs;
	}
	for (size_t j = 0; j < cfg->n_topics; j++) {
		yaml_node_t *node = idem__cfg_seq_get(ctx, kafka_topics, j);

		if (cfg->topics[j] != NULL && node != NULL)
			krefs[nk++] = (struct cfg_name_ref){ cfg->topics[j], 0, j, node };
	}
	qsort(krefs, nk, sizeof(*krefs), idem__cfg_name_ref_cmp);
	for (size_t j = 0; j < nk; j++) {
		if (j > 0 && strcmp(krefs[j].name, krefs[j - 1].name) == 0)
			idem__cfg_error(ctx, krefs[j].node,
			                "duplicate topic '%s' in 'kafka.topics'",
			                idem__cfg_qs(ctx, krefs[j].name));
		else if (!idem__cfg_name_ref_find(refs, n, krefs[j].name))
			idem__cfg_error(ctx, krefs[j].node,
			                "topic '%s' in 'kafka.topics' has no route",
			                idem__cfg_qs(ctx, krefs[j].name));
	}
	for (size_t i = 0; i < n; i++) {
		if (!idem__cfg_name_ref_find(krefs, nk, refs[i].name))
			idem__cfg_error(ctx, refs[i].node,
			                "topic '%s' of route '%s' is not in 'kafka.topics'",
			                idem__cfg_qs(ctx, refs[i].name),
			                cfg_route_label(ctx, cfg, refs[i].a, label, sizeof(label)));
	}
	free(krefs);
out_free_refs:
	free(refs);
}

/* Is @topic one of @route's own topics? */
static bool cfg_route_reads(const struct idem_route *route, const char *topic)
{
	for (size_t j = 0; j < route->n_topics; j++) {
		if (route->topics[j] != NULL && strcmp(route->topics[j], topic) == 0)
			return true;
	}
	return false;
}

/*
 * Replies and dead letters are rows of idem.outbox, which only the relay publishes: a route
 * that asks for them needs outbox.enabled. And they must not go back to the route's own topics:
 * a dead letter would be quarantined again, and again.
 */
/* A route without routes[].consumer uses kafka.group_id as its consumer name. */
static void cfg_check_route_consumers(struct cfg_ctx *ctx, struct idem_cfg *cfg,
                                      yaml_node_t *routes)
{
	char label[32];

	for (size_t i = 0; i < cfg->n_routes; i++) {
		yaml_node_t *node = idem__cfg_seq_get(ctx, routes, i);

		if (cfg->group_id == NULL || idem_cfg_consumer_valid(cfg->group_id) ||
		    idem__cfg_map_get(ctx, node, "consumer") != NULL)
			continue;
		idem__cfg_error(
		        ctx, node,
		        "route '%s' has no 'consumer', and kafka.group_id '%s' cannot stand "
		        "in for it (a consumer name has letters, digits, '.', '_' and '-', at "
		        "most %d characters): set routes[].consumer",
		        cfg_route_label(ctx, cfg, i, label, sizeof(label)),
		        idem__cfg_qs(ctx, cfg->group_id), IDEM_CONSUMER_NAME_MAX);
	}
}

static void cfg_check_route_outbox(struct cfg_ctx *ctx, struct idem_cfg *cfg, yaml_node_t *routes)
{
	char label[32];

	for (size_t i = 0; i < cfg->n_routes; i++) {
		const struct idem_route *route = &cfg->routes[i];
		yaml_node_t *node = idem__cfg_seq_get(ctx, routes, i);
		const char *what = route->reply_topic != NULL ? "reply" : "dead_letter_topic";

		if (route->reply_topic == NULL && route->dead_letter_topic == NULL)
			continue;
		if (!cfg->outbox_enabled)
			idem__cfg_error(
			        ctx, idem__cfg_map_get(ctx, node, what),
			        "route '%s' has '%s' but outbox.enabled is false (replies and "
			        "dead letters are published by the outbox relay)",
			        cfg_route_label(ctx, cfg, i, label, sizeof(label)), what);
		if (route->reply_topic != NULL && cfg_route_reads(route, route->reply_topic))
			idem__cfg_error(ctx, idem__cfg_map_get(ctx, node, "reply"),
			                "route '%s' replies to '%s', one of its own topics",
			                cfg_route_label(ctx, cfg, i, label, sizeof(label)),
			                idem__cfg_qs(ctx, route->reply_topic));
		if (route->dead_letter_topic != NULL &&
		    cfg_route_reads(route, route->dead_letter_topic))
			idem__cfg_error(
			        ctx, idem__cfg_map_get(ctx, node, "dead_letter_topic"),
			        "route '%s' has dead_letter_topic '%s', one of its own topics",
			        cfg_route_label(ctx, cfg, i, label, sizeof(label)),
			        idem__cfg_qs(ctx, route->dead_letter_topic));
	}
}

/*
 * The schema formats @route's fields read the value ([0]) and the key ([1]) in: bit 1 << type
 * (enum idem_schema_type) per avro:/protobuf: field.
 */
static void route_schema_formats(const struct idem_route *route, unsigned formats[2])
{
	enum idem_schema_type type;
	bool key;

	formats[0] = formats[1] = 0;
	for (size_t j = 0; j < route->key.n_parts; j++) {
		if (idem_field_schema(route->key.parts[j].kind, &type, &key))
			formats[key] |= 1u << type;
	}
	for (size_t j = 0; j < route->n_params; j++) {
		if (idem_field_schema(route->params[j].kind, &type, &key))
			formats[key] |= 1u << type;
	}
}

bool idem_route_reads_avro(const struct idem_route *route)
{
	unsigned formats[2];

	route_schema_formats(route, formats);
	return (formats[0] | formats[1]) != 0;
}

/*
 * A route that reads avro: or protobuf: fields needs a schema registry; and it reads its value,
 * and its key, in one format: avro: and protobuf: fields of the same bytes could not both be.
 */
static void cfg_check_route_avro(struct cfg_ctx *ctx, struct idem_cfg *cfg, yaml_node_t *routes,
                                 bool has_registry)
{
	static const unsigned both = 1u << IDEM_SCHEMA_TYPE_AVRO | 1u << IDEM_SCHEMA_TYPE_PROTOBUF;
	char label[32];
	unsigned formats[2];

	for (size_t i = 0; i < cfg->n_routes; i++) {
		route_schema_formats(&cfg->routes[i], formats);
		if (!has_registry && (formats[0] | formats[1]) != 0)
			idem__cfg_error(
			        ctx, idem__cfg_seq_get(ctx, routes, i),
			        "route '%s' reads %s fields but there is no 'schema_registry' section",
			        cfg_route_label(ctx, cfg, i, label, sizeof(label)),
			        (formats[0] | formats[1]) & 1u << IDEM_SCHEMA_TYPE_AVRO
			                ? "avro:"
			                : "protobuf:");
		for (int k = 0; k < 2; k++) {
			if ((formats[k] & both) == both)
				idem__cfg_error(
				        ctx, idem__cfg_seq_get(ctx, routes, i),
				        "route '%s' reads its %s both as Avro (%s) and as Protobuf (%s): it is one or the other",
				        cfg_route_label(ctx, cfg, i, label, sizeof(label)),
				        k ? "key" : "value", k ? "avro-key:" : "avro:",
				        k ? "protobuf-key:" : "protobuf:");
		}
	}
}

/*
 * A route whose values are Confluent-framed JSON Schema (routes[].value_format: json-schema)
 * asks the schema registry for the schema of each id, so it needs one; and its values are JSON,
 * so avro: and protobuf: fields (which read the value as Avro, Protobuf) could read none of them.
 */
static void cfg_check_route_value_format(struct cfg_ctx *ctx, struct idem_cfg *cfg,
                                         yaml_node_t *routes, bool has_registry)
{
	char label[32];

	for (size_t i = 0; i < cfg->n_routes; i++) {
		const struct idem_route *route = &cfg->routes[i];
		yaml_node_t *node =
		        idem__cfg_map_get(ctx, idem__cfg_seq_get(ctx, routes, i), "value_format");
		unsigned formats[2];

		if (route->value_format != IDEM_CFG_VALUE_JSON_SCHEMA) {
			if (route->validate)
				idem__cfg_error(
				        ctx,
				        idem__cfg_map_get(ctx, idem__cfg_seq_get(ctx, routes, i),
				                          "validate"),
				        "route '%s' has validate: true but its value_format is not 'json-schema': only JSON Schema values have a schema to check them against",
				        cfg_route_label(ctx, cfg, i, label, sizeof(label)));
			continue;
		}
		if (!has_registry)
			idem__cfg_error(
			        ctx, node,
			        "route '%s' has value_format 'json-schema' but there is no 'schema_registry' section to ask for the schemas of its values",
			        cfg_route_label(ctx, cfg, i, label, sizeof(label)));
		route_schema_formats(route, formats);
		if (formats[0] != 0)
			idem__cfg_error(
			        ctx, node,
			        "route '%s' has value_format 'json-schema' but reads %s fields, which read the value as %s",
			        cfg_route_label(ctx, cfg, i, label, sizeof(label)),
			        formats[0] & 1u << IDEM_SCHEMA_TYPE_AVRO ? "avro:" : "protobuf:",
			        formats[0] & 1u << IDEM_SCHEMA_TYPE_AVRO ? "Avro" : "Protobuf");
	}
}

void idem__cfg_check_routes(struct cfg_ctx *ctx, struct idem_cfg *cfg, yaml_node_t *routes,
                            yaml_node_t *kafka_topics, bool has_registry)
{
	cfg_check_route_topics(ctx, cfg, routes, kafka_topics);
	cfg_check_route_consumers(ctx, cfg, routes);
	cfg_check_route_outbox(ctx, cfg, routes);
	cfg_check_route_avro(ctx, cfg, routes, has_registry);
	cfg_check_route_value_format(ctx, cfg, routes, has_registry);
}
