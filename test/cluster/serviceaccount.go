package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// ServiceAccountConfig returns a REST config that authenticates as the
// ServiceAccount ns/name, creating the account if it does not exist, with a
// one-hour token from the TokenRequest API. Use it to run a component with
// the RBAC it will have in a real cluster rather than as admin.
func (c *Cluster) ServiceAccountConfig(ctx context.Context, ns, name string) (*rest.Config, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	_, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, sa, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("service account %s/%s: %w", ns, name, err)
	}
	expiry := int64(3600)
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for service account %s/%s: %w", ns, name, err)
	}
	cfg := c.Config()
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

// WriteKubeconfig writes cfg (its host, CA and bearer token) as a kubeconfig
// in the cluster directory, for a process a test starts, and returns its
// path. The file goes away with the cluster.
func (c *Cluster) WriteKubeconfig(name string, cfg *rest.Config) (string, error) {
	dir := filepath.Join(c.Dir, "kubeconfigs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("write kubeconfig: %w", err)
	}
	path := filepath.Join(dir, filepath.Base(name))
	if err := writeKubeconfig(path, cfg); err != nil {
		return "", err
	}
	return path, nil
}
