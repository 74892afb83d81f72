// Package certsecret keeps tidal's generated certificates in Kubernetes
// Secrets: a CA, and per identity a kubernetes.io/tls Secret (tls.crt,
// tls.key, ca.crt) whose certificate's one URI SAN is the identity's SPIFFE
// ID. The chart's certificate Job runs it at install and at every upgrade:
// Helm's template functions cannot write URI SANs, and this keeps the CA's
// key out of Helm's release record.
//
// A run changes only what needs it: a certificate is kept while it is signed
// by the CA, names the wanted identity and DNS names, matches its key and is
// not in the last third of its life; otherwise it is signed anew. The CA is
// kept while it outlives a new certificate.
package certsecret

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/tidalscale/tidal/identity"
	"github.com/tidalscale/tidal/identity/pki"
)

// Annotations each identity's Secret carries, for people and for tests: the
// identity, and when its certificate expires (Unix seconds).
const (
	AnnotationID       = "tidal.dev/spiffe-id"
	AnnotationNotAfter = "tidal.dev/not-after"
)

// caLifetimes is the CA's validity in certificates' validities.
const caLifetimes = 10

// Spec is what a run keeps.
type Spec struct {
	// CA is the Secret holding the CA (tls.crt, tls.key); made when missing.
	CA Ref `json:"ca"`
	// CAName is the CA's subject common name.
	CAName string `json:"caName"`
	// Validity is each certificate's; the CA's is ten times as long.
	Validity Duration `json:"validity"`
	// Labels go on every Secret the run writes.
	Labels map[string]string `json:"labels,omitempty"`
	// Identities are the certificates to keep.
	Identities []Identity `json:"identities"`
}

// Ref names a Secret.
type Ref struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (r Ref) String() string { return r.Namespace + "/" + r.Name }

// Identity is one certificate's Secret and what it names.
type Identity struct {
	Secret Ref `json:"secret"`
	// ID is the SPIFFE ID, the certificate's URI SAN and common name.
	ID string `json:"id"`
	// DNSNames are those a client verifies when the identity serves.
	DNSNames []string `json:"dnsNames,omitempty"`
	// Labels go on this Secret, over Spec.Labels.
	Labels map[string]string `json:"labels,omitempty"`
}

// Duration is a time.Duration written as Go writes one ("8760h").
type Duration time.Duration

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	s, err := strconv.Unquote(string(b))
	if err != nil {
		return fmt.Errorf("duration %s: want a quoted string such as \"8760h\"", identity.Quote(string(b)))
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %s: %w", identity.Quote(s), err)
	}
	*d = Duration(v)
	return nil
}

// String is the duration as Go writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.Quote(time.Duration(d).String())), nil
}

// Validate refuses a spec a run cannot keep, naming the field.
func (s *Spec) Validate() error {
	if s.CA.Namespace == "" || s.CA.Name == "" {
		return errors.New("ca: want a namespace and a name")
	}
	if s.CAName == "" {
		return errors.New("caName: empty")
	}
	if s.Validity <= 0 {
		return fmt.Errorf("validity %s: want more than 0", time.Duration(s.Validity))
	}
	seen := map[Ref]bool{s.CA: true}
	for i, id := range s.Identities {
		if id.Secret.Namespace == "" || id.Secret.Name == "" {
			return fmt.Errorf("identities[%d].secret: want a namespace and a name", i)
		}
		if seen[id.Secret] {
			return fmt.Errorf("identities[%d].secret %s: named twice", i, identity.Quote(id.Secret.String()))
		}
		seen[id.Secret] = true
		if _, err := identity.Parse(id.ID); err != nil {
			return fmt.Errorf("identities[%d].id: %w", i, err)
		}
		for j, name := range id.DNSNames {
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				return fmt.Errorf("identities[%d].dnsNames[%d] %s: %s", i, j, identity.Quote(name), errs[0])
			}
		}
	}
	return nil
}

// Result is what a run did to one Secret.
type Result struct {
	Secret Ref
	// Issued is false when the Secret was kept as it was.
	Issued bool
	// Why it was signed anew, or kept.
	Reason string
}

// Ensure keeps the CA and every identity's certificate of spec, at now.
func Ensure(ctx context.Context, client kubernetes.Interface, spec Spec, now time.Time) ([]Result, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	validity := time.Duration(spec.Validity)
	ca, caRes, err := ensureCA(ctx, client, spec, now)
	if err != nil {
		return nil, err
	}
	results := []Result{caRes}
	for _, want := range spec.Identities {
		id, _ := identity.Parse(want.ID) // checked by Validate
		old, err := get(ctx, client, want.Secret)
		if err != nil {
			return results, err
		}
		why, ok := keep(old, ca, id, want.DNSNames, validity, now)
		if ok {
			results = append(results, Result{Secret: want.Secret, Reason: why})
			continue
		}
		iss, err := ca.Issue(pki.Leaf{ID: id, DNSNames: want.DNSNames, Validity: validity})
		if err != nil {
			return results, fmt.Errorf("secret %s: %w", want.Secret, err)
		}
		sec := newSecret(want.Secret, merged(spec.Labels, want.Labels), map[string][]byte{
			corev1.TLSCertKey:       iss.CertPEM,
			corev1.TLSPrivateKeyKey: iss.KeyPEM,
			pki.CAFile:              ca.CertPEM,
		})
		sec.Annotations = map[string]string{
			AnnotationID:       id.String(),
			AnnotationNotAfter: strconv.FormatInt(iss.Cert.NotAfter.Unix(), 10),
		}
		if err := put(ctx, client, old, sec); err != nil {
			return results, err
		}
		results = append(results, Result{Secret: want.Secret, Issued: true, Reason: why})
	}
	return results, nil
}

// ensureCA loads the CA from its Secret, or makes one when the Secret is
// missing, unreadable or would not outlive a new certificate.
func ensureCA(ctx context.Context, client kubernetes.Interface, spec Spec, now time.Time) (*pki.CA, Result, error) {
	validity := time.Duration(spec.Validity)
	old, err := get(ctx, client, spec.CA)
	if err != nil {
		return nil, Result{}, err
	}
	why := "missing"
	if old != nil {
		ca, err := pki.ParseCA(old.Data[corev1.TLSCertKey], old.Data[corev1.TLSPrivateKeyKey])
		switch {
		case err != nil:
			why = err.Error()
		case ca.Cert.NotAfter.Before(now.Add(validity)):
			why = "expires within a certificate's validity, at " + ca.Cert.NotAfter.UTC().Format(time.RFC3339)
		default:
			return ca, Result{Secret: spec.CA, Reason: "valid until " + ca.Cert.NotAfter.UTC().Format(time.RFC3339)}, nil
		}
	}
	ca, err := pki.NewCA(spec.CAName, caLifetimes*validity)
	if err != nil {
		return nil, Result{}, err
	}
	key, err := ca.KeyPEM()
	if err != nil {
		return nil, Result{}, err
	}
	sec := newSecret(spec.CA, spec.Labels, map[string][]byte{corev1.TLSCertKey: ca.CertPEM, corev1.TLSPrivateKeyKey: key})
	sec.Annotations = map[string]string{"tidal.dev/note": "CA of tidal's generated certificates; no service mounts it. Delete it and upgrade to rotate the CA and every certificate."}
	if err := put(ctx, client, old, sec); err != nil {
		return nil, Result{}, err
	}
	return ca, Result{Secret: spec.CA, Issued: true, Reason: why}, nil
}

// keep reports whether old still serves, and why it does or does not.
func keep(old *corev1.Secret, ca *pki.CA, id identity.ID, dns []string, validity time.Duration, now time.Time) (string, bool) {
	if old == nil {
		return "missing", false
	}
	if !bytes.Equal(old.Data[pki.CAFile], ca.CertPEM) {
		return "signed by another CA", false
	}
	pair, err := tls.X509KeyPair(old.Data[corev1.TLSCertKey], old.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return "unreadable: " + err.Error(), false
	}
	cert := pair.Leaf // parsed by X509KeyPair
	if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
		return "not signed by the CA", false
	}
	got, err := identity.FromCertificate(cert)
	if err != nil || got != id {
		return "names another identity", false
	}
	if !slices.Equal(cert.DNSNames, dns) {
		return "names other DNS names", false
	}
	if left := cert.NotAfter.Sub(now); left < validity/3 {
		return "in the last third of its life, expires " + cert.NotAfter.UTC().Format(time.RFC3339), false
	}
	return "valid until " + cert.NotAfter.UTC().Format(time.RFC3339), true
}

func get(ctx context.Context, client kubernetes.Interface, ref Ref) (*corev1.Secret, error) {
	sec, err := client.CoreV1().Secrets(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get secret %s: %w", ref, err)
	}
	return sec, nil
}

// put creates sec, or replaces old with it: an update carries old's
// resourceVersion, so a concurrent writer makes it fail rather than be lost.
func put(ctx context.Context, client kubernetes.Interface, old, sec *corev1.Secret) error {
	secrets := client.CoreV1().Secrets(sec.Namespace)
	if old == nil {
		if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create secret %s/%s: %w", sec.Namespace, sec.Name, err)
		}
		return nil
	}
	sec.ResourceVersion = old.ResourceVersion
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	return nil
}

func newSecret(ref Ref, labels map[string]string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name, Labels: labels},
		Type:       corev1.SecretTypeTLS,
		Data:       data,
	}
}

func merged(a, b map[string]string) map[string]string {
	if len(a)+len(b) == 0 {
		return nil
	}
	m := maps.Clone(a)
	if m == nil {
		m = map[string]string{}
	}
	maps.Copy(m, b)
	return m
}
