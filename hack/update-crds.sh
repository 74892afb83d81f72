#!/usr/bin/env bash
# Regenerates the CRD API's deepcopy code and the CRD manifests in
# charts/tidal/crds from the Go types under apis, with the
# controller-gen pinned in hack/tools/go.mod. `make generate` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

controller_gen=(go tool -modfile=hack/tools/go.mod controller-gen)
crd_dir=${CRD_DIR:-charts/tidal/crds}

"${controller_gen[@]}" object paths=./apis/...
mkdir -p "$crd_dir"
rm -f "$crd_dir"/*.yaml
"${controller_gen[@]}" crd:crdVersions=v1 paths=./apis/... output:crd:artifacts:config="$crd_dir"
