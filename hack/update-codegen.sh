#!/usr/bin/env bash
# Regenerates the typed clientset (with its fake), listers and informers of
# tidal's CRD types into apis/generated, with the code-generator pinned in
# hack/tools/go.mod. `make generate` runs it; hack/verify-codegen.sh checks
# the committed output against it.
#
# The generators read the +genclient tags on the types under apis/<group>/v1alpha1
# and the +groupName tag of each package's doc.go. OUTPUT_DIR sends the output
# elsewhere (the verify script uses a scratch directory).
set -euo pipefail
cd "$(dirname "$0")/.."

module=github.com/tidalscale/tidal
out_dir=${OUTPUT_DIR:-apis/generated}
out_pkg=$module/apis/generated
header=hack/boilerplate.go.txt
inputs=(autoscaling/v1alpha1 functions/v1alpha1)

gen() { go tool -modfile=hack/tools/go.mod "$@"; }

input_pkgs=()
for gv in "${inputs[@]}"; do input_pkgs+=("$module/apis/$gv"); done

# Generate into a scratch directory and swap it in at the end, so a failed run
# leaves the old output whole, builds running meanwhile see no half-written
# tree, and files of a removed type or group do not survive. The scratch
# directory sits next to the output so the swap is a rename; its leading dot
# keeps `go build ./...` out of it.
mkdir -p "$(dirname "$out_dir")"
tmp=$(mktemp -d "$(dirname "$out_dir")/.codegen.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
gen_dir=$tmp/out

gen client-gen \
	--go-header-file "$header" \
	--clientset-name versioned \
	--input-base "$module/apis" \
	--input "$(IFS=,; echo "${inputs[*]}")" \
	--output-dir "$gen_dir/clientset" \
	--output-pkg "$out_pkg/clientset"

gen lister-gen \
	--go-header-file "$header" \
	--output-dir "$gen_dir/listers" \
	--output-pkg "$out_pkg/listers" \
	"${input_pkgs[@]}"

gen informer-gen \
	--go-header-file "$header" \
	--versioned-clientset-package "$out_pkg/clientset/versioned" \
	--listers-package "$out_pkg/listers" \
	--output-dir "$gen_dir/informers" \
	--output-pkg "$out_pkg/informers" \
	"${input_pkgs[@]}"

if [[ -e $out_dir ]]; then mv "$out_dir" "$tmp/old"; fi
mv "$gen_dir" "$out_dir"
