package lag

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
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
}

// key identifies a cluster and its credentials; targets with equal keys
// share one client.
func (c Cluster) key() string {
	b := slices.Clone(c.Brokers)
	slices.Sort(b)
	h := sha256.New()
	fmt.Fprintf(h, "%q|%v|%q|%q|%q|%q|%q|%q|%q", b, c.Auth.TLS, c.Auth.CA, c.Auth.Cert, c.Auth.Key, c.Auth.ServerName, c.Auth.SASL, c.Auth.User, c.Auth.Password)
	return hex.EncodeToString(h.Sum(nil))
}

// options turns the cluster into franz-go client options.
func (c Cluster) options() ([]kgo.Opt, error) {
	if len(c.Brokers) == 0 {
		return nil, fmt.Errorf("brokers: want at least one host:port")
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
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
		opts = append(opts, kgo.DialTLSConfig(cfg))
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
