#!/bin/sh
# The differential scan test by hand: N random streams and N well-formed pickles (default 100,000 each) from
# the same generators as the hypothesis tests (CI runs 2,000 of each), each compared with CPython's
# pickle._Unpickler, through both of the scan's ways (CPython's unpickler, its own stack walk).
# Usage: sh tests/formats/run_differential.sh [N] [SEED]
cd "$(dirname "$0")/../.." && exec .venv/bin/python -c "
import sys
from tests.formats.test_pickle_differential import run_by_hand
print(run_by_hand(int(sys.argv[1]), int(sys.argv[2])), 'streams compared: the scan named what CPython asked find_class for')
" "${1:-100000}" "${2:-0}"
