#!/usr/bin/env bash
# A fresh machine has no shared/ (the real MNIST test set, the papers' notes): the tests that
# need those files must skip, saying so, and anything that swaps in synthetic data must not
# need them. This runs every test file that touches shared/ (the files naming its lookup,
# mnist_offline or the reproduction harness; a conftest.py's whole folder) in a copy of this
# checkout (a clone of HEAD with the working tree's edits over it) in a new temporary folder,
# with no shared/ beside or above it and $FL_SHARED_DATA / $FL_SHARED_PAPERS pointing at an
# empty folder; every process imports the copy (PYTHONPATH). Fails if a test fails or if no
# test skipped for want of the data (the copy found it after all). .ci/run runs it after the
# suite (1.5-2.5 minutes on 2 busy cores). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
here="$(pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
copy="$tmp/fl-lightning"
mkdir -p "$tmp/empty"
dir="$tmp"
while :; do  # nothing may hand the copy a shared/ folder
  if [ -e "$dir/shared" ]; then
    echo "error: $dir/shared exists beside the copy; set TMPDIR to a folder without one" >&2
    exit 2
  fi
  [ "$dir" = / ] && break
  dir="$(dirname "$dir")"
done
# A clone (the commit is a run's provenance), then the working tree's edits over it.
git clone --quiet --shared --no-checkout "$here" "$copy"
git -C "$copy" checkout --quiet --detach "$(git rev-parse HEAD)"
git ls-files -z --deleted | (cd "$copy" && xargs -0 -r rm -f --)
git ls-files -z --cached --others --exclude-standard \
  | .venv/bin/python -c '
import os, shutil, sys
dst = sys.argv[1]
for rel in sys.stdin.buffer.read().decode().split("\0"):
    if rel and os.path.isfile(rel) and not rel.startswith("shared/"):
        os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(rel, os.path.join(dst, rel))
' "$copy"
mapfile -t files < <(
  grep -rlE 'offline_mnist_args|SHARED_DATA|SHARED_PAPERS|find_shared|mnist_offline|reports\.repro|reports import repro' \
    tests --include='*.py' \
    | while read -r f; do
        case "$f" in
          tests/conftest.py) ;;  # the lookup every test imports; its users are listed
          */conftest.py) dirname "$f" ;;
          *) echo "$f" ;;
        esac
      done | sort -u
)
cd "$copy"
log="$tmp/pytest.log"
set +e
FL_SHARED_DATA="$tmp/empty" FL_SHARED_PAPERS="$tmp/empty" PYTHONPATH="$copy" \
  WANDB_MODE=offline "$here/.venv/bin/python" -m pytest -n "${FL_TEST_WORKERS:-2}" \
  -m "not slow" -rs "${files[@]}" "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -eq 0 ] && ! grep -q "the real MNIST test set (shared/data/MNIST/raw) is not" "$log"; then
  echo "error: no test skipped for want of shared/data: the copy still found the data" >&2
  exit 1
fi
exit "$rc"
