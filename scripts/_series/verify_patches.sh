#!/usr/bin/env bash
# One command that verifies the kagent patch series from a clean clone, on both carry targets
# v0.9.11 and v0.9.12 (the tip of release/v0.9.x):
#   1. the SQL carried by the Go patches is byte-identical to the library's;
#   2. the series applies with `git am` to tags v0.9.11 and v0.9.12 (when KAGENT_SRC names a kagent clone or
#      mirror; without one this step is reported as not run);
#   3. the migrations upgrade a database holding upstream's 000001-000003 and old rows, and roll
#      back; the Python patches pass against the real kagent-adk 0.9.11, with the Python stand-in
#      controller and with the controller compiled from the Go series (tests/test_patches.py,
#      tests/test_kagent_patch.py); the contract scenarios pass on the library and on that
#      controller (tests/test_contract.py); every Go commit builds, vets, is gofmt-clean and
#      regenerates with sqlc v1.30.0, golangci-lint v2.12.2 passes, and kagent's Go tests of
#      the touched packages pass with -race on the embedded PostgreSQL (tests/test_go_series.py:
#      scripts/verify_go_series.py, scripts/run_go_db_tests.py), on both tags; the Python
#      patches also on the kagent-adk 0.9.12 wheel (tests/test_kagent_patch.py);
#   4. the upstream path on kagent main (patches/kagent-main/, tests/test_kagent_main.py:
#      scripts/verify_kagent_main.py): each small PR applies and passes alone on the snapshot in
#      patches/kagent-main/BASE, all apply in order, kagent's Go tests of the touched packages
#      pass with -race, the Python PR passes in main's own lock.  The Go steps use KGM_KAGENT_SRC
#      (default: KAGENT_SRC) and say NOT RUN where Go or kagent's source is missing.
# Usage: [KAGENT_SRC=/path/to/kagent] scripts/verify-patches   (PYTHON defaults to .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-.venv/bin/python}
export KGM_KAGENT_SRC=${KGM_KAGENT_SRC:-${KAGENT_SRC:-}}
"$py" scripts/sync_patch_sql.py --check
if [ -n "${KAGENT_SRC:-}" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  for tag in v0.9.11 v0.9.12; do
    git clone -q "$KAGENT_SRC" "$work/kagent-$tag"
    git -C "$work/kagent-$tag" checkout -q "$tag"
    git -C "$work/kagent-$tag" -c user.name=verify -c user.email=verify@localhost \
      am -q "$PWD"/patches/kagent-v0.9.11/*.patch
    echo "verify-patches: the series applies to $tag ($(git -C "$work/kagent-$tag" rev-list --count "$tag"..HEAD) commits)"
  done
else
  echo "verify-patches: KAGENT_SRC not set: git am against v0.9.11 and v0.9.12 NOT run"
fi
"$py" -m pytest -q tests/test_patches.py tests/test_kagent_patch.py tests/test_contract.py \
  tests/test_go_series.py tests/test_kagent_main.py
