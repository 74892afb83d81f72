package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/identity/certsecret"
	"github.com/tidalscale/tidal/services/kube"
	"github.com/tidalscale/tidal/services/server"
)

// certificatesCommand is the subcommand the chart's certificate Job runs
// (tls.mode=generated): it keeps the CA and the identities' certificates in
// their Secrets, then exits.
const certificatesCommand = "certificates"

// certificatesConfig is the subcommand's flags.
type certificatesConfig struct {
	kube     kube.Config
	spec     string
	logLevel string
}

func (c *certificatesConfig) RegisterFlags(fs *flag.FlagSet) {
	c.kube.RegisterFlags(fs, 5, 10)
	fs.StringVar(&c.spec, "spec", "", "The certificates to keep, as JSON: {\"ca\": {\"namespace\", \"name\"}, \"caName\", \"validity\": \"8760h\", \"labels\", \"identities\": [{\"secret\": {\"namespace\", \"name\"}, \"id\": SPIFFE ID, \"dnsNames\", \"labels\"}]}.")
	fs.StringVar(&c.logLevel, "log-level", "info", "Log level: debug, info, warn or error.")
}

func (c *certificatesConfig) Validate() error {
	if c.spec == "" {
		return errors.New("--spec: empty")
	}
	return c.kube.Validate()
}

// parseSpec reads the spec strictly: an unknown field is a typo that
// would otherwise drop a setting.
func parseSpec(s string) (certsecret.Spec, error) {
	var spec certsecret.Spec
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&spec); err != nil {
		return spec, fmt.Errorf("--spec %s: %w", identity.Quote(s), err)
	}
	if dec.More() {
		return spec, fmt.Errorf("--spec %s: more than one JSON value", identity.Quote(s))
	}
	if err := spec.Validate(); err != nil {
		return spec, fmt.Errorf("--spec: %w", err)
	}
	return spec, nil
}

func runCertificates(ctx context.Context, args []string, stderr io.Writer) error {
	var cfg certificatesConfig
	if err := server.Parse("tidal-actuator "+certificatesCommand, &cfg, args, stderr); err != nil {
		return err
	}
	spec, err := parseSpec(cfg.spec)
	if err != nil {
		return err
	}
	log, err := server.NewLogger("actuator-certificates", cfg.logLevel)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	rc, err := cfg.kube.RestConfig("tidal-actuator-certificates")
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	results, err := certsecret.Ensure(ctx, client, spec, time.Now())
	for _, r := range results {
		log.Info("certificate", zap.Stringer("secret", r.Secret), zap.Bool("issued", r.Issued), zap.String("reason", r.Reason))
	}
	return err
}
