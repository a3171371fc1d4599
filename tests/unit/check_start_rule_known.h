/*
 * check_start_rule_known.h - the sets of incidents the start rule is known to fail, one row
 * each: the kind of failure (K_LOST, K_TWICE, K_SKIP) and the incidents (B(EV_...)). Run
 * `check_start_rule` for each one's shortest sequence, `check_start_rule --table` for the rows.
 * Included by check_start_rule.c only.
 */
{ K_LOST, 0 | B(EV_START_NOKAFKA) | B(EV_CRASH_BEFORE) | B(EV_RESTORE) },
        { K_LOST, 0 | B(EV_START_NOKAFKA) | B(EV_CRASH_AFTER) | B(EV_RESTORE) },
        { K_LOST, 0 | B(EV_START_NOKAFKA) | B(EV_CRASH_BEFORE) | B(EV_FAILOVER) },
        { K_LOST, 0 | B(EV_START_NODB) | B(EV_CRASH_AFTER) | B(EV_LATEST) },
        { K_LOST, 0 | B(EV_START_NOKAFKA) | B(EV_RESTORE) | B(EV_LATEST) },
        { K_LOST, 0 | B(EV_START_NOKAFKA) | B(EV_FAILOVER) | B(EV_LATEST) },
        { K_LOST, 0 | B(EV_START_NODB) | B(EV_RESTORE) | B(EV_RENAME) },
        { K_LOST, 0 | B(EV_START_NOKAFKA) | B(EV_RESTORE) | B(EV_RENAME) },
        { K_LOST, 0 | B(EV_START_NOCLUSTER) | B(EV_RESTORE) | B(EV_RENAME) },
        { K_LOST, 0 | B(EV_START_NODB) | B(EV_FAILOVER) | B(EV_RENAME) },
        { K_LOST, 0 | B(EV_START_NOKAFKA) | B(EV_FAILOVER) | B(EV_RENAME) },
        { K_LOST, 0 | B(EV_START_NOCLUSTER) | B(EV_FAILOVER) | B(EV_RENAME) },
        { K_LOST, 0 | B(EV_RESTORE) | B(EV_MIRROR) }, { K_LOST, 0 | B(EV_FAILOVER) | B(EV_MIRROR) },
        { K_LOST, 0 | B(EV_START_NOKAFKA) | B(EV_START_NOCLUSTER) | B(EV_LATEST) | B(EV_MIRROR) },
        { K_LOST, 0 | B(EV_START_NOKAFKA) | B(EV_CRASH_AFTER) | B(EV_LATEST) | B(EV_MIRROR) },
        { K_LOST, 0 | B(EV_START_NOCLUSTER) | B(EV_LATEST) | B(EV_RENAME) | B(EV_MIRROR) },
        { K_LOST, 0 | B(EV_RESTORE) | B(EV_SKIP) }, { K_LOST, 0 | B(EV_FAILOVER) | B(EV_SKIP) },
        { K_LOST, 0 | B(EV_START_NOKAFKA) | B(EV_START_NOCLUSTER) | B(EV_MIRROR) | B(EV_SKIP) },
        { K_LOST, 0 | B(EV_START_NOCLUSTER) | B(EV_RENAME) | B(EV_MIRROR) | B(EV_SKIP) },
        { K_TWICE, 0 | B(EV_START_NODB) | B(EV_CRASH_AFTER) | B(EV_RENAME) },
        { K_TWICE, 0 | B(EV_FAILOVER) | B(EV_RENAME) },
        { K_TWICE, 0 | B(EV_CRASH_AFTER) | B(EV_RENAME) | B(EV_MIRROR) },
        { K_TWICE, 0 | B(EV_START_NODB) | B(EV_CRASH_AFTER) | B(EV_PURGE) },
        { K_TWICE, 0 | B(EV_START_NOCLUSTER) | B(EV_CRASH_AFTER) | B(EV_RENAME) | B(EV_PURGE) },
        { K_TWICE, 0 | B(EV_CRASH_AFTER) | B(EV_MIRROR) | B(EV_PURGE) },
        { K_TWICE, 0 | B(EV_START_NOCLUSTER) | B(EV_CRASH_AFTER) | B(EV_SKIP) | B(EV_PURGE) },
