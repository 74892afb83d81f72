package lag

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Auth is how to reach a Kafka cluster: TLS and SASL, as KEDA's Kafka
// scaler takes them from a Secret.
type Auth struct {
	// TLS enables TLS; CA, Cert and Key are PEM (Cert and Key for mutual TLS).
	TLS            bool
	CA, Cert, Key  []byte
	ServerName     string
	SASL           string // "", "plaintext", "scram_sha256" or "scram_sha512"
	User, Password string
}

// AuthFromSecret reads KEDA's Kafka auth keys from a Secret's data: tls
// ("enable"), ca, cert, key, sasl ("plaintext", "scram_sha256",
// "scram_sha512" or "none"), username, password. An unknown value names
// the key.
func AuthFromSecret(data map[string][]byte) (Auth, error) {
	var a Auth
	switch v := strings.TrimSpace(string(data["tls"])); v {
	case "", "disable":
	case "enable":
		a.TLS = true
	default:
		return a, fmt.Errorf("secret key tls %q: want enable or disable", v)
	}
	a.CA, a.Cert, a.Key = data["ca"], data["cert"], data["key"]
	if (len(a.Cert) == 0) != (len(a.Key) == 0) {
		return a, fmt.Errorf("secret keys cert and key: want both or neither")
	}
	if !a.TLS && len(a.CA)+len(a.Cert) > 0 {
		return a, fmt.Errorf("secret keys ca/cert/key given without tls: enable")
	}
	switch v := strings.TrimSpace(string(data["sasl"])); v {
	case "", "none":
	case "plaintext", "scram_sha256", "scram_sha512":
		a.SASL = v
		a.User, a.Password = string(data["username"]), string(data["password"])
		if a.User == "" || a.Password == "" {
			return a, fmt.Errorf("secret key sasl %q: username and password are required", v)
		}
	default:
		return a, fmt.Errorf("secret key sasl %q: want none, plaintext, scram_sha256 or scram_sha512", v)
	}
	return a, nil
}

// Cluster is one Kafka cluster as targets name it.
type Cluster struct {
	Brokers []string
	Auth    Auth
	// Allow, when set, is asked before every connection to a broker, the
	// seeds and those the cluster advertises alike: an address (host:port)
	// it refuses is never dialled. Clusters named by whoever calls the
	// collector (a KEDA trigger's bootstrapServers) set it; every Allow of
	// a collector is the same policy, so the key records only that it is
	// set.
	Allow func(addr string) bool
}

// dialTimeout is franz-go's own default, kept when Allow replaces its dialer.
const dialTimeout = 10 * time.Second

// key identifies a cluster and its credentials; targets with equal keys
// share one client.
func (c Cluster) key() string {
	b := slices.Clone(c.Brokers)
	slices.Sort(b)
	h := sha256.New()
	fmt.Fprintf(h, "%q|%v|%q|%q|%q|%q|%q|%q|%q|%v", b, c.Auth.TLS, c.Auth.CA, c.Auth.Cert, c.Auth.Key, c.Auth.ServerName, c.Auth.SASL, c.Auth.User, c.Auth.Password, c.Allow != nil)
	return hex.EncodeToString(h.Sum(nil))
}

// options turns the cluster into franz-go client options.
func (c Cluster) options() ([]kgo.Opt, error) {
	if len(c.Brokers) == 0 {
		return nil, fmt.Errorf("brokers: want at least one host:port")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	var tlsCfg *tls.Config
	if c.Auth.TLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.Auth.ServerName}
		if len(c.Auth.CA) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(c.Auth.CA) {
				return nil, fmt.Errorf("tls ca: no PEM certificate")
			}
			cfg.RootCAs = pool
		}
		if len(c.Auth.Cert) > 0 {
			cert, err := tls.X509KeyPair(c.Auth.Cert, c.Auth.Key)
			if err != nil {
				return nil, fmt.Errorf("tls cert/key: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		tlsCfg = cfg
	}
	switch {
	case c.Allow != nil:
		// franz-go takes a dialer or a TLS config, not both: with Allow the
		// dialer does TLS itself.
		opts = append(opts, kgo.Dialer(allowDialer(c.Allow, tlsCfg)))
	case tlsCfg != nil:
		opts = append(opts, kgo.DialTLSConfig(tlsCfg))
	}
	var m sasl.Mechanism
	switch c.Auth.SASL {
	case "plaintext":
		m = plain.Auth{User: c.Auth.User, Pass: c.Auth.Password}.AsMechanism()
	case "scram_sha256":
		m = scram.Auth{User: c.Auth.User, Pass: c.Auth.Password}.AsSha256Mechanism()
	case "scram_sha512":
		m = scram.Auth{User: c.Auth.User, Pass: c.Auth.Password}.AsSha512Mechanism()
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// allowDialer dials only the addresses allow accepts, over TLS when cfg is
// set (its server name, when empty, the broker's host, as franz-go does).
func allowDialer(allow func(string) bool, cfg *tls.Config) func(ctx context.Context, network, host string) (net.Conn, error) {
	d := &net.Dialer{Timeout: dialTimeout}
	return func(ctx context.Context, network, host string) (net.Conn, error) {
		if !allow(host) {
			return nil, fmt.Errorf("broker %s: %w", commonv1.Prefix(host), ErrBrokerNotAllowed)
		}
		if cfg == nil {
			return d.DialContext(ctx, network, host)
		}
		c := cfg.Clone()
		if c.ServerName == "" {
			if h, _, err := net.SplitHostPort(host); err == nil {
				c.ServerName = h
			}
		}
		return (&tls.Dialer{NetDialer: d, Config: c}).DialContext(ctx, network, host)
	}
}

// ErrBrokerNotAllowed: a cluster's Allow refused a broker's address.
var ErrBrokerNotAllowed = errors.New("address not allowed")
