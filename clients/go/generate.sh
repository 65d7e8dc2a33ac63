#!/usr/bin/env bash
# Generates the Go stubs (messages and gRPC services) of every proto in protos/gonka/mlnode/v1 into
# clients/go/gonka/mlnode/v1 (`make go-proto`). With --check, generates into a scratch folder and
# fails if the committed stubs differ, or if one has no proto left (`make go-proto-check`).
# Debian's protoc and plugins (clients/go/debian-packages.txt): the stubs name their versions.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
module=github.com/gonka-ai/mlnode-grpc/clients/go
package_dir=gonka/mlnode/v1
committed="$repo/clients/go/$package_dir"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# module=: output paths are the go_package import paths less the module's own prefix.
protoc -I"$repo/protos" \
    --go_out="$scratch" --go_opt=module="$module" \
    --go-grpc_out="$scratch" --go-grpc_opt=module="$module" \
    "$repo/protos/$package_dir"/*.proto

if [[ "${1:-}" == "--check" ]]; then
    if ! diff -r "$scratch/$package_dir" "$committed" >/dev/null 2>&1; then
        diff -rq "$scratch/$package_dir" "$committed" | sed "s|$scratch/||; s|$repo/||" >&2 || true
        echo "stale Go stubs in clients/go/$package_dir: run \`make go-proto\` and commit the result" >&2
        exit 1
    fi
    echo "Go stubs are up to date ($(ls "$committed" | wc -l) files)"
    exit 0
fi

# The folder holds generated files only: replacing it drops the stubs of a removed proto.
rm -rf "$committed"
mkdir -p "$(dirname "$committed")"
cp -r "$scratch/$package_dir" "$committed"
for path in "$committed"/*; do echo "wrote clients/go/$package_dir/$(basename "$path")"; done
