#!/usr/bin/env bash
# Builds the three service images from the root Dockerfile, one per SERVICE
# build argument, tagged REGISTRY/tidal-SERVICE:TAG as the Helm chart expects
# (image.registry, image.tag). `make image` runs it.
#
#   REGISTRY  image registry and path   (default ghcr.io/tidalscale, the chart's image.registry)
#   TAG       image tag                 (default the chart's appVersion)
#   ENGINE    docker or podman          (default: whichever is installed)
#   PUSH=1    push the images after building them
#   PLATFORMS e.g. linux/amd64,linux/arm64 (docker buildx; implies a push)
#
# Without a container engine it says so and exits 0, so `make image` is
# harmless on machines (and CI) without one; test/chart checks what can be
# checked without an engine.
set -euo pipefail
cd "$(dirname "$0")/.."

chart_app_version() { sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' charts/tidal/Chart.yaml; }

REGISTRY=${REGISTRY:-ghcr.io/tidalscale}
TAG=${TAG:-$(chart_app_version)}
PUSH=${PUSH:-0}
PLATFORMS=${PLATFORMS:-}
ENGINE=${ENGINE:-}
# An engine counts only if it answers: a docker CLI without a daemon does not.
if [[ -z "$ENGINE" ]]; then
	for e in docker podman; do
		if command -v "$e" >/dev/null 2>&1 && "$e" info >/dev/null 2>&1; then ENGINE=$e; break; fi
	done
	if [[ -z "$ENGINE" ]]; then
		echo "image: no working container engine (docker or podman): skipping the image build" >&2
		exit 0
	fi
elif ! "$ENGINE" info >/dev/null 2>&1; then
	echo "image: ENGINE=$ENGINE does not answer ($ENGINE info failed)" >&2
	exit 1
fi
# The Dockerfile uses BuildKit features (cache mounts, BUILDPLATFORM).
export DOCKER_BUILDKIT=1
if [[ -z "$TAG" ]]; then
	echo "image: TAG is empty and charts/tidal/Chart.yaml has no appVersion" >&2
	exit 2
fi

for svc in collector decider actuator; do
	ref="$REGISTRY/tidal-$svc:$TAG"
	echo "image: building $ref"
	if [[ -n "$PLATFORMS" ]]; then
		"$ENGINE" buildx build --platform "$PLATFORMS" --build-arg SERVICE="$svc" -t "$ref" --push .
		continue
	fi
	"$ENGINE" build --build-arg SERVICE="$svc" -t "$ref" .
	if [[ "$PUSH" == 1 ]]; then
		"$ENGINE" push "$ref"
	fi
done
