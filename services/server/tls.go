package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tidalscale/tidal/identity"
)

// TLSConfig is the optional mutual TLS between tidal's services. With all
// three files set, every server asks for and verifies a client certificate
// signed by the CA, and every client presents its certificate and verifies
// the server's; with none set, traffic is plaintext.
type TLSConfig struct {
	CertFile, KeyFile, CAFile string
	// ServerName overrides the name a client checks in the server's
	// certificate; empty means the host part of the address dialled.
	ServerName string
}

// RegisterFlags registers the TLS flags on fs.
func (c *TLSConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CertFile, "tls-cert-file", "", "PEM certificate this service presents, as server and as client; empty means plaintext.")
	fs.StringVar(&c.KeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file.")
	fs.StringVar(&c.CAFile, "tls-ca-file", "", "PEM CA bundle that peers' certificates must chain to.")
	fs.StringVar(&c.ServerName, "tls-server-name", "", "Name expected in peers' server certificates; empty means the dialled host.")
}

// Enabled reports whether mutual TLS is configured.
func (c *TLSConfig) Enabled() bool { return c.CertFile != "" || c.KeyFile != "" || c.CAFile != "" }

// Validate checks that the files are given together and can be loaded.
func (c *TLSConfig) Validate() error {
	if !c.Enabled() {
		return nil
	}
	if c.CertFile == "" || c.KeyFile == "" || c.CAFile == "" {
		return fmt.Errorf("--tls-cert-file %q, --tls-key-file %q, --tls-ca-file %q: set all three or none", c.CertFile, c.KeyFile, c.CAFile)
	}
	_, _, err := c.load()
	return err
}

func (c *TLSConfig) load() (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("--tls-cert-file %s, --tls-key-file %s: %w", c.CertFile, c.KeyFile, err)
	}
	pem, err := os.ReadFile(c.CAFile)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("--tls-ca-file %s: %w", c.CAFile, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return tls.Certificate{}, nil, fmt.Errorf("--tls-ca-file %s: %w", c.CAFile, errors.New("no PEM certificate in it"))
	}
	return cert, pool, nil
}

// serverOption returns the transport credentials of a server. The
// certificate and the CA are read again when their files change, so a
// renewed certificate (cert-manager, the chart) is served without a restart.
func (c *TLSConfig) serverOption() (grpc.ServerOption, error) {
	files, err := newReloader(*c)
	if err != nil {
		return nil, err
	}
	return grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool := files.get()
			return &tls.Config{
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
				MinVersion:   tls.VersionTLS13,
				// This config replaces the one gRPC completed, so it names
				// HTTP/2 for ALPN itself.
				NextProtos: []string{"h2"},
			}, nil
		},
	})), nil
}

// reloadCheck is how often the files are looked at, at most: on a
// handshake, not by a timer.
var reloadCheck = 10 * time.Second

// reloader holds the loaded certificate and CA pool and reloads them when
// the files' size or modification time changes; a failed reload keeps the
// last good pair (a half-written Secret update must not end service).
type reloader struct {
	cfg TLSConfig

	// mu guards the fields below.
	mu      sync.Mutex
	checked time.Time
	stamp   string
	cert    *tls.Certificate
	pool    *x509.CertPool
}

func newReloader(c TLSConfig) (*reloader, error) {
	r := &reloader{cfg: c}
	stamp, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, pool, err := c.load()
	if err != nil {
		return nil, err
	}
	r.stamp, r.cert, r.pool, r.checked = stamp, &cert, pool, time.Now()
	return r, nil
}

func (r *reloader) stat() (string, error) {
	var b strings.Builder
	for _, f := range []string{r.cfg.CertFile, r.cfg.KeyFile, r.cfg.CAFile} {
		st, err := os.Stat(f)
		if err != nil {
			return "", fmt.Errorf("TLS file: %w", err)
		}
		fmt.Fprintf(&b, "%d/%d;", st.Size(), st.ModTime().UnixNano())
	}
	return b.String(), nil
}

// get returns the current certificate and CA pool.
func (r *reloader) get() (*tls.Certificate, *x509.CertPool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Sub(r.checked) >= reloadCheck {
		r.checked = now
		if stamp, err := r.stat(); err == nil && stamp != r.stamp {
			if cert, pool, err := r.cfg.load(); err == nil {
				r.stamp, r.cert, r.pool = stamp, &cert, pool
			}
		}
	}
	return r.cert, r.pool
}

// peerTLS is the client side of mutual TLS to another tidal service: the
// server's certificate must chain to the CA and name one of want as its
// SPIFFE ID. Peers are dialled by pod IP (deciders found through the Pods
// API, actuator replicas forwarding to each other), which no certificate
// names, so the identity takes the place of the host name; ServerName, when
// set, is checked as well.
func (c *TLSConfig) peerTLS(want map[string]bool, role Role) (*tls.Config, error) {
	files, err := newReloader(*c)
	if err != nil {
		return nil, err
	}
	serverName := c.ServerName
	return &tls.Config{
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, _ := files.get()
			return cert, nil
		},
		MinVersion: tls.VersionTLS13,
		// The chain, the name and the identity are checked in
		// VerifyConnection below, which runs whatever this says.
		InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("server sent no certificate")
			}
			_, pool := files.get()
			leaf := cs.PeerCertificates[0]
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, DNSName: serverName, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				return fmt.Errorf("server certificate: %w", err)
			}
			id, err := identity.FromCertificate(leaf)
			if err != nil {
				return fmt.Errorf("server certificate: %w", err)
			}
			if !want[id.String()] {
				return fmt.Errorf("server %s is not a %s identity", identity.Quote(id.String()), role)
			}
			return nil
		},
	}, nil
}
