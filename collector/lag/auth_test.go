package lag

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOAuthBearerToken: OAUTHBEARER's first message carries a token of the
// client credentials flow, fetched once for the client and its scopes and
// reused, with the extensions; a token endpoint Allow refuses is never
// asked.
func TestOAuthBearerToken(t *testing.T) {
	var asked atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		id, secret, _ := r.BasicAuth()
		if err := r.ParseForm(); err != nil || id != "client" || secret != "secret" ||
			r.PostForm.Get("grant_type") != "client_credentials" || r.PostForm.Get("scope") != "kafka read" {
			http.Error(w, "bad client", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": "tok-1", "token_type": "bearer", "expires_in": 3600})
	}))
	defer srv.Close()
	a := Auth{SASL: SASLOAuthBearer, TokenProvider: TokenBearer, User: "client", Password: "secret", TokenURL: srv.URL + "/token",
		Scopes: []string{"kafka", "read"}, Extensions: map[string]string{"logicalCluster": "lkc-1"}}
	m := Cluster{Auth: a}.mechanism()
	if m == nil || m.Name() != "OAUTHBEARER" {
		t.Fatalf("mechanism %v; want OAUTHBEARER", m)
	}
	ctx := context.Background()
	for range 2 {
		_, msg, err := m.Authenticate(ctx, "kafka:9092")
		if err != nil {
			t.Fatal(err)
		}
		if s := string(msg); !strings.Contains(s, "auth=Bearer tok-1") || !strings.Contains(s, "logicalCluster=lkc-1") {
			t.Errorf("first message %q; want the token and the extension", s)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the token endpoint was asked %d times; want once (the token is reused until it expires)", n)
	}

	refused := Cluster{Auth: a, Allow: func(string) bool { return false }}.mechanism()
	if _, _, err := refused.Authenticate(ctx, "kafka:9092"); !errors.Is(err, ErrBrokerNotAllowed) {
		t.Errorf("an endpoint Allow refuses: %v; want ErrBrokerNotAllowed", err)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the refused endpoint was asked (%d requests in all)", n)
	}
	a.Password = "wrong"
	_, _, err := Cluster{Auth: a}.mechanism().Authenticate(ctx, "kafka:9092")
	if err == nil || strings.Contains(err.Error(), "wrong") {
		t.Errorf("a refused client: %v; want an error that does not quote its secret", err)
	}
}

// TestAWSMSKIAM: AWS MSK IAM signs for the region in the broker's host name
// with the access key, and sends no secret.
func TestAWSMSKIAM(t *testing.T) {
	a, err := ParseAuth(func(k string) string {
		return map[string]string{"sasl": "oauthbearer", "saslTokenProvider": "aws_msk_iam", "awsRegion": "eu-west-1",
			"awsAccessKeyID": "AKIDEXAMPLE", "awsSecretAccessKey": "wJalrXUtnFEMI", "awsSessionToken": "session-token"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	m := Cluster{Auth: a}.mechanism()
	if m == nil || m.Name() != "AWS_MSK_IAM" {
		t.Fatalf("mechanism %v; want AWS_MSK_IAM", m)
	}
	_, msg, err := m.Authenticate(context.Background(), "b-1.shop.a1b2c3.c2.kafka.eu-west-1.amazonaws.com:9098")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(msg, &got); err != nil {
		t.Fatalf("first message %q: %v", msg, err)
	}
	if !strings.HasPrefix(got["x-amz-credential"], "AKIDEXAMPLE/") || !strings.Contains(got["x-amz-credential"], "/eu-west-1/kafka-cluster/") ||
		got["x-amz-security-token"] != "session-token" || strings.Contains(string(msg), "wJalrXUtnFEMI") {
		t.Errorf("first message %s; want the key id, the region, the session token and no secret", msg)
	}
}

// TestFetchMutualTLS: a broker that requires a client certificate is read
// with the trigger's certificate and key, and refuses a client without.
func TestFetchMutualTLS(t *testing.T) {
	cert, caPEM := selfSigned(t)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	c := kfake.MustCluster(kfake.NumBrokers(1), kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}))
	defer c.Close()
	certPEM, keyPEM := pemPair(t, cert)
	good := lagTarget("mtls", c, "input", "fn")
	good.Cluster.Auth = Auth{TLS: true, CA: caPEM, Cert: certPEM, Key: keyPEM}
	cl, err := kgo.NewClient(mustOpts(t, good.Cluster)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 2, 1, nil, "input"); err != nil {
		t.Fatal(err)
	}
	anonymous := lagTarget("anonymous", c, "input", "fn")
	anonymous.Cluster.Auth = Auth{TLS: true, CA: caPEM}
	rec := newRecorder()
	f, _ := newFetcher(t, rec)
	f.cfg.Timeout = time.Second
	f.Set(good)
	f.Set(anonymous)
	f.FetchNow(context.Background())
	if s, e := rec.last("ns/mtls"); s == nil || e != "" || s.GetPartitionCount() != 2 {
		t.Errorf("with a client certificate: sample %v error %q; want 2 partitions", s, e)
	}
	if s, e := rec.last("ns/anonymous"); s != nil || e == "" {
		t.Errorf("without a client certificate: sample %v error %q; want an error state", s, e)
	}
}
