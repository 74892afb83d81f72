package release

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/tidalscale/tidal/test/cluster"
)

// Account is one ServiceAccount, authenticated by a token from the
// TokenRequest API as the kubelet gets one for a pod.
type Account struct {
	Namespace, Name string
	// Config holds the cluster's address and CA and the token, nothing of
	// the admin's.
	Config *rest.Config
}

// NewAccount requests a token for ns/name valid for ttl and checks the API
// server takes it for that account.
func NewAccount(ctx context.Context, c *cluster.Cluster, ns, name string, ttl time.Duration) (*Account, error) {
	secs := int64(ttl / time.Second)
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for %s/%s: %w", ns, name, err)
	}
	admin := c.Config()
	cfg := &rest.Config{
		Host:            admin.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData},
		BearerToken:     tr.Status.Token,
		QPS:             50,
		Burst:           100,
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	who, err := kube.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("whoami with %s/%s's token: %w", ns, name, err)
	}
	if got, want := who.Status.UserInfo.Username, "system:serviceaccount:"+ns+":"+name; got != want {
		return nil, fmt.Errorf("token of %s/%s authenticates as %q, want %q", ns, name, got, want)
	}
	return &Account{Namespace: ns, Name: name, Config: cfg}, nil
}

// WriteKubeconfig writes a kubeconfig authenticating as a to path, for a
// service's --kubeconfig.
func (a *Account) WriteKubeconfig(path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: a.Config.Host, CertificateAuthorityData: a.Config.CAData}
	kc.AuthInfos[a.Name] = &clientcmdapi.AuthInfo{Token: a.Config.BearerToken}
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: a.Name}
	kc.CurrentContext = "test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("kubeconfig of %s/%s: %w", a.Namespace, a.Name, err)
	}
	return nil
}

// Accounts are an installed release's three ServiceAccounts.
type Accounts struct {
	Release Options
	// ByComponent maps collector, decider and actuator to their accounts.
	ByComponent map[string]*Account
	// Objects are what was rendered.
	Objects []*unstructured.Unstructured
}

// InstallAccounts installs o on c for real and returns its accounts, with
// tokens valid for ttl. The caller deletes the returned cluster-scoped
// objects when done.
func InstallAccounts(ctx context.Context, c *cluster.Cluster, o Options, ttl time.Duration) (*Accounts, []*unstructured.Unstructured, error) {
	objs, clusterScoped, _, err := Install(ctx, c.Config(), o, false)
	if err != nil {
		return nil, clusterScoped, err
	}
	acc := &Accounts{Release: o, ByComponent: map[string]*Account{}, Objects: objs}
	for _, comp := range Components {
		name := ""
		for _, obj := range objs {
			if obj.GetKind() == "Deployment" && obj.GetName() == o.Fullname()+"-"+comp {
				var d appsv1.Deployment
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &d); err != nil {
					return nil, clusterScoped, err
				}
				name = d.Spec.Template.Spec.ServiceAccountName
			}
		}
		if name == "" {
			return nil, clusterScoped, fmt.Errorf("release %s renders no Deployment %s-%s", o.Name, o.Fullname(), comp)
		}
		a, err := NewAccount(ctx, c, o.Namespace, name, ttl)
		if err != nil {
			return nil, clusterScoped, err
		}
		acc.ByComponent[comp] = a
	}
	return acc, clusterScoped, nil
}

// ForTest installs the chart with the default values plus set in a new
// namespace of c, deletes its cluster-scoped objects when t ends, and
// returns the accounts. End-to-end tests use it to run the services under
// the chart's RBAC:
//
//	acc := release.ForTest(t, c)
//	args, err := acc.SystemArgs(t.TempDir(), 4)
//	// merge args into test/system's Options.Args
func ForTest(t testing.TB, c *cluster.Cluster, set ...string) *Accounts {
	t.Helper()
	ns := c.Namespace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := Options{Name: "r" + ns[strings.LastIndex(ns, "-")+1:], Namespace: ns, Set: set}
	acc, clusterScoped, err := InstallAccounts(ctx, c, o, time.Hour)
	t.Cleanup(func() {
		a, err := NewApplier(c.Config())
		if err != nil {
			t.Logf("release cleanup: %v", err)
			return
		}
		for _, obj := range clusterScoped {
			if err := a.Delete(context.Background(), obj); err != nil {
				t.Logf("delete %s %s: %v", obj.GetKind(), obj.GetName(), err)
			}
		}
	})
	if err != nil {
		t.Fatalf("install the chart: %v", err)
	}
	return acc
}

// SystemArgs are the flags that make test/system's processes run as the
// chart runs its pods: the collector and the actuator each with a
// kubeconfig of its own account (written to dir), the collector's buckets
// (0 for none) in Leases in the release namespace. A later flag wins, so
// these replace test/system's admin kubeconfig. The decider calls no
// Kubernetes API and gets nothing.
func (a *Accounts) SystemArgs(dir string, buckets int) (map[string][]string, error) {
	args := map[string][]string{}
	for _, comp := range []string{"collector", "actuator"} {
		path := filepath.Join(dir, comp+".kubeconfig")
		if err := a.ByComponent[comp].WriteKubeconfig(path); err != nil {
			return nil, err
		}
		args[comp] = []string{"--kubeconfig", path}
	}
	if buckets > 0 {
		args["collector"] = append(args["collector"], "--buckets", strconv.Itoa(buckets),
			"--lease-namespace", a.Release.Namespace, "--lease-prefix", a.Release.Fullname()+"-collector")
	}
	return args, nil
}
