package lag

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

type recorder struct {
	mu      sync.Mutex
	samples map[string][]*commonv1.MetricSample
	errs    map[string]string
}

func newRecorder() *recorder {
	return &recorder{samples: map[string][]*commonv1.MetricSample{}, errs: map[string]string{}}
}

func (r *recorder) Record(ref *commonv1.TargetRef, s *commonv1.MetricSample) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples[ref.Key()] = append(r.samples[ref.Key()], s)
	delete(r.errs, ref.Key())
	return true
}

func (r *recorder) SetError(ref *commonv1.TargetRef, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[ref.Key()] = msg
}

func (r *recorder) last(key string) (*commonv1.MetricSample, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s *commonv1.MetricSample
	if n := len(r.samples[key]); n > 0 {
		s = r.samples[key][n-1]
	}
	return s, r.errs[key]
}

func newFetcher(t testing.TB, rec Recorder) (*Fetcher, *prometheus.Registry) {
	reg := prometheus.NewRegistry()
	f := New(Config{Tick: time.Hour, Timeout: 2 * time.Second}, rec, NewMetrics(reg), zap.NewNop())
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.clusters {
			if c.cl != nil {
				c.cl.Close()
			}
		}
	})
	return f, reg
}

// clockedFetcher is a fetcher of one target, fn, reading topic input as
// group fn on c, whose clock moves only by advance.
func clockedFetcher(t testing.TB, c *kfake.Cluster) (f *Fetcher, rec *recorder, advance func(time.Duration)) {
	rec = newRecorder()
	f, _ = newFetcher(t, rec)
	var mu sync.Mutex
	now := time.Now()
	f.now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	f.Set(lagTarget("fn", c, "input", "fn"))
	return f, rec, func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
}

// countRequests counts the requests of key c's brokers receive from now on,
// answering each as they would.
func countRequests(c *kfake.Cluster, key kmsg.Key) *atomic.Int32 {
	var n atomic.Int32
	c.ControlKey(int16(key), func(kmsg.Request) (kmsg.Response, error, bool) {
		n.Add(1)
		c.KeepControl()
		return nil, nil, false
	})
	return &n
}

// seed creates topic with the given record counts per partition and
// commits the given offsets for group (-1: no commit).
func seed(t testing.TB, c *kfake.Cluster, topic, group string, records, commits []int64) {
	t.Helper()
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, int32(len(records)), 1, nil, topic); err != nil {
		t.Fatal(err)
	}
	for p, n := range records {
		for range n {
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Partition: int32(p), Value: []byte("x")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	offs := kadm.Offsets{}
	for p, at := range commits {
		if at >= 0 {
			offs.AddOffset(topic, int32(p), at, -1)
		}
	}
	if len(offs) > 0 {
		resp, err := adm.CommitOffsets(ctx, group, offs)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func lagTarget(name string, c *kfake.Cluster, topic, group string) Target {
	return Target{Ref: &commonv1.TargetRef{Namespace: "ns", Name: name}, Cluster: Cluster{Brokers: c.ListenAddrs()}, Topic: topic, Group: group, Interval: 100 * time.Millisecond}
}

func TestFetchLag(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(1))
	defer c.Close()
	seed(t, c, "input", "fn", []int64{5, 3, 0}, []int64{2, -1, -1})
	rec := newRecorder()
	f, _ := newFetcher(t, rec)
	f.Set(lagTarget("fn", c, "input", "fn"))
	f.FetchNow(context.Background())
	s, errMsg := rec.last("ns/fn")
	if errMsg != "" || s == nil {
		t.Fatalf("sample %v, error %q; want a sample", s, errMsg)
	}
	if s.GetSource() != commonv1.SampleSource_SAMPLE_SOURCE_KAFKA || s.GetPartitionCount() != 3 || len(s.GetPartitionLags()) != 3 {
		t.Fatalf("sample %v: want KAFKA, 3 partitions", s)
	}
	want := []struct {
		end       int64
		committed int64 // -1: absent
	}{{5, 2}, {3, -1}, {0, -1}}
	for i, w := range want {
		p := s.GetPartitionLags()[i]
		if p.GetPartition() != int32(i) || p.GetEndOffset() != w.end {
			t.Errorf("partition %d: %v, want end %d", i, p, w.end)
		}
		if (p.CommittedOffset != nil) != (w.committed >= 0) || (w.committed >= 0 && p.GetCommittedOffset() != w.committed) {
			t.Errorf("partition %d committed = %v, want %d (-1: absent)", i, p.CommittedOffset, w.committed)
		}
	}
	if err := s.ValidateField("sample", time.Now()); err != nil {
		t.Errorf("sample does not validate: %v", err)
	}
}

func TestFetchMissingTopicIsAnError(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(1))
	defer c.Close()
	rec := newRecorder()
	f, reg := newFetcher(t, rec)
	f.Set(lagTarget("ghost", c, "no-such-topic", "fn"))
	f.FetchNow(context.Background())
	s, errMsg := rec.last("ns/ghost")
	if s != nil || !strings.Contains(errMsg, `topic "no-such-topic" does not exist`) {
		t.Fatalf("sample %v, error %q; want no sample and a missing-topic error", s, errMsg)
	}
	if got := errCount(t, reg, ReasonTopic); got != 1 {
		t.Errorf("errors{reason=topic} = %v, want 1", got)
	}
}

func TestFetchBrokerDownIsAnErrorNotZeroLag(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(1))
	seed(t, c, "input", "fn", []int64{4}, []int64{1})
	rec := newRecorder()
	f, reg := newFetcher(t, rec)
	f.cfg.Timeout = 500 * time.Millisecond
	f.Set(lagTarget("fn", c, "input", "fn"))
	f.FetchNow(context.Background())
	if s, e := rec.last("ns/fn"); s == nil || e != "" {
		t.Fatalf("before the outage: sample %v error %q", s, e)
	}
	c.Close()
	before := len(rec.samples["ns/fn"])
	f.FetchNow(context.Background())
	s, errMsg := rec.last("ns/fn")
	if len(rec.samples["ns/fn"]) != before || errMsg == "" {
		t.Fatalf("broker down: %d new samples (last %v), error %q; want no sample and an error state", len(rec.samples["ns/fn"])-before, s, errMsg)
	}
	if got := errCount(t, reg, ReasonBroker) + errCount(t, reg, ReasonGroup); got < 1 {
		t.Errorf("errors = %v, want the outage counted", got)
	}
}

// TestFetchCostsRequestsPerBrokerNotPerTarget checks that 30 targets on one
// cluster of 3 brokers cost one OffsetFetch per coordinator and one
// ListOffsets per partition leader per tick.
func TestFetchCostsRequestsPerBrokerNotPerTarget(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(3))
	defer c.Close()
	for _, topic := range []string{"a", "b", "c"} {
		seed(t, c, topic, "g-"+topic, []int64{1, 1, 1, 1, 1, 1}, []int64{0, 0, 0, 0, 0, 0})
	}
	rec := newRecorder()
	f, _ := newFetcher(t, rec)
	for i := range 30 {
		topic := []string{"a", "b", "c"}[i%3]
		f.Set(lagTarget("t"+string(rune('a'+i)), c, topic, "g-"+topic+string(rune('a'+i))))
	}
	f.FetchNow(context.Background()) // warm: metadata, coordinators
	listOffsets, offsetFetch := countRequests(c, kmsg.ListOffsets), countRequests(c, kmsg.OffsetFetch)
	f.FetchNow(context.Background())
	if got := listOffsets.Load(); got < 1 || got > 3 {
		t.Errorf("ListOffsets requests for 30 targets = %d, want at most one per broker (3)", got)
	}
	if got := offsetFetch.Load(); got < 1 || got > 3 {
		t.Errorf("OffsetFetch requests for 30 groups = %d, want at most one per coordinator (3)", got)
	}
	for i := range 30 {
		if s, e := rec.last("ns/t" + string(rune('a'+i))); s == nil || e != "" {
			t.Errorf("target %d: sample %v error %q", i, s, e)
		}
	}
}

// TestFetchSASL reads lag through every SASL mechanism kfake offers, with
// the right password and a wrong one.
func TestFetchSASL(t *testing.T) {
	for _, m := range []struct{ kfake, keda string }{
		{"PLAIN", SASLPlain}, {"SCRAM-SHA-256", SASLSCRAM256}, {"SCRAM-SHA-512", SASLSCRAM512},
	} {
		t.Run(m.kfake, func(t *testing.T) {
			c := kfake.MustCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser(m.kfake, "admin", "s3cret"))
			defer c.Close()
			rec := newRecorder()
			f, _ := newFetcher(t, rec)
			f.cfg.Timeout = time.Second
			good := lagTarget("good", c, "input", "fn")
			good.Cluster.Auth = Auth{SASL: m.keda, User: "admin", Password: "s3cret"}
			bad := lagTarget("bad", c, "input", "fn")
			bad.Cluster.Auth = Auth{SASL: m.keda, User: "admin", Password: "wrong"}
			// Seed through an authenticated admin client.
			cl, err := kgo.NewClient(append(mustOpts(t, good.Cluster), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if _, err := kadm.NewClient(cl).CreateTopic(context.Background(), 2, 1, nil, "input"); err != nil {
				t.Fatal(err)
			}
			f.Set(good)
			f.Set(bad)
			f.FetchNow(context.Background())
			if s, e := rec.last("ns/good"); s == nil || e != "" || s.GetPartitionCount() != 2 {
				t.Errorf("with credentials: sample %v error %q; want 2 partitions", s, e)
			}
			s, e := rec.last("ns/bad")
			if s != nil || e == "" {
				t.Errorf("wrong password: sample %v error %q; want an error state", s, e)
			}
			if strings.Contains(e, "wrong") || strings.Contains(e, "s3cret") {
				t.Errorf("the error state quotes a password: %q", e)
			}
		})
	}
}

func mustOpts(t testing.TB, c Cluster) []kgo.Opt {
	opts, err := c.options()
	if err != nil {
		t.Fatal(err)
	}
	return opts
}

func TestAuthFromSecret(t *testing.T) {
	_, caPEM := selfSigned(t)
	tests := []struct {
		name    string
		data    map[string]string
		want    Auth
		wantErr string
	}{
		{name: "none", data: map[string]string{}, want: Auth{}},
		{name: "scram", data: map[string]string{"sasl": "scram_sha512", "username": "u", "password": "p", "tls": "enable"}, want: Auth{TLS: true, SASL: SASLSCRAM512, User: "u", Password: "p"}},
		{name: "plain and a CA", data: map[string]string{"sasl": "plaintext", "username": "u", "password": "p", "tls": "enable", "ca": string(caPEM)},
			want: Auth{TLS: true, CA: caPEM, SASL: SASLPlain, User: "u", Password: "p"}},
		{name: "oauthbearer", data: map[string]string{"sasl": "oauthbearer", "username": "client", "password": "secret",
			"oauthTokenEndpointUri": "https://idp.example/token", "scopes": "kafka, read", "oauthExtensions": "logicalCluster=lkc-1,identityPoolId=pool-2"},
			want: Auth{SASL: SASLOAuthBearer, User: "client", Password: "secret", TokenProvider: TokenBearer, TokenURL: "https://idp.example/token",
				Scopes: []string{"kafka", "read"}, Extensions: map[string]string{"logicalCluster": "lkc-1", "identityPoolId": "pool-2"}}},
		{name: "aws msk iam", data: map[string]string{"sasl": "oauthbearer", "saslTokenProvider": "aws_msk_iam", "awsRegion": "eu-west-1",
			"awsAccessKeyID": "AKID", "awsSecretAccessKey": "shh", "awsSessionToken": "tok"},
			want: Auth{SASL: SASLOAuthBearer, TokenProvider: TokenAWSMSKIAM, AWSRegion: "eu-west-1", AWSKeyID: "AKID", AWSSecretKey: "shh", AWSToken: "tok"}},
		{name: "version", data: map[string]string{"version": "2.8.0"}, want: Auth{MaxVersion: "2.8.0"}},
		{name: "bad tls", data: map[string]string{"tls": "yes"}, wantErr: "key tls: enable or disable"},
		{name: "bad sasl", data: map[string]string{"sasl": "kerberos"}, wantErr: "key sasl: plaintext, scram_sha256"},
		{name: "gssapi", data: map[string]string{"sasl": "gssapi"}, wantErr: "Kerberos (gssapi) is not supported"},
		{name: "sasl without password", data: map[string]string{"sasl": "plaintext", "username": "u"}, wantErr: "username and password"},
		{name: "cert without key", data: map[string]string{"tls": "enable", "cert": "x"}, wantErr: "cert and key"},
		{name: "ca without tls", data: map[string]string{"ca": "x"}, wantErr: "only with tls: enable"},
		{name: "a CA that is no PEM", data: map[string]string{"tls": "enable", "ca": "x"}, wantErr: "key ca: PEM"},
		{name: "an encrypted key", data: map[string]string{"tls": "enable", "keyPassword": "pw"}, wantErr: "key keyPassword"},
		{name: "oauthbearer without endpoint", data: map[string]string{"sasl": "oauthbearer", "username": "c", "password": "s"}, wantErr: "key oauthTokenEndpointUri"},
		{name: "oauthbearer over http", data: map[string]string{"sasl": "oauthbearer", "username": "c", "password": "pw-SECRET", "oauthTokenEndpointUri": "http://idp/token"}, wantErr: "https URL"},
		{name: "oauthbearer without a client", data: map[string]string{"sasl": "oauthbearer", "oauthTokenEndpointUri": "https://idp/token"}, wantErr: "client's id"},
		{name: "bad extensions", data: map[string]string{"sasl": "oauthbearer", "username": "c", "password": "s", "oauthTokenEndpointUri": "https://idp/token", "oauthExtensions": "novalue"}, wantErr: "key oauthExtensions"},
		{name: "aws without region", data: map[string]string{"sasl": "oauthbearer", "saslTokenProvider": "aws_msk_iam", "awsAccessKeyID": "a", "awsSecretAccessKey": "aws-SECRET"}, wantErr: "key awsRegion"},
		{name: "aws without keys", data: map[string]string{"sasl": "oauthbearer", "saslTokenProvider": "aws_msk_iam", "awsRegion": "eu-west-1"}, wantErr: "key awsSecretAccessKey"},
		{name: "bad token provider", data: map[string]string{"sasl": "oauthbearer", "saslTokenProvider": "gcp"}, wantErr: "bearer or aws_msk_iam"},
		{name: "bad version", data: map[string]string{"version": "latest"}, wantErr: "key version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := map[string][]byte{}
			for k, v := range tt.data {
				data[k] = []byte(v)
			}
			got, err := AuthFromSecret(data)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("AuthFromSecret = %+v, %v; want error containing %q", got, err, tt.wantErr)
				}
				for _, k := range SecretAuthKeys {
					if v := tt.data[k]; len(v) > 3 && strings.Contains(err.Error(), v) {
						t.Errorf("error %q quotes %s", err, k)
					}
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("AuthFromSecret = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func errCount(t testing.TB, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tidal_collector_lag_fetch_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestFetchAllTopics: without a topic, a group's commits on two topics are
// one sample of every partition of both, each naming its topic, with the
// partition count of both; without AllTopics that is an error, and so is a
// group with no commit at all.
func TestFetchAllTopics(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(1))
	defer c.Close()
	seed(t, c, "orders", "billing", []int64{5, 3}, []int64{2, 3})
	seed(t, c, "refunds", "billing", []int64{4}, []int64{1})
	rec := newRecorder()
	f, _ := newFetcher(t, rec)
	all := lagTarget("all", c, "", "billing")
	all.AllTopics = true
	f.Set(all)
	f.Set(lagTarget("one", c, "", "billing"))
	none := lagTarget("none", c, "", "nobody")
	none.AllTopics = true
	f.Set(none)
	f.FetchNow(context.Background())
	s, e := rec.last("ns/all")
	if s == nil || e != "" || s.GetPartitionCount() != 3 || len(s.GetPartitionLags()) != 3 {
		t.Fatalf("all topics: sample %v, error %q; want 3 partitions of 2 topics", s, e)
	}
	var lag int64
	for _, p := range s.GetPartitionLags() {
		if p.GetTopic() != "orders" && p.GetTopic() != "refunds" {
			t.Errorf("partition %v names no topic of the group's", p)
		}
		lag += p.GetEndOffset() - p.GetCommittedOffset()
	}
	if lag != 3+0+3 {
		t.Errorf("total lag %d; want 6", lag)
	}
	if err := s.ValidateField("sample", time.Now()); err != nil {
		t.Errorf("sample does not validate: %v", err)
	}
	if s, e := rec.last("ns/one"); s != nil || !strings.Contains(e, "2 topics") {
		t.Errorf("one topic wanted: sample %v, error %q; want an error naming the 2 topics", s, e)
	}
	if s, e := rec.last("ns/none"); s != nil || e == "" {
		t.Errorf("a group with no commit: sample %v, error %q; want an error", s, e)
	}
}
