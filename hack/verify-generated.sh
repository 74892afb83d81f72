#!/usr/bin/env bash
# Fails when `make generate` would change the committed generated Go under proto/:
# regenerates into a scratch directory and compares file sets and contents.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go tool -modfile=tools/go.mod buf generate -o "$tmp"
diff -r <(cd "$tmp/proto" && find . -name '*.pb.go' | sort) <(cd proto && find . -name '*.pb.go' | sort) \
  || { echo "generated file set differs: run make generate" >&2; exit 1; }
while read -r f; do
  cmp -s "$tmp/proto/$f" "proto/$f" || { echo "proto/$f is stale: run make generate" >&2; exit 1; }
done < <(cd "$tmp/proto" && find . -name '*.pb.go')
echo "generated code is up to date"
