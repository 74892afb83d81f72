# syntax=docker/dockerfile:1
#
# One Dockerfile for the three services; SERVICE picks which:
#
#   docker build --build-arg SERVICE=collector -t ghcr.io/tidalscale/tidal-collector:0.1.0 .
#
# `make image` (hack/image-build.sh) builds all three. The binary is static
# (CGO off), so the final stage is distroless/static: no shell, no package
# manager, no libc, and it runs as the distroless nonroot user, 65532 — the
# user the Helm chart's securityContext runs it as.

ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG SERVICE
# Set by BuildKit for each platform of the build (--platform).
ARG TARGETOS
ARG TARGETARCH
RUN case "${SERVICE}" in \
      collector|decider|actuator) ;; \
      *) echo "build argument SERVICE=\"${SERVICE}\": want collector, decider or actuator" >&2; exit 1 ;; \
    esac
WORKDIR /src
# Modules first, so a source change reuses the download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH:-amd64} \
    go build -trimpath -ldflags="-s -w" -o /out/tidal ./services/${SERVICE}

FROM gcr.io/distroless/static-debian12:nonroot
ARG SERVICE
LABEL org.opencontainers.image.title="tidal-${SERVICE}" \
      org.opencontainers.image.source="https://github.com/tidalscale/tidal"
COPY --from=build /out/tidal /usr/local/bin/tidal
USER 65532:65532
# Ports come from --grpc-addr and --http-addr (TIDAL_GRPC_ADDR, TIDAL_HTTP_ADDR).
ENTRYPOINT ["/usr/local/bin/tidal"]
