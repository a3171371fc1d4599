/*
 * check_start_rule_known.h - the sets of incidents the start rule is known to fail, one row
 * each: the kind of failure (K_LOST, K_TWICE, K_SKIP) and the incidents (B(EV_...)). Run
 * `check_start_rule` for each one's shortest sequence, `check_start_rule --table` for the rows.
 * Included by check_start_rule.c only.
 */
