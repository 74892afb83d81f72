package kedavector

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"time"

	"github.com/tidalscale/tidal/identity/pki"
)

// LoopbackTLS makes a CA and a broker certificate it signs for 127.0.0.1,
// valid for an hour: the broker's TLS configuration (kfake.TLS), a client's
// that trusts the CA (kgo.DialTLSConfig), and the CA's PEM, which a
// trigger's ca key takes.
func LoopbackTLS() (server, client *tls.Config, caPEM []byte, err error) {
	ca, err := pki.NewCA("kfake test CA", time.Hour)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("test CA: %w", err)
	}
	iss, err := ca.Issue(pki.Leaf{CommonName: "kfake", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Validity: time.Hour})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("broker certificate: %w", err)
	}
	serving, err := tls.X509KeyPair(iss.CertPEM, iss.KeyPEM)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("broker certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	return &tls.Config{Certificates: []tls.Certificate{serving}, MinVersion: tls.VersionTLS12},
		&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, ca.CertPEM, nil
}
