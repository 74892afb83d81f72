# tidal: every target runs from a clean checkout; tools come from tools/go.mod.
SHELL := /bin/bash
GO ?= go
TOOL := $(GO) tool -modfile=tools/go.mod
SHARED ?= ../shared
VECTOR_FAMILIES := knative riff keda
BENCH ?= .
BENCHTIME ?= 1s
FUZZTIME ?= 10s
FOR ?=
REGISTRY ?=
TAG ?=
PLATFORMS ?=
BASE ?=

.PHONY: all generate build test prepare unit lint fuzz bench bench-knative bench-coldstart pareto conformance conformance-shared run e2e keda knative scale image chart clean

all: build

## generate: regenerate the Go code for proto/ and the CRDs (deepcopy, manifests, clientset), with pinned tools.
generate:
	$(TOOL) buf generate
	hack/update-crds.sh
	hack/update-codegen.sh

## build: the three services' binaries and tidal-sim (the what-if simulator) in bin/.
build:
	@mkdir -p bin
	$(GO) build -o bin/tidal-collector ./services/collector
	$(GO) build -o bin/tidal-decider ./services/decider
	$(GO) build -o bin/tidal-actuator ./services/actuator
	$(GO) build -o bin/tidal-sim ./services/sim

## test: unit and integration tests, the end-to-end tests, then conformance on every shared vector family.
test: prepare unit e2e conformance-shared

## prepare: build what the tests run, up front and with progress, so nothing is compiled inside a test's
## deadline: the pinned tools the tests call (Helm, grpcurl), the Kubernetes control plane (once per
## version, then cached), and every test binary.
prepare:
	@echo "== prepare: pinned tools the tests run (Helm, grpcurl); minutes on a cold cache"
	$(GO) build -modfile=tools/go.mod helm.sh/helm/v3/cmd/helm github.com/fullstorydev/grpcurl/cmd/grpcurl
	@echo "== prepare: the Kubernetes control plane for the tests (built once per version, then cached)"
	$(GO) run ./test/cluster/cmd/testcluster build
	@echo "== prepare: the services as ko builds the images (CGO_ENABLED=0, -trimpath: a build cache of its own), which test/chart checks"
	@d=$$(mktemp -d) && CGO_ENABLED=0 $(GO) build -trimpath -ldflags="-s -w" -o $$d/ ./services/collector ./services/decider ./services/actuator; \
		rc=$$?; rm -rf "$$d"; exit $$rc
	@echo "== prepare: the images as make image builds them (ko, linux/amd64 and linux/arm64; arm64 compiles everything once: minutes on a cold cache), which test/image builds again"
	@d=$$(mktemp -d) && $(GO) run ./hack/image -out $$d >/dev/null; rc=$$?; rm -rf "$$d"; exit $$rc
	@echo "== prepare: compiling every test binary"
	$(GO) test -count=1 -run '^$$' ./...
	@echo "== prepare: done"

## unit: every package's tests but the end-to-end ones; test/scale last and alone, as its guard runs 300 targets
## with about 900 pods and three services, and other packages' test clusters starved beside it on two cores.
unit:
	$(GO) test -count=1 -timeout 60m $$($(GO) list ./... | grep -v -e '/test/e2e$$' -e '/test/scale$$')
	@echo "== unit: test/scale alone"
	$(GO) test -count=1 -timeout 30m ./test/scale

conformance-shared:
	@found=0; for fam in $(VECTOR_FAMILIES); do \
		d=$(SHARED)/vectors/$$fam; [ -d "$$d" ] || continue; found=1; \
		echo "== conformance $$d"; \
		$(GO) run ./test/conformance "$$d" || exit 1; \
	done; \
	if [ $$found = 0 ]; then echo "no vector families under $(SHARED)/vectors: skipping conformance"; fi

## conformance: replay every vector file in VECTORS=DIR.
conformance:
	@if [ -z "$(VECTORS)" ]; then echo "usage: make conformance VECTORS=DIR" >&2; exit 2; fi
	@$(GO) run ./test/conformance "$(VECTORS)"

## lint: formatting, vet, golangci-lint, buf lint and format, generated-code drift.
lint:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@# test/benchknative is no test's module: vet it here so its go.mod does not fall behind tidal's unseen.
	cd test/benchknative && $(GO) vet ./...
	$(TOOL) golangci-lint run ./...
	$(TOOL) buf lint
	$(TOOL) buf format -d --exit-code
	hack/verify-generated.sh
	hack/verify-crds.sh
	hack/verify-codegen.sh

## fuzz: every Go fuzz target (func FuzzXxx, found in the packages' tests) for FUZZTIME each (default 10s), one
## at a time: go test -fuzz takes one target per run. Their seed corpora already run in `make unit`. A run that
## fails with only "context deadline exceeded" and writes no failing input is Go 1.26's fuzzing coordinator racing
## its own -fuzztime deadline on a busy machine (golang/go#75804, fixed in Go 1.27): that target runs once more.
fuzz:
	@set -eo pipefail; \
	pkgs=$$($(GO) list -f '{{.ImportPath}} {{.Dir}}' ./... | while read -r p d; do \
		if grep -qs '^func Fuzz' "$$d"/*_test.go; then echo "$$p"; fi; done); \
	targets=$$($(GO) test -list '^Fuzz' $$pkgs | \
		awk '/^Fuzz/ { t[n++] = $$1 } /^ok/ { for (i = 0; i < n; i++) print $$2, t[i]; n = 0 }'); \
	if [ -z "$$targets" ]; then echo "no fuzz targets found" >&2; exit 1; fi; \
	out=$$(mktemp); trap 'rm -f "$$out"' EXIT; \
	echo "$$targets" | while read -r p t; do \
		echo "== fuzz $$p $$t ($(FUZZTIME))"; \
		corpus="$$($(GO) list -f '{{.Dir}}' "$$p")/testdata/fuzz/$$t"; \
		before=$$(ls "$$corpus" 2>/dev/null | wc -l || true); \
		for try in 1 2; do \
			if $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZTIME) "$$p" 2>&1 | tee "$$out"; then break; fi; \
			if [ $$try = 1 ] && grep -q '^    context deadline exceeded$$' "$$out" && \
				[ "$$(ls "$$corpus" 2>/dev/null | wc -l || true)" = "$$before" ]; then \
				echo "== fuzz $$t: the coordinator's deadline race (golang/go#75804), no failing input: once more"; continue; fi; \
			exit 1; \
		done; \
	done

## bench: every Go benchmark (BENCH=regexp, BENCHTIME=1s); figures go to BENCHMARKS.md.
bench:
	$(GO) test -p 1 -run='^$$' -bench='$(BENCH)' -benchtime=$(BENCHTIME) -benchmem ./...

## bench-knative: tidal and Knative Serving v0.50.0 side by side on the same inputs, in one run, then each
## pair's ratio (test/benchknative, its own module; the first build takes minutes); bin/bench-knative*.txt keep both.
bench-knative:
	@mkdir -p bin
	set -o pipefail; cd test/benchknative && \
		$(GO) test -run '^$$' -bench . -benchmem -count 1 -timeout 60m | tee ../../bin/bench-knative.txt && \
		$(GO) run ./cmd/benchratio < ../../bin/bench-knative.txt | tee ../../bin/bench-knative-ratios.txt

## bench-coldstart: BENCHMARKS.md's "Cold-start race": on one test cluster with Knative Serving v0.50.0's controller
## and activator binary, a revision at zero wakes on a request COLDSTART_WAKEUPS times with tidal deciding, then as
## many with Knative's own autoscaler; each side's p50/p99 to spec.replicas > 0 and to the answer, and the ratios
## (test/knative/serving/e2e's TestColdStartRace; needs root, as `make knative`). bin/bench-coldstart.txt keeps the log.
COLDSTART_WAKEUPS ?= 50
bench-coldstart:
	$(GO) run ./test/cluster/cmd/testcluster build
	cd test/knative && $(GO) run ./cmd/servingbuild
	$(GO) build ./services/...
	@mkdir -p bin
	cd test/knative && $(GO) test -c -o ../../bin/knative-serving-e2e.test ./serving/e2e
	set -o pipefail; cd test/knative/serving/e2e && ../../../../bin/knative-serving-e2e.test -test.run '^TestColdStartRace$$' \
		-test.count=1 -test.timeout=60m -test.v -coldstart-wakeups=$(COLDSTART_WAKEUPS) | tee ../../../../bin/bench-coldstart.txt

## pareto: BENCHMARKS.md's "Predictive keep-alive": tidal-sim generates a trace of the paper's mix (seeded: the same
## bytes every time) in bin/pareto/, replays it through Knative's defaults and the predictive keep-alive, each at
## every fixed keep-alive of PARETO_SWEEP, prints the table (also bin/pareto/table.txt) and draws PARETO_PNG.
## About 5 minutes on two cores, niced.
PARETO_FUNCTIONS ?= 500
PARETO_DAYS ?= 3
PARETO_SEED ?= 1
PARETO_SWEEP ?= 0,1m,2m,5m,10m,20m,30m,45m,60m
PARETO_PNG ?= docs/img/keepalive-pareto.png
pareto:
	@mkdir -p bin/pareto $(dir $(PARETO_PNG))
	$(GO) build -o bin/tidal-sim ./services/sim
	rm -f bin/pareto/invocations_per_function_md.anon.d*.csv
	bin/tidal-sim generate -functions $(PARETO_FUNCTIONS) -days $(PARETO_DAYS) -seed $(PARETO_SEED) -out bin/pareto
	set -o pipefail; nice -n 10 bin/tidal-sim -config sim/testdata/keepalive.yaml -seed $(PARETO_SEED) \
		-azure $$(ls bin/pareto/invocations_per_function_md.anon.d*.csv | paste -sd, -) \
		-keep-alive-sweep $(PARETO_SWEEP) -pareto $(PARETO_PNG) | tee bin/pareto/table.txt

## run: the whole system on an embedded cluster with a live table; FOR=3m ends by itself, Ctrl-C ends
## it early; writes bin/run-<time>.png and stops everything it started. KNATIVE=1: the Knative scene instead,
## Knative Serving's real controller and tidal in Knative mode scaling a Knative Service (needs root).
run:
ifeq ($(KNATIVE),)
	@mkdir -p bin
	@echo "building bin/tidal-run (the Kubernetes control plane is built on first use, then cached)"
	$(GO) build -o bin/tidal-run ./hack/run
	@bin/tidal-run $(if $(FOR),-for=$(FOR))
else
	@echo "== run, Knative scene: the Kubernetes control plane and Knative Serving's binaries (each built once, then cached; cold: about 10 and 25 minutes)"
	$(GO) run ./test/cluster/cmd/testcluster build
	cd test/knative && $(GO) run ./cmd/servingbuild
	@mkdir -p bin
	@echo "== run, Knative scene: building the scene (test/knative/serving/e2e's TestKnativeRun; needs root)"
	cd test/knative && $(GO) test -c -o ../../bin/knative-serving-e2e.test ./serving/e2e
	@cd test/knative/serving/e2e && ../../../../bin/knative-serving-e2e.test -test.run '^TestKnativeRun$$' -test.count=1 \
		-test.timeout=0 -knative-run-for=$(or $(FOR),8760h)
endif

## e2e: end-to-end tests: the three services as processes, a real API server with kwok pods, kfake.
e2e:
	$(GO) test -count=1 -timeout 60m ./test/e2e/...

## keda: tidal's external scaler driven by KEDA v2.21.0's own client code, and by KEDA's own operator and metrics
## API server with kube-controller-manager's HPA (test/keda, its own module). Builds first, with progress and
## outside any test deadline: the control plane, the services, then KEDA's packages (cold: about 25 minutes on two
## cores; cached after that), KEDA's binaries (test/keda/operator, cached outside the checkout) and the test binary;
## then runs the tests (about 12 minutes).
keda:
	@echo "== keda: the Kubernetes control plane (built once per version, then cached)"
	$(GO) run ./test/cluster/cmd/testcluster build
	@echo "== keda: the services"
	$(GO) build ./services/...
	@echo "== keda: KEDA's client and every other package the tests import (cold: about 25 minutes on two cores)"
	@set -o pipefail; cd test/keda && \
		pkgs=$$($(GO) list -deps -test . | grep -v '^github.com/tidalscale/tidal/test/keda'); \
		total=$$(echo "$$pkgs" | wc -l); \
		$(GO) build -v $$pkgs 2>&1 | awk -v total=$$total \
			'/^#|\.go:[0-9]+/ { print; next } { if (++n % 200 == 0) printf "   %d packages compiled (of %d; cached ones are not counted)\n", n, total }'
	@echo "== keda: KEDA's operator and metrics API server (built once per test/keda/module/go.mod, then cached; cold, after the step above: minutes)"
	cd test/keda && $(GO) run ./cmd/kedabuild
	@mkdir -p bin
	cd test/keda && $(GO) test -c -o ../../bin/keda.test .
	@echo "== keda: running"
	cd test/keda && ../../bin/keda.test -test.count=1 -test.timeout=30m -test.v -vectors $(abspath $(SHARED))/vectors/keda

## knative: tidal against Knative Serving v0.50.0's own code (test/knative, its own module). The activator tests:
## the activator's ConcurrencyReporter and ReportStats over knative.dev/pkg's durable websocket to the collector's
## activator endpoint. The e2e tests (test/knative/serving/e2e): Knative's real controller and tidal's three
## services in Knative mode on a test cluster, a Knative Service scaled up, down, to zero and back, requests through
## Knative's activator binary to the simulated pods; then tidal stopped and Knative's own autoscaler taking the
## PodAutoscaler back. They need root (private /etc/hosts, port 80
## of a loopback address, the controller's network namespace) and :8080 free (Knative's autoscaler).
## Builds first, outside any test deadline: the control plane and Knative's binaries are cached (cold: about
## 10 and 25 minutes on two cores); then the tests take a few minutes.
knative:
	@echo "== knative: the Kubernetes control plane (built once per version, then cached)"
	$(GO) run ./test/cluster/cmd/testcluster build
	@echo "== knative: Knative Serving's controller, autoscaler and activator (built once per go.mod, then cached)"
	cd test/knative && $(GO) run ./cmd/servingbuild
	@echo "== knative: the services, Knative's packages and the test binaries (cold: minutes on two cores)"
	$(GO) build ./services/...
	@mkdir -p bin
	cd test/knative && $(GO) test -c -o ../../bin/knative.test .
	cd test/knative && $(GO) test -c -o ../../bin/knative-serving-e2e.test ./serving/e2e
	@echo "== knative: the activator tests"
	cd test/knative && ../../bin/knative.test -test.count=1 -test.timeout=15m -test.v
	@echo "== knative: Knative's controller with tidal, then Knative's autoscaler taking over"
	cd test/knative/serving/e2e && ../../../../bin/knative-serving-e2e.test -test.count=1 -test.timeout=30m -test.v

## scale: the whole system at scale on a test cluster of its own, then a report of latencies and costs
## (SCALE="-kpa 1000 -lag 100 -for 3m"; defaults: 10,000 KPA + 1,000 lag targets for 10 minutes; "-replicas 2"
## runs two of each service; bin/tidal-scale -h lists every flag). TestScaleGuard runs 300 targets in `make unit`, alone.
scale:
	@mkdir -p bin
	$(GO) build -o bin/tidal-scale ./test/scale/cmd/scale
	@bin/tidal-scale $(SCALE)

## image: tidal-collector, tidal-decider and tidal-actuator built with ko (pinned in hack/ko/go.mod), no container
## engine: static binaries for linux/amd64 and linux/arm64 (PLATFORMS=) on an offline static base, as user 65532, the
## same digest from the same commit. Without REGISTRY each is an OCI layout in bin/image/; REGISTRY=host/path pushes
## REGISTRY/tidal-SERVICE:TAG (TAG defaults to the chart's appVersion). bin/image/images.yaml pins the digests for
## helm -f. BASE=image@sha256:... builds on that base (pulled) instead.
image:
	$(GO) run ./hack/image -out bin/image$(if $(REGISTRY), -registry $(REGISTRY))$(if $(TAG), -tag $(TAG))$(if $(PLATFORMS), -platforms $(PLATFORMS))$(if $(BASE), -base $(BASE))

## chart: helm lint and template of charts/tidal with the pinned Helm (make test runs the full chart tests).
chart:
	$(TOOL) helm lint --strict charts/tidal --kube-version v1.37.2
	$(TOOL) helm template tidal charts/tidal --kube-version v1.37.2 >/dev/null

clean:
	rm -rf bin
