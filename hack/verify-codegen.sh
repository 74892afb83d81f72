#!/usr/bin/env bash
# Fails if hack/update-codegen.sh would change the committed clientset,
# listers or informers under apis/generated (added, removed or edited files).
# `make lint` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Generate into a scratch directory so a failed check leaves the tree untouched.
OUTPUT_DIR="$tmp/generated" hack/update-codegen.sh
if ! diff -ru apis/generated "$tmp/generated"; then
	echo "apis/generated is out of date: run hack/update-codegen.sh" >&2
	exit 1
fi
echo "generated clientset, listers and informers are up to date"
