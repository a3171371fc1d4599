/*
 * idem_cfg_int.h - what idem_cfg.c and idem_cfg_routes.c share, private to the module.
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

#endif
