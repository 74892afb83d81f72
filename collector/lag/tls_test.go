package lag

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// selfSigned returns a certificate for 127.0.0.1, for a server or a client,
// and its PEM.
func selfSigned(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kfake"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	cert, err := tls.X509KeyPair(certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}))
	if err != nil {
		t.Fatal(err)
	}
	return cert, certPEM
}

// pemPair is cert and its key in PEM.
func pemPair(t *testing.T, cert tls.Certificate) (certPEM, keyPEM []byte) {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

func TestFetchTLS(t *testing.T) {
	cert, caPEM := selfSigned(t)
	c := kfake.MustCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	defer c.Close()
	good := lagTarget("tls", c, "input", "fn")
	good.Cluster.Auth = Auth{TLS: true, CA: caPEM}
	cl, err := kgo.NewClient(mustOpts(t, good.Cluster)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 3, 1, nil, "input"); err != nil {
		t.Fatal(err)
	}
	untrusted := lagTarget("untrusted", c, "input", "fn")
	untrusted.Cluster.Auth = Auth{TLS: true} // system roots do not know the self-signed CA
	rec := newRecorder()
	f, _ := newFetcher(t, rec)
	f.cfg.Timeout = time.Second
	f.Set(good)
	f.Set(untrusted)
	f.FetchNow(context.Background())
	if s, e := rec.last("ns/tls"); s == nil || e != "" || s.GetPartitionCount() != 3 {
		t.Errorf("with the CA: sample %v error %q; want 3 partitions", s, e)
	}
	if s, e := rec.last("ns/untrusted"); s != nil || e == "" {
		t.Errorf("untrusted certificate: sample %v error %q; want an error state", s, e)
	}
}

// TestAllowWithTLS: a cluster with Allow does TLS in its own dialer, with
// the broker's host as the server name, and is read as without Allow.
func TestAllowWithTLS(t *testing.T) {
	cert, caPEM := selfSigned(t)
	c := kfake.MustCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}))
	defer c.Close()
	tg := lagTarget("tls", c, "input", "fn")
	tg.Cluster.Auth = Auth{TLS: true, CA: caPEM}
	cl, err := kgo.NewClient(mustOpts(t, tg.Cluster)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 2, 1, nil, "input"); err != nil {
		t.Fatal(err)
	}
	tg.Cluster.Allow = func(string) bool { return true }
	tg.OnDemand = true
	f, _ := newFetcher(t, newRecorder())
	f.Set(tg)
	if s, err := f.Poll(context.Background(), tg.Ref); err != nil || s.GetPartitionCount() != 2 {
		t.Errorf("Poll over TLS with Allow = %v, %v; want 2 partitions", s, err)
	}
}
