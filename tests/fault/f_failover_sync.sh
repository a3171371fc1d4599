#!/usr/bin/env bash
# Fault: f_failover.sh with a synchronous standby: nothing lost, nothing re-applied.
# Sourced, not exec'd, so that $0 (the test's name, its temp dir) stays f_failover_sync.
export IDEM_FAILOVER_MODE=sync
. "$(dirname "${BASH_SOURCE[0]}")/f_failover.sh"
