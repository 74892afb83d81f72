// Package pki makes the certificates of tidal's identities: a CA, and per
// identity a key and a certificate whose one URI SAN is the identity's
// SPIFFE ID, usable as server and as client. hack/certs and the tests write
// them as PEM files in the layout of a kubernetes.io/tls Secret (tls.crt,
// tls.key, ca.crt), which --tls-cert-file, --tls-key-file and --tls-ca-file
// take as they are; the chart's certificate Job (identity/certsecret) keeps
// them in Secrets.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/tidalscale/tidal/identity"
)

// The file names of one identity's directory, those of a kubernetes.io/tls
// Secret's keys.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// clockSkew is how far before now a certificate becomes valid, so a peer
// whose clock is a little behind accepts it.
const clockSkew = 5 * time.Minute

// CA signs identities' certificates.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// CertPEM is Cert in PEM.
	CertPEM []byte
}

// NewCA makes a self-signed CA valid for validity.
func NewCA(name string, validity time.Duration) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{ // no SerialNumber: CreateCertificate draws a random one
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	return &CA{Cert: cert, Key: key, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// LoadCA reads a CA from its PEM certificate and key files.
func LoadCA(certFile, keyFile string) (*CA, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	ca, err := ParseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA %s, %s: %w", certFile, keyFile, err)
	}
	return ca, nil
}

// ParseCA reads a CA from its PEM certificate and key.
func ParseCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	cert := pair.Leaf // parsed by X509KeyPair
	if !cert.IsCA {
		return nil, errors.New("not a CA certificate")
	}
	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("key cannot sign")
	}
	return &CA{Cert: cert, Key: signer, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})}, nil
}

// Leaf is what a certificate names besides its validity.
type Leaf struct {
	// ID is the SPIFFE ID, the certificate's one URI SAN; the zero ID makes
	// a certificate without identity (for tests of refusal).
	ID identity.ID
	// CommonName is the subject's common name; empty means the ID.
	CommonName string
	// DNSNames and IPs are the names a client may verify as a server's.
	DNSNames []string
	IPs      []net.IP
	Validity time.Duration
}

// Issued is a signed certificate and its key, in PEM.
type Issued struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
}

// Issue signs a certificate for leaf, usable as server and as client.
func (ca *CA) Issue(leaf Leaf) (*Issued, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("key of %s: %w", leaf.ID, err)
	}
	if leaf.Validity <= 0 {
		return nil, fmt.Errorf("certificate of %s: validity %s, want more than 0", leaf.ID, leaf.Validity)
	}
	cn := leaf.CommonName
	if cn == "" {
		cn = leaf.ID.String()
	}
	now := time.Now()
	tmpl := &x509.Certificate{ // no SerialNumber: CreateCertificate draws a random one
		Subject:               pkix.Name{CommonName: cn},
		DNSNames:              leaf.DNSNames,
		IPAddresses:           leaf.IPs,
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(leaf.Validity),
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if !leaf.ID.IsZero() {
		u, err := url.Parse(leaf.ID.String())
		if err != nil {
			return nil, fmt.Errorf("URI SAN %s: %w", leaf.ID, err)
		}
		tmpl.URIs = []*url.URL{u}
	}
	if ca.Cert.NotAfter.Before(tmpl.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter // never outlive the CA
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("certificate of %s: %w", leaf.ID, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certificate of %s: %w", leaf.ID, err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("key of %s: %w", leaf.ID, err)
	}
	return &Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}),
		Cert:    cert,
	}, nil
}

// KeyPEM is the CA's key in PEM (PKCS #8).
func (ca *CA) KeyPEM() ([]byte, error) {
	kb, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
}

// WriteDir writes iss and the CA's certificate to dir as tls.crt, tls.key
// and ca.crt, the key readable by the owner only.
func (ca *CA) WriteDir(dir string, iss *Issued) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("certificate directory: %w", err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{CertFile, iss.CertPEM, 0o644}, {KeyFile, iss.KeyPEM, 0o600}, {CAFile, ca.CertPEM, 0o644}} {
		if err := os.WriteFile(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("write %s: %w", f.name, err)
		}
	}
	return nil
}

// Files are the paths of one identity's PEM files.
type Files struct{ Cert, Key, CA string }

// DirFiles are the paths WriteDir writes in dir.
func DirFiles(dir string) Files {
	return Files{Cert: filepath.Join(dir, CertFile), Key: filepath.Join(dir, KeyFile), CA: filepath.Join(dir, CAFile)}
}
