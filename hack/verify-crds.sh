#!/usr/bin/env bash
# Fails if hack/update-crds.sh would change the generated deepcopy code or the
# CRD manifests: generated files are committed and never edited by hand.
# `make lint` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Generate into a scratch copy so a failed check leaves the tree untouched.
mkdir -p "$tmp/crds"
cp -r apis "$tmp/apis.orig"
CRD_DIR="$tmp/crds" hack/update-crds.sh
status=0
if ! diff -ru charts/tidal/crds "$tmp/crds"; then
	echo "charts/tidal/crds is out of date: run hack/update-crds.sh" >&2
	status=1
fi
if ! diff -ru "$tmp/apis.orig" apis; then
	echo "generated deepcopy code under apis is out of date: run hack/update-crds.sh" >&2
	cp -r "$tmp/apis.orig/." apis/
	status=1
fi
exit $status
