/*
 * idemctl_cmds.h - the subcommands of idemctl, one source file per group.
 *
 * Each subcommand takes the loaded configuration and the arguments after the subcommand name
 * (argv[0] is the subcommand), and returns the process exit status (enum idem_exit). Each
 * group also prints its lines of "idemctl --help". daemon/idemctl.c parses the global
 * options and dispatches here; the subcommand files never call back into it (their shared
 * helpers are in idemctl_common.h).
 */
#ifndef IDEMCTL_CMDS_H
#define IDEMCTL_CMDS_H

#include <stdio.h>

#include "idem_cfg.h"

/* daemon/idemctl_migrate.c: migrate */
int idemctl_migrate(const struct idem_cfg *cfg, int argc, char **argv);
void idemctl_migrate_usage(FILE *f);

/* daemon/idemctl_status.c: status, verify, lookup */
int idemctl_status(const struct idem_cfg *cfg, int argc, char **argv);
int idemctl_verify(const struct idem_cfg *cfg, int argc, char **argv);
int idemctl_lookup(const struct idem_cfg *cfg, int argc, char **argv);
void idemctl_status_usage(FILE *f);

/* daemon/idemctl_replay.c: replay */
int idemctl_replay(const struct idem_cfg *cfg, int argc, char **argv);
void idemctl_replay_usage(FILE *f);

/* daemon/idemctl_purge.c: purge */
int idemctl_purge(const struct idem_cfg *cfg, int argc, char **argv);
void idemctl_purge_usage(FILE *f);

/* daemon/idemctl_quarantine.c: quarantine list|show|retry|discard */
int idemctl_quarantine(const struct idem_cfg *cfg, int argc, char **argv);
void idemctl_quarantine_usage(FILE *f);

/* daemon/idemctl_try.c: try */
int idemctl_try(const struct idem_cfg *cfg, int argc, char **argv);
void idemctl_try_usage(FILE *f);

/* daemon/idemctl_preflight.c: preflight */
int idemctl_preflight(const struct idem_cfg *cfg, int argc, char **argv);
void idemctl_preflight_usage(FILE *f);

/* daemon/idemctl_rename.c: rename */
int idemctl_rename(const struct idem_cfg *cfg, int argc, char **argv);
void idemctl_rename_usage(FILE *f);

#endif
