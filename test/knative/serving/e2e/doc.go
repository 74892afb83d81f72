// Package e2e runs Knative Serving v0.50.0's real controller (built and
// cached by test/knative/serving) against a test cluster beside tidal's
// collector, decider and actuator in Knative mode, and checks that a Knative
// Service is scaled by tidal as Knative's KPA would scale it; then that,
// once tidal's services stop, Knative's own autoscaler takes the
// PodAutoscaler back and scales the Service itself.
// TestMigrationHelmInstallToUninstall runs the whole migration of
// docs/knative.md with the chart installed, upgraded and uninstalled by the
// pinned Helm between two spells of Knative's own autoscaler. TestKnativeRun,
// skipped unless -knative-run-for is set, is `make run KNATIVE=1`'s scene.
//
// It is a package of its own, not more tests beside test/knative's
// activator tests, because it needs its own TestMain (a shared test cluster,
// stopped at exit) and runs Knative's processes, which bind fixed ports:
// :8080 for the controller's health probes (knative.dev/pkg
// injection.HealthCheckDefaultPort, kept apart in a network namespace of the
// controller's own) and for the autoscaler's stats server; its tests must
// not run in parallel with each other.
//
// What the test writes by hand, and why (nothing else of Knative's is faked):
//   - the private Services' Endpoints, as kube-controller-manager's endpoints
//     controller would write them: the test cluster's pod IPs are loopback
//     addresses, which the API refuses in Endpoints, so the test mirrors each
//     Ready pod with its IP moved to 198.18.0.0/15 (a benchmarking range
//     nothing here dials);
//   - the activator-service Endpoints in knative-serving (two addresses in
//     192.0.2.0/24, TEST-NET-1): no activator pod runs; Knative's
//     ServerlessService reconciler needs them to put the activator in the
//     path. TestKnativeActivatorBinary runs Knative's activator binary as
//     the first of them (its POD_IP), in a network namespace of its own
//     where relays stand in for the Services it dials (activator_test.go);
//     the other tests run Knative's activator reporting code in-process
//     (test/knative/knactivator);
//   - the status of each KIngress, which an ingress implementation (Kourier,
//     Istio, ...), not Knative Serving, writes;
//   - the cluster DNS and kube-proxy for the activator probe: tidal's actuator
//     (and later Knative's autoscaler) runs in a mount namespace of its own whose /etc/hosts maps the
//     revision's public Service name to a loopback address where the test
//     routes a request as the Service's Endpoints say: to Knative's activator
//     probe handler when Knative's SKS reconciler has pointed them at the
//     activator, else to the revision's pods (which answer an activator probe
//     with 400, as a queue-proxy does).
package e2e
