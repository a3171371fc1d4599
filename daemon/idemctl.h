/*
 * idemctl.h - the subcommands of idemctl, one source file each group.
 *
 * Each takes the loaded configuration and the arguments after the subcommand name (argv[0] is
 * the subcommand), and returns the process exit status (enum idem_exit).
 */
#ifndef IDEMCTL_H
#define IDEMCTL_H

#include <stdio.h>

#include "idem_cfg.h"

/* daemon/idemctl_quarantine.c: quarantine list|show|retry|discard */
int idemctl_quarantine(const struct idem_cfg *cfg, int argc, char **argv);
void idemctl_quarantine_usage(FILE *f);

/* daemon/idemctl_ops.c: status, verify, lookup, replay */
int idemctl_status(const struct idem_cfg *cfg, int argc, char **argv);
int idemctl_verify(const struct idem_cfg *cfg, int argc, char **argv);
int idemctl_lookup(const struct idem_cfg *cfg, int argc, char **argv);
int idemctl_replay(const struct idem_cfg *cfg, int argc, char **argv);
int idemctl_purge(const struct idem_cfg *cfg, int argc, char **argv);
/* The configured retention.keep in seconds (daemon/idemctl.c). */
int64_t idemctl_retention_keep(const struct idem_cfg *cfg);
void idemctl_ops_usage(FILE *f);

#endif
