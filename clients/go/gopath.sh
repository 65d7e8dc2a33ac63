#!/usr/bin/env bash
# Runs the go command in GOPATH mode on this checkout, against Debian's Go packages in
# /usr/share/gocode (clients/go/debian-packages.txt): builds offline, nothing is downloaded.
# It runs in the module's folder as GOPATH sees it: name packages relative to clients/go.
# Example: clients/go/gopath.sh test ./...
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
gopath="$repo/.build/gopath"
# GOPATH mode finds a package by its import path under $GOPATH/src: link the module's repository
# there. (go skips symlinks while matching `...` from $GOPATH/src, not below the folder it starts in.)
link="$gopath/src/github.com/gonka-ai/mlnode-grpc"
if [[ "$(readlink "$link" 2>/dev/null)" != "$repo" ]]; then
    mkdir -p "$(dirname "$link")"
    ln -sfn "$repo" "$link"
fi
command -v go >/dev/null || { echo "go is not installed: run \`make go-setup\` (Debian's Go packages)" >&2; exit 1; }
export GO111MODULE=off GOPATH="$gopath:/usr/share/gocode" GOFLAGS=
cd "$link/clients/go"
exec go "$@"
