#!/usr/bin/env bash
# Generates the Go stubs (messages and gRPC services) of every proto in protos/gonka/mlnode/v1 into
# clients/go/gonka/mlnode/v1, and of the vendored pull stream (protos/vendor/mlnode/poc/v1) into
# clients/go/pocstream/gen, as its publisher's go_package names it (decentralized-api/pocstream/gen)
# under this module (`make go-proto`). With --check, generates into a scratch folder and fails if the
# committed stubs differ, or if one has no proto left (`make go-proto-check`).
# Debian's protoc and plugins (clients/go/debian-packages.txt): the stubs name their versions.
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
module=github.com/gonka-ai/mlnode-grpc/clients/go
package_dir=gonka/mlnode/v1
vendored_proto=mlnode/poc/v1/poc_callback_stream.proto
vendored_dir=pocstream/gen
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# module=: output paths are the go_package import paths less the module's own prefix.
protoc -I"$repo/protos" \
    --go_out="$scratch" --go_opt=module="$module" \
    --go-grpc_out="$scratch" --go-grpc_opt=module="$module" \
    "$repo/protos/$package_dir"/*.proto
# The vendored proto is left unchanged: M maps it to a package of this module instead of its go_package.
mapping="M$vendored_proto=$module/$vendored_dir;gen"
protoc -I"$repo/protos/vendor" \
    --go_out="$scratch" --go_opt=module="$module" --go_opt="$mapping" \
    --go-grpc_out="$scratch" --go-grpc_opt=module="$module" --go-grpc_opt="$mapping" \
    "$repo/protos/vendor/$vendored_proto"

for dir in "$package_dir" "$vendored_dir"; do
    committed="$repo/clients/go/$dir"
    if [[ "${1:-}" == "--check" ]]; then
        if ! diff -r "$scratch/$dir" "$committed" >/dev/null 2>&1; then
            diff -rq "$scratch/$dir" "$committed" | sed "s|$scratch/||; s|$repo/||" >&2 || true
            echo "stale Go stubs in clients/go/$dir: run \`make go-proto\` and commit the result" >&2
            exit 1
        fi
        echo "Go stubs in clients/go/$dir are up to date ($(ls "$committed" | wc -l) files)"
        continue
    fi
    # The folder holds generated files only: replacing it drops the stubs of a removed proto.
    rm -rf "$committed"
    mkdir -p "$(dirname "$committed")"
    cp -r "$scratch/$dir" "$committed"
    for path in "$committed"/*; do echo "wrote clients/go/$dir/$(basename "$path")"; done
done
