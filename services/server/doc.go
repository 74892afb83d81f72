// Package server is the plumbing the three tidal binaries share: a gRPC server
// with one interceptor chain (recovery, logging, metrics, validation), the
// standard health service, server reflection, graceful shutdown, and an HTTP
// port serving /metrics, /healthz and /readyz. Each binary registers its own
// handler and nothing else.
package server
