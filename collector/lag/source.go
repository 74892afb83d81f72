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
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// Auth is how to reach a Kafka cluster: TLS and SASL, as KEDA's Kafka
// scaler takes them (ParseAuth).
type Auth struct {
	// TLS enables TLS; CA, Cert and Key are PEM (Cert and Key for mutual TLS).
	TLS            bool
	CA, Cert, Key  []byte
	ServerName     string
	SASL           string // "", SASLPlain, SASLSCRAM256, SASLSCRAM512 or SASLOAuthBearer
	User, Password string
	// TokenProvider is OAUTHBEARER's: TokenBearer (an OAuth 2 client
	// credentials token from TokenURL for client User with secret
	// Password, for Scopes, sent with Extensions) or TokenAWSMSKIAM (AWS
	// MSK IAM, signed with the AWS keys for AWSRegion).
	TokenProvider string
	TokenURL      string
	Scopes        []string
	Extensions    map[string]string
	AWSRegion     string
	AWSKeyID      string
	AWSSecretKey  string
	AWSToken      string
	// MaxVersion caps the Kafka protocol at a release (KEDA's version key,
	// "2.8.0", as MaxVersions reads it); empty means whatever the brokers
	// offer (KEDA's sarama then speaks 1.0's protocol: the answers are the
	// same).
	MaxVersion string
}

// KEDA's names of the SASL mechanisms and OAUTHBEARER token providers.
const (
	SASLPlain       = "plaintext"
	SASLSCRAM256    = "scram_sha256"
	SASLSCRAM512    = "scram_sha512"
	SASLOAuthBearer = "oauthbearer"
	TokenBearer     = "bearer"
	TokenAWSMSKIAM  = "aws_msk_iam"
)

// AuthKeys are the keys ParseAuth reads: KEDA's Kafka trigger keys for a
// secured cluster. SecretAuthKeys are those whose values are secrets:
// never quoted in an error or a log.
var (
	AuthKeys = []string{"tls", "ca", "cert", "key", "keyPassword", "sasl", "username", "password",
		"saslTokenProvider", "oauthTokenEndpointUri", "scopes", "oauthExtensions",
		"awsRegion", "awsAccessKeyID", "awsSecretAccessKey", "awsSessionToken", "version"}
	SecretAuthKeys = []string{"key", "keyPassword", "password", "awsSecretAccessKey", "awsSessionToken"}
)

// AuthError is ParseAuth's error: the key at fault and what it wants. It
// quotes no value.
type AuthError struct{ Key, Want string }

func (e *AuthError) Error() string { return "key " + e.Key + ": " + e.Want }

// ParseAuth reads KEDA's Kafka auth keys through get (a Secret's data, a
// trigger's metadata): tls (enable, disable), ca, cert, key, sasl (none,
// plaintext, scram_sha256, scram_sha512, oauthbearer), username, password,
// for oauthbearer saslTokenProvider (bearer: oauthTokenEndpointUri, scopes,
// oauthExtensions, the client's username and password; aws_msk_iam:
// awsRegion, awsAccessKeyID, awsSecretAccessKey, awsSessionToken), and
// version. An unusable value is an *AuthError naming the key.
func ParseAuth(get func(key string) string) (Auth, error) {
	var a Auth
	// Secrets and PEM are taken as they are; names and settings trimmed.
	value := get
	raw := func(k string) []byte {
		if v := value(k); v != "" {
			return []byte(v)
		}
		return nil
	}
	get = func(k string) string { return strings.TrimSpace(value(k)) }
	switch v := get("tls"); v {
	case "", "disable":
	case "enable":
		a.TLS = true
	default:
		return a, &AuthError{"tls", "enable or disable"}
	}
	a.CA, a.Cert, a.Key = raw("ca"), raw("cert"), raw("key")
	if (len(a.Cert) == 0) != (len(a.Key) == 0) {
		return a, &AuthError{"cert", "cert and key together, or neither"}
	}
	if !a.TLS && len(a.CA)+len(a.Cert) > 0 {
		return a, &AuthError{"ca", "ca, cert and key only with tls: enable"}
	}
	if get("keyPassword") != "" {
		return a, &AuthError{"keyPassword", "no keyPassword: an encrypted private key is not supported; give the key unencrypted (from a Secret)"}
	}
	if a.TLS {
		// Refuse unusable PEM now, not at every connection.
		if _, err := tlsConfig(a); err != nil {
			return a, err
		}
	}
	a.User, a.Password = get("username"), string(raw("password"))
	switch v := get("sasl"); v {
	case "", "none":
	case SASLPlain, SASLSCRAM256, SASLSCRAM512:
		a.SASL = v
		if a.User == "" || a.Password == "" {
			return a, &AuthError{"password", "username and password with sasl " + v}
		}
	case SASLOAuthBearer:
		a.SASL = v
		if err := parseOAuth(&a, get, raw); err != nil {
			return a, err
		}
	case "gssapi":
		return a, &AuthError{"sasl", "plaintext, scram_sha256, scram_sha512, oauthbearer or none: Kerberos (gssapi) is not supported"}
	default:
		return a, &AuthError{"sasl", "plaintext, scram_sha256, scram_sha512, oauthbearer or none"}
	}
	if v := get("version"); v != "" {
		if _, err := MaxVersions(v); err != nil {
			return a, err
		}
		a.MaxVersion = v
	}
	return a, nil
}

func parseOAuth(a *Auth, get func(string) string, raw func(string) []byte) error {
	switch a.TokenProvider = get("saslTokenProvider"); a.TokenProvider {
	case "":
		a.TokenProvider = TokenBearer
		fallthrough
	case TokenBearer:
		a.TokenURL = get("oauthTokenEndpointUri")
		u, err := url.Parse(a.TokenURL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return &AuthError{"oauthTokenEndpointUri", "the OAuth token endpoint, an https URL"}
		}
		if a.User == "" || a.Password == "" {
			return &AuthError{"password", "the OAuth client's id (username) and secret (password) with sasl oauthbearer"}
		}
		for sc := range strings.SplitSeq(get("scopes"), ",") {
			if sc = strings.TrimSpace(sc); sc != "" {
				a.Scopes = append(a.Scopes, sc)
			}
		}
		for kv := range strings.SplitSeq(get("oauthExtensions"), ",") {
			if kv = strings.TrimSpace(kv); kv == "" {
				continue
			}
			k, v, ok := strings.Cut(kv, "=")
			if !ok || k == "" {
				return &AuthError{"oauthExtensions", "key=value pairs separated by commas"}
			}
			if a.Extensions == nil {
				a.Extensions = map[string]string{}
			}
			a.Extensions[k] = v
		}
	case TokenAWSMSKIAM:
		a.AWSRegion, a.AWSKeyID, a.AWSSecretKey, a.AWSToken = get("awsRegion"), get("awsAccessKeyID"), string(raw("awsSecretAccessKey")), string(raw("awsSessionToken"))
		if a.AWSRegion == "" {
			return &AuthError{"awsRegion", "the brokers' AWS region with saslTokenProvider aws_msk_iam"}
		}
		if a.AWSKeyID == "" || a.AWSSecretKey == "" {
			return &AuthError{"awsSecretAccessKey", "awsAccessKeyID and awsSecretAccessKey with saslTokenProvider aws_msk_iam"}
		}
	default:
		return &AuthError{"saslTokenProvider", "bearer or aws_msk_iam"}
	}
	return nil
}

// AuthFromSecret reads KEDA's Kafka auth keys from a Secret's data
// (ParseAuth). An unusable value names the key.
func AuthFromSecret(data map[string][]byte) (Auth, error) {
	a, err := ParseAuth(func(k string) string { return string(data[k]) })
	if err != nil {
		return a, fmt.Errorf("secret %w", err)
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
	// %#v writes every field of Auth, a map's keys sorted.
	fmt.Fprintf(h, "%q|%#v|%v", b, c.Auth, c.Allow != nil)
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
		cfg, err := tlsConfig(c.Auth)
		if err != nil {
			return nil, err
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
	if m := c.mechanism(); m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	if c.Auth.MaxVersion != "" {
		v, err := MaxVersions(c.Auth.MaxVersion)
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.MaxVersions(v))
	}
	return opts, nil
}

// tlsConfig is a's TLS configuration: its CA (else the system's roots) and
// client certificate.
func tlsConfig(a Auth) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: a.ServerName}
	if len(a.CA) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(a.CA) {
			return nil, &AuthError{"ca", "PEM certificates"}
		}
		cfg.RootCAs = pool
	}
	if len(a.Cert) > 0 {
		cert, err := tls.X509KeyPair(a.Cert, a.Key)
		if err != nil {
			// The error of a key that does not parse says nothing of it.
			return nil, &AuthError{"cert", "a PEM certificate and the unencrypted PEM key (key) that goes with it"}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// mechanism is the cluster's SASL mechanism, nil for none.
func (c Cluster) mechanism() sasl.Mechanism {
	a := c.Auth
	switch a.SASL {
	case SASLPlain:
		return plain.Auth{User: a.User, Pass: a.Password}.AsMechanism()
	case SASLSCRAM256:
		return scram.Auth{User: a.User, Pass: a.Password}.AsSha256Mechanism()
	case SASLSCRAM512:
		return scram.Auth{User: a.User, Pass: a.Password}.AsSha512Mechanism()
	case SASLOAuthBearer:
		if a.TokenProvider == TokenAWSMSKIAM {
			return aws.Auth{AccessKey: a.AWSKeyID, SecretKey: a.AWSSecretKey, SessionToken: a.AWSToken}.AsManagedStreamingIAMMechanism()
		}
		return oauthMechanism(a, c.Allow)
	}
	return nil
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
