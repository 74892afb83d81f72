// Package identity is who calls a tidal service: a SPIFFE ID
// (spiffe://TRUST-DOMAIN/ns/NAMESPACE/sa/SERVICEACCOUNT, the form
// cert-manager's csi-driver-spiffe, Istio and Linkerd issue), read from the
// URI SAN of a verified client certificate.
package identity

import (
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// scheme starts every SPIFFE ID.
const scheme = "spiffe://"

// MaxLen bounds an ID, as the SPIFFE ID specification does (2048 bytes).
const MaxLen = 2048

// The bytes a trust domain and a path segment may hold.
const (
	trustDomainChars = "abcdefghijklmnopqrstuvwxyz0123456789.-_"
	pathChars        = trustDomainChars + "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
)

// quoteLen bounds how much of a refused value an error quotes: room for
// any ServiceAccount ID of a reasonable namespace and name.
const quoteLen = 100

// ID is a parsed SPIFFE ID. The zero ID is no identity.
type ID struct {
	trustDomain string
	// path is empty or starts with '/'; no segment is empty, "." or "..".
	path string
}

// Parse reads a SPIFFE ID: the lower-case scheme spiffe://, a trust domain
// of [a-z0-9._-], and a path of non-empty segments of [a-zA-Z0-9._-] other
// than "." and "..". A workload ID needs a path, so a bare trust domain is
// refused; so are a port, user info, a query, a fragment, percent-encoding
// and a trailing '/'.
func Parse(s string) (ID, error) {
	if len(s) > MaxLen {
		return ID{}, fmt.Errorf("SPIFFE ID %s: longer than %d bytes", Quote(s), MaxLen)
	}
	rest, ok := strings.CutPrefix(s, scheme)
	if !ok {
		return ID{}, fmt.Errorf("SPIFFE ID %s: want the scheme %s", Quote(s), scheme)
	}
	td, path, _ := strings.Cut(rest, "/")
	if err := checkTrustDomain(td); err != nil {
		return ID{}, fmt.Errorf("SPIFFE ID %s: %w", Quote(s), err)
	}
	if path == "" {
		return ID{}, fmt.Errorf("SPIFFE ID %s: want a path after the trust domain", Quote(s))
	}
	for i, seg := range strings.Split(path, "/") {
		if err := checkSegment(seg); err != nil {
			return ID{}, fmt.Errorf("SPIFFE ID %s: path segment %d: %w", Quote(s), i+1, err)
		}
	}
	return ID{trustDomain: td, path: "/" + path}, nil
}

// New is the ID of a Kubernetes ServiceAccount:
// spiffe://trustDomain/ns/namespace/sa/serviceAccount.
func New(trustDomain, namespace, serviceAccount string) (ID, error) {
	return Parse(scheme + trustDomain + "/ns/" + namespace + "/sa/" + serviceAccount)
}

// MustNew is New for constants; it panics on a malformed ID.
func MustNew(trustDomain, namespace, serviceAccount string) ID {
	id, err := New(trustDomain, namespace, serviceAccount)
	if err != nil {
		panic(err)
	}
	return id
}

func checkTrustDomain(td string) error {
	if td == "" {
		return errors.New("empty trust domain")
	}
	for i := 0; i < len(td); i++ {
		c := td[i]
		if strings.IndexByte(trustDomainChars, c) < 0 {
			return fmt.Errorf("trust domain: byte %q at %d: want a-z, 0-9, '.', '-' or '_'", c, i)
		}
	}
	return nil
}

func checkSegment(seg string) error {
	switch seg {
	case "":
		return errors.New("empty (a '//' or a trailing '/')")
	case ".", "..":
		return fmt.Errorf("%q is not allowed", seg)
	}
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if strings.IndexByte(pathChars, c) < 0 {
			return fmt.Errorf("byte %q at %d: want a-z, A-Z, 0-9, '.', '-' or '_'", c, i)
		}
	}
	return nil
}

// String is the ID in its URI form; the zero ID is "".
func (id ID) String() string {
	if id.IsZero() {
		return ""
	}
	return scheme + id.trustDomain + id.path
}

// IsZero reports whether id is no identity.
func (id ID) IsZero() bool { return id.trustDomain == "" }

// TrustDomain is the ID's trust domain.
func (id ID) TrustDomain() string { return id.trustDomain }

// ServiceAccount returns the namespace and name of an ID of the form
// /ns/NAMESPACE/sa/NAME.
func (id ID) ServiceAccount() (namespace, name string, ok bool) {
	seg := strings.Split(strings.TrimPrefix(id.path, "/"), "/")
	if len(seg) != 4 || seg[0] != "ns" || seg[2] != "sa" {
		return "", "", false
	}
	return seg[1], seg[3], true
}

// ErrNoIdentity is returned by FromCertificate for a certificate that names
// no SPIFFE ID.
var ErrNoIdentity = errors.New("certificate names no SPIFFE ID")

// FromCertificate reads the identity of a verified leaf certificate: its one
// URI SAN, which must be a SPIFFE ID (an X.509-SVID has exactly one). The
// subject's common name never counts: most CAs let a requester choose it.
func FromCertificate(cert *x509.Certificate) (ID, error) {
	if cert == nil {
		return ID{}, errors.New("no certificate")
	}
	if cert.IsCA {
		return ID{}, errors.New("certificate is a CA's, not a workload's")
	}
	switch len(cert.URIs) {
	case 0:
		return ID{}, ErrNoIdentity
	case 1:
		id, err := Parse(cert.URIs[0].String())
		if err != nil {
			return ID{}, fmt.Errorf("URI SAN: %w", err)
		}
		return id, nil
	default:
		return ID{}, fmt.Errorf("certificate has %d URI SANs; want one SPIFFE ID", len(cert.URIs))
	}
}

// Quote is s quoted for an error or a log line, cut to a bounded prefix:
// callers may send anything.
func Quote(s string) string {
	if len(s) > quoteLen {
		return fmt.Sprintf("%q...", s[:quoteLen])
	}
	return fmt.Sprintf("%q", s)
}
