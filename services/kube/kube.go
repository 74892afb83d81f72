// Package kube is how the tidal binaries that talk to Kubernetes (the
// collector and the actuator) build their client configuration, with one set
// of flags. It is apart from services/server so the decider, which calls no
// Kubernetes API, does not link client-go.
package kube

import (
	"errors"
	"flag"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"
)

// Config is the Kubernetes client configuration of a binary.
type Config struct {
	// Kubeconfig is a kubeconfig path; empty means the in-cluster config, or
	// outside a pod the usual loading rules ($KUBECONFIG, ~/.kube/config).
	Kubeconfig string
	// QPS and Burst bound the binary's requests to the API server.
	QPS   float64
	Burst int
}

// RegisterFlags registers --kubeconfig, --kube-qps and --kube-burst, with
// the binary's defaults for the last two.
func (c *Config) RegisterFlags(fs *flag.FlagSet, qps float64, burst int) {
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "Path of a kubeconfig; empty means the in-cluster config, or $KUBECONFIG / ~/.kube/config outside a pod.")
	fs.Float64Var(&c.QPS, "kube-qps", qps, "Sustained requests per second to the Kubernetes API, shared by all of the binary's clients.")
	fs.IntVar(&c.Burst, "kube-burst", burst, "Burst of requests to the Kubernetes API, shared by all of the binary's clients.")
}

// Validate refuses limits the client cannot use.
func (c *Config) Validate() error {
	if c.QPS <= 0 {
		return fmt.Errorf("--kube-qps %g: want > 0", c.QPS)
	}
	if c.Burst < 1 {
		return fmt.Errorf("--kube-burst %d: want at least 1", c.Burst)
	}
	return nil
}

// RestConfig loads the client configuration, naming the binary in every
// request's user agent.
func (c *Config) RestConfig(userAgent string) (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if c.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
		if errors.Is(err, rest.ErrNotInCluster) {
			rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
				clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	rc.QPS, rc.Burst = float32(c.QPS), c.Burst
	// One limiter for every client built from this config (copies share
	// it): otherwise each clientset, the scale client and the event sink
	// would each get the whole budget.
	rc.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(rc.QPS, rc.Burst)
	rc.UserAgent = userAgent
	return rc, nil
}
