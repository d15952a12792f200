#!/usr/bin/env bash
# Team mode soaked, as BENCHMARKS.md "Team mode: soak" reports:
#
#   bash bench/team-soak.sh [SECONDS]      # default: 1800 (30 minutes)
#
# Runs the black-box soak test (tests/blackbox/team_soak.rs) for SECONDS instead of the test
# suite's 120: a private PostgreSQL cluster, a bare git remote, three gateways serving over HTTP,
# a client on each proposing, applying, patching, rejecting, undoing, redoing and deleting for
# good (a challenge issued on one gateway, executed on another) through the others, a person pushing every
# 2 s, and one gateway killed with SIGKILL and started again every SECONDS/8 (10 s to 3 min).
# Afterwards it checks the invariants (each apply on the branch once, no job twice, every push of
# the person kept, fast-forwards only, no job left, every chain verifies, every clone converges,
# and the invariants every team scenario ends with: tests/blackbox/team_invariants.rs)
# and prints what the soak did: the gaps between answered applies, every call slower than 1.5 s,
# and the first apply after each heal. `VAULTGATE_SOAK_LOGS=DIR` keeps each gateway's log (at
# info: a team apply slower than a second says what it waited for) in DIR.
# Not part of `bench/run.sh`: carried into BENCHMARKS.md by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-1800}
VAULTGATE_SOAK_SECONDS="$secs" cargo test --test blackbox -- team_soak --nocapture 2>&1 \
    | awk '/^soak:|^invariants:|^test |test result/ { print; next } /panicked/ { print; tail = 6; next } tail > 0 { print; tail-- }' 
