# SPDX-License-Identifier: MIT
# shellcheck shell=sh
# Sourced (POSIX sh or bash; not run on its own) by the scripts that start
# one server of their own in a scratch folder: deploy/quickstart.sh,
# tests/install_check.sh, tests/mcbench_smoke.sh, tests/programs/run.sh.
#
#   scratch_start PREFIX   SCRATCH: a new folder /tmp/PREFIX.XXXXXX (mode
#                          700); from then on, at exit, SERVER_PID (when
#                          set) is sent SIGTERM and waited for, then
#                          SCRATCH removed; SIGINT and SIGTERM exit 130
#                          (through that cleanup)
#
# The caller sets SERVER_PID to its server's pid once it has started it.

SERVER_PID=

scratch_cleanup() {
	if [ -n "$SERVER_PID" ]; then
		kill "$SERVER_PID" 2>/dev/null || true
		wait "$SERVER_PID" 2>/dev/null || true
	fi
	rm -rf "$SCRATCH"
}

scratch_start() {
	SCRATCH=$(mktemp -d "/tmp/$1.XXXXXX") || exit 1
	trap scratch_cleanup EXIT
	trap 'exit 130' INT TERM
}
