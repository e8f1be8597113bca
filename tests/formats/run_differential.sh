#!/bin/sh
# The differential scan test at 100,000 generated streams (CI runs 2,000). Usage: sh tests/formats/run_differential.sh [N]
cd "$(dirname "$0")/../.." && CKINSPECT_DIFFERENTIAL_EXAMPLES="${1:-100000}" exec .venv/bin/python -m pytest -q -p no:cacheprovider \
    "tests/formats/test_pickle_differential.py::test_the_scan_names_what_cpython_asks_find_class_for"
