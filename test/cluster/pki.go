package cluster

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	idpki "github.com/tidalscale/tidal/identity/pki"
)

// pki holds the files the control plane is started with: a CA, the API
// server's serving certificate signed by it, the service-account signing key
// pair, and a static admin token.
type pki struct {
	caCert, servingCert, servingKey string // paths
	saKey, saPub                    string // paths
	tokens                          string // path of the token file
	caPEM                           []byte
	adminToken                      string
	// The front proxy's CA (a CA of its own, as aggregated API servers
	// require) and the client certificate the API server presents when it
	// proxies to one (an APIService's server, KEDA's metrics server).
	frontProxyCA, proxyCert, proxyKey string // paths
}

// frontProxyName is the front proxy client certificate's common name, the
// one name --requestheader-allowed-names allows.
const frontProxyName = "front-proxy-client"

// newPKI writes fresh keys into dir. Nothing is reused between clusters, so a
// leaked kubeconfig is worthless once its cluster has stopped.
func newPKI(dir string) (*pki, error) {
	p := &pki{
		caCert:      filepath.Join(dir, "ca.crt"),
		servingCert: filepath.Join(dir, "apiserver.crt"),
		servingKey:  filepath.Join(dir, "apiserver.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		saPub:       filepath.Join(dir, "sa.pub"),
		tokens:      filepath.Join(dir, "tokens.csv"),

		frontProxyCA: filepath.Join(dir, "front-proxy-ca.crt"),
		proxyCert:    filepath.Join(dir, "front-proxy-client.crt"),
		proxyKey:     filepath.Join(dir, "front-proxy-client.key"),
	}

	// The cluster's CA and the API server's serving certificate; the front
	// proxy's CA (a CA of its own, as aggregated API servers require) and
	// its client certificate.
	const validity = 7 * 24 * time.Hour
	ca, err := idpki.NewCA("tidal-test-cluster-ca", validity)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	p.caPEM = ca.CertPEM
	serving, err := ca.Issue(idpki.Leaf{CommonName: "kube-apiserver", Validity: validity,
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}})
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	fpCA, err := idpki.NewCA("tidal-test-front-proxy-ca", validity)
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}
	proxy, err := fpCA.Issue(idpki.Leaf{CommonName: frontProxyName, Validity: validity})
	if err != nil {
		return nil, fmt.Errorf("pki: %w", err)
	}

	// The API server signs service-account tokens with RSA (RS256).
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("pki: service-account key: %w", err)
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("pki: service-account key: %w", err)
	}

	token := make([]byte, 24)
	if _, err := rand.Read(token); err != nil {
		return nil, fmt.Errorf("pki: token: %w", err)
	}
	p.adminToken = hex.EncodeToString(token)

	files := []struct {
		path string
		data []byte
	}{
		{p.caCert, p.caPEM},
		{p.servingCert, serving.CertPEM},
		{p.servingKey, serving.KeyPEM},
		{p.saKey, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)})},
		{p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPubDER})},
		// token,user,uid,"group1,group2"
		{p.tokens, []byte(p.adminToken + ",admin,admin,system:masters\n")},
		{p.frontProxyCA, fpCA.CertPEM},
		{p.proxyCert, proxy.CertPEM},
		{p.proxyKey, proxy.KeyPEM},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, fmt.Errorf("pki: %w", err)
		}
	}
	return p, nil
}
