#!/usr/bin/env bash
# Long mode of the shapes stress test (tests/stress/test_stress_shapes.py): the full
# product of its axes, 4 key lengths x 5 value sizes x 4 DRAM:NVM:SSD ratios x 2 update
# shares x busy/quiet = 320 cases at -m 12 with 8 s of updates and reads each
# (about 48 minutes on 2 cores).  The default run of that file (short mode, 9 cases) is part
# of scripts/test.sh.
#
#   bench/shapes-long.sh                          # all 320 cases against ./tac-memcached
#   STRESS_SHAPES=pairwise bench/shapes-long.sh   # an all-pairs design, 22 cases
#   STRESS_SHAPES_CASES=v500k,r1_0_16 bench/shapes-long.sh   # cases whose id contains one of these
#   STRESS_SEED=123 STRESS_SECONDS=60 STRESS_SHAPES_DRAM_MB=64 TAC_SERVER=/path/to/binary bench/shapes-long.sh
#
# Extra arguments go to pytest (e.g. -x to stop at the first failing case).  Each case
# prints its seed, ops, stores, refusals, stall windows and the server's stats.
set -u
cd "$(dirname "$0")/.."
export STRESS_SHAPES="${STRESS_SHAPES:-long}"
exec .venv/bin/python -m pytest -q -s -p no:cacheprovider -rfE tests/stress/test_stress_shapes.py -k test_shapes "$@"
