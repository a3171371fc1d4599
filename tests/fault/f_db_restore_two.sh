#!/usr/bin/env bash
# Fault: f_db_restore.sh with two instances after the restore, one SIGKILLed during the re-apply.
# Sourced, not exec'd, so that $0 (the test's name, its temp dir) stays f_db_restore_two.
export IDEM_RESTORE_INSTANCES=2
. "$(dirname "${BASH_SOURCE[0]}")/f_db_restore.sh"
