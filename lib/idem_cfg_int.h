/*
 * idem_cfg_int.h - what idem_cfg.c, idem_cfg_routes.c and idem_cfg_secrets.c share, private to
 * the module.
 */
#ifndef IDEM_CFG_INT_H
#define IDEM_CFG_INT_H

#include "idem_cfg.h"
#include "idem_cfg_walk.h"

/*
 * The checks across the routes of @cfg, once its sections are read: @routes is the routes'
 * node, @kafka_topics kafka.topics' (NULL if absent), @has_registry whether schema_registry is
 * there. Each error is reported with its position, as the walk does.
 */
void idem__cfg_check_routes(struct cfg_ctx *ctx, struct idem_cfg *cfg, yaml_node_t *routes,
                            yaml_node_t *kafka_topics, bool has_registry);

/*
 * @brief The check of kafka.properties key @name (value @value at @vnode) when it is the
 * _env or _file form of a secret property (idem_cfg_kafka_secret_ref()): reports a bad value
 * and sets *ret_ok. @returns false, touching nothing, for any other key.
 */
bool idem__cfg_check_kafka_secret(struct cfg_ctx *ctx, yaml_node_t *vnode, const char *name,
                                  const char *value, bool *ret_ok);

/* @brief Reports a secret property of kafka.properties (@props) set in more than one form. */
void idem__cfg_check_kafka_secrets(struct cfg_ctx *ctx, yaml_node_t *props);

#endif
