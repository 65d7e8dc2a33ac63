#!/usr/bin/env bash
# A commit's files in a folder of their own, for a benchmark that runs that commit's server beside this checkout's
# (benchmarks/instances_bench.py --compare baseline). Usage: scripts/baseline-checkout.sh COMMIT DIR
# DIR is emptied first; under .build/ it is ignored by git, so it can travel with the checkout to another host.
set -euo pipefail
commit=${1:?usage: $0 COMMIT DIR}
dir=${2:?usage: $0 COMMIT DIR}
cd "$(dirname "$0")/.."
rm -rf "$dir"
mkdir -p "$dir"
git archive --format=tar "$commit" server engine_ext clients/python pyproject.toml | tar -x -C "$dir"
git rev-parse "$commit" > "$dir/BASELINE_COMMIT"
echo "$dir: $(cat "$dir/BASELINE_COMMIT")"
