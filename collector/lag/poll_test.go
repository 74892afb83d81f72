package lag

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// TestPollReadsOneTargetNow: Poll reads an on-demand target at once,
// records the sample as a fetch does and returns it; the periodic fetch
// leaves on-demand targets alone.
func TestPollReadsOneTargetNow(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(1))
	defer c.Close()
	seed(t, c, "input", "fn", []int64{5, 3}, []int64{2, -1})
	rec := newRecorder()
	f, _ := newFetcher(t, rec)
	tg := lagTarget("fn", c, "input", "fn")
	tg.OnDemand = true
	f.Set(tg)

	f.FetchNow(context.Background())
	if s, _ := rec.last("ns/fn"); s != nil {
		t.Fatalf("the periodic fetch read an on-demand target: %v", s)
	}
	s, err := f.Poll(context.Background(), tg.Ref)
	if err != nil {
		t.Fatalf("Poll: %v", err)
	}
	if got, _ := rec.last("ns/fn"); got != s {
		t.Errorf("recorded %v, want the polled sample %v", got, s)
	}
	lags := s.GetPartitionLags()
	if len(lags) != 2 || lags[0].GetEndOffset() != 5 || lags[0].GetCommittedOffset() != 2 || lags[1].GetEndOffset() != 3 || lags[1].CommittedOffset != nil || s.GetPartitionCount() != 2 {
		t.Errorf("sample %v, want partitions 0 (end 5, committed 2) and 1 (end 3, none)", s)
	}

	if _, err := f.Poll(context.Background(), &commonv1.TargetRef{Namespace: "ns", Name: "other"}); !errors.Is(err, ErrUnknownTarget) {
		t.Errorf("Poll of an unknown target: %v, want ErrUnknownTarget", err)
	}
}

// TestPollOfAMissingTopicIsAnError: a failed read is an error for the
// caller and the target's error state, never a sample.
func TestPollOfAMissingTopicIsAnError(t *testing.T) {
	c := kfake.MustCluster(kfake.NumBrokers(1))
	defer c.Close()
	rec := newRecorder()
	f, _ := newFetcher(t, rec)
	tg := lagTarget("fn", c, "absent", "fn")
	tg.OnDemand = true
	f.Set(tg)
	s, err := f.Poll(context.Background(), tg.Ref)
	if err == nil || s != nil {
		t.Fatalf("Poll of a missing topic = %v, %v; want an error and no sample", s, err)
	}
	if !strings.HasPrefix(err.Error(), ReasonTopic+": ") {
		t.Errorf("error %q, want its reason (%s) first", err, ReasonTopic)
	}
	if got, msg := rec.last("ns/fn"); got != nil || !strings.Contains(msg, "absent") {
		t.Errorf("recorded %v, error state %q; want no sample and an error naming the topic", got, msg)
	}
}

// TestAllowRefusesBrokers: a cluster with Allow never dials an address it
// refuses, and reads through one it accepts as usual; it is another client
// than the same brokers' without Allow.
func TestAllowRefusesBrokers(t *testing.T) {
	refused, allowed := kfake.MustCluster(kfake.NumBrokers(1)), kfake.MustCluster(kfake.NumBrokers(1))
	defer refused.Close()
	defer allowed.Close()
	for _, c := range []*kfake.Cluster{refused, allowed} {
		seed(t, c, "input", "fn", []int64{4}, []int64{1})
	}
	rec := newRecorder()
	f, _ := newFetcher(t, rec)
	var (
		mu    sync.Mutex
		asked []string
	)
	policy := func(addr string) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, addr)
		return addr == allowed.ListenAddrs()[0]
	}
	r, a := lagTarget("refused", refused, "input", "fn"), lagTarget("allowed", allowed, "input", "fn")
	for _, tg := range []*Target{&r, &a} {
		tg.Cluster.Allow, tg.OnDemand = policy, true
		f.Set(*tg)
	}
	if r.Cluster.key() == lagTarget("x", refused, "", "").Cluster.key() {
		t.Error("a cluster with Allow shares its key with the same brokers without it")
	}
	if _, err := f.Poll(context.Background(), r.Ref); err == nil || !strings.Contains(err.Error(), ErrBrokerNotAllowed.Error()) {
		t.Errorf("Poll through a refused broker: %v, want %v", err, ErrBrokerNotAllowed)
	}
	mu.Lock()
	if !slices.Contains(asked, refused.ListenAddrs()[0]) {
		t.Errorf("Allow was asked %q, want the seed %s among them", asked, refused.ListenAddrs()[0])
	}
	mu.Unlock()
	if s, err := f.Poll(context.Background(), a.Ref); err != nil || s.GetPartitionLags()[0].GetEndOffset() != 4 {
		t.Errorf("Poll through an allowed broker = %v, %v; want end offset 4", s, err)
	}
}
