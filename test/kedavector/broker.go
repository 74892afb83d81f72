package kedavector

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidalscale/tidal/strategy/lag"
)

// Broker is a kfake broker whose topic and group hold one poll's offsets at
// a time, for a replay that reads them over the Kafka protocol as KEDA's
// scaler and tidal's collector do.
type Broker struct {
	kf *kfake.Cluster
	// dial is the options of the broker's own clients (SASL, TLS) on a
	// broker that requires them.
	dial   []kgo.Opt
	topic  string
	group  string
	parts  int32
	closed bool

	// fetches counts OffsetFetch requests by group: each poll of a lag
	// reader (tidal's collector, KEDA's kafka scaler) makes one. While
	// failing, the broker refuses them.
	mu      sync.Mutex
	fetches map[string]int64
	failing bool
}

// NewBroker starts a broker with v's topic (Topic when v names none) of
// v.Partitions() partitions, for group. Close stops it.
func NewBroker(v *Vector, group string) (*Broker, error) {
	topic := v.Topic
	if topic == "" {
		topic = Topic
	}
	return NewTopicBroker(topic, v.Partitions(), group)
}

// NewTopicBroker starts a broker with topic of parts partitions, for
// group. Close stops it.
func NewTopicBroker(topic string, parts int32, group string) (*Broker, error) {
	return NewSecureTopicBroker(topic, parts, group, nil, nil)
}

// NewSecureTopicBroker is NewTopicBroker on a broker started with server's
// options as well (kfake.EnableSASL, kfake.TLS), which the broker's own
// clients reach with dial's (kgo.SASL, kgo.DialTLSConfig).
func NewSecureTopicBroker(topic string, parts int32, group string, server []kfake.Opt, dial []kgo.Opt) (*Broker, error) {
	kf, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(parts, topic)}, server...)...)
	if err != nil {
		return nil, fmt.Errorf("kfake: %w", err)
	}
	b := &Broker{kf: kf, dial: dial, topic: topic, group: group, parts: parts, fetches: map[string]int64{}}
	kf.ControlKey(kmsg.OffsetFetch.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		r, ok := req.(*kmsg.OffsetFetchRequest)
		if !ok {
			return nil, nil, false
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if r.Group != "" {
			b.fetches[r.Group]++
		}
		for _, g := range r.Groups {
			b.fetches[g.Group]++
		}
		if !b.failing {
			return nil, nil, false // observed, not handled: the broker answers
		}
		// GROUP_AUTHORIZATION_FAILED is not retriable: the reader's poll
		// fails at once, as against a broker that lost the group's ACL.
		b.kf.KeepControl()
		code := kerr.GroupAuthorizationFailed.Code
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.SetVersion(r.GetVersion())
		resp.ErrorCode = code
		for _, g := range r.Groups {
			resp.Groups = append(resp.Groups, kmsg.OffsetFetchResponseGroup{Group: g.Group, ErrorCode: code})
		}
		return resp, nil, true
	})
	return b, nil
}

// Fetches is how many OffsetFetch requests named group so far: one per
// poll of a lag reader.
func (b *Broker) Fetches(group string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.fetches[group]
}

// Fail makes the broker refuse every OffsetFetch while on, so that no lag
// reader can measure the group's lag, and answer again once off.
func (b *Broker) Fail(on bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failing = on
}

// Topic is the broker's topic.
func (b *Broker) Topic() string { return b.topic }

// SetGroup makes group's commits those of parts, as Set does for the
// broker's own group, without changing the log: parts' ends must be the
// broker's.
func (b *Broker) SetGroup(ctx context.Context, group string, parts []lag.Partition) error {
	return b.set(ctx, group, parts)
}

// Addrs are the broker's listen addresses (bootstrapServers).
func (b *Broker) Addrs() []string { return b.kf.ListenAddrs() }

// Close stops the broker; a second call does nothing.
func (b *Broker) Close() {
	if !b.closed {
		b.closed = true
		b.kf.Close()
	}
}

// admin is a kadm client with the kgo client under it, which produces to
// chosen partitions.
type admin struct {
	*kadm.Client
	cl *kgo.Client
}

// client is a client of its own for each use: one that knew a recreated
// topic would keep its old id.
func (b *Broker) client() (*admin, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.kf.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, b.dial...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka client: %w", err)
	}
	return &admin{Client: kadm.NewClient(cl), cl: cl}, nil
}

// Set makes the topic's end offsets and the group's commits those of parts,
// then reads them back as a lag reader will. A log never shrinks, so an end
// below the broker's is a recreated topic.
func (b *Broker) Set(ctx context.Context, parts []lag.Partition) error {
	return b.set(ctx, b.group, parts)
}

func (b *Broker) set(ctx context.Context, group string, parts []lag.Partition) error {
	adm, err := b.client()
	if err != nil {
		return err
	}
	ends, err := b.ends(ctx, adm)
	if err != nil {
		adm.cl.Close()
		return err
	}
	for _, p := range parts {
		if p.End < ends[p.ID] {
			if err := b.recreate(ctx, adm); err != nil {
				adm.cl.Close()
				return err
			}
			ends = map[int32]int64{}
			break
		}
	}
	adm.cl.Close()
	if adm, err = b.client(); err != nil {
		return err
	}
	defer adm.cl.Close()

	var recs []*kgo.Record
	for _, p := range parts {
		for range p.End - ends[p.ID] {
			recs = append(recs, &kgo.Record{Topic: b.topic, Partition: p.ID, Value: []byte("v")})
		}
	}
	if err := adm.cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce: %w", err)
	}
	commits := kadm.Offsets{}
	var uncommitted []int32
	for _, p := range parts {
		if p.HasCommitted {
			commits.AddOffset(b.topic, p.ID, p.Committed, -1)
		} else {
			uncommitted = append(uncommitted, p.ID)
		}
	}
	if len(commits) > 0 {
		resp, err := adm.CommitOffsets(ctx, group, commits)
		if err == nil {
			err = resp.Error()
		}
		if err != nil {
			return fmt.Errorf("commit: %w", err)
		}
	}
	if len(uncommitted) > 0 {
		ts := kadm.TopicsSet{}
		ts.Add(b.topic, uncommitted...)
		if _, err := adm.DeleteOffsets(ctx, group, ts); err != nil && !errors.Is(err, kadm.ErrEmpty) && !errors.Is(err, kerr.GroupIDNotFound) {
			return fmt.Errorf("delete the commits of partitions %v: %w", uncommitted, err)
		}
	}

	if ends, err = b.ends(ctx, adm); err != nil {
		return err
	}
	fetched, err := adm.FetchOffsets(ctx, group)
	if errors.Is(err, kerr.GroupIDNotFound) {
		fetched, err = kadm.OffsetResponses{}, nil // no commit at all
	}
	if err != nil {
		return fmt.Errorf("fetch commits: %w", err)
	}
	for _, p := range parts {
		if ends[p.ID] != p.End {
			return fmt.Errorf("partition %d ends at %d on the broker; the vector says %d", p.ID, ends[p.ID], p.End)
		}
		o, ok := fetched.Lookup(b.topic, p.ID)
		has := ok && o.Err == nil && o.At >= 0
		if has != p.HasCommitted || (has && o.At != p.Committed) {
			return fmt.Errorf("partition %d: the broker's commit %+v (present %v); the vector says %d (present %v)", p.ID, o, has, p.Committed, p.HasCommitted)
		}
	}
	return nil
}

func (b *Broker) ends(ctx context.Context, adm *admin) (map[int32]int64, error) {
	listed, err := adm.ListEndOffsets(ctx, b.topic)
	if err != nil {
		return nil, fmt.Errorf("end offsets: %w", err)
	}
	out := map[int32]int64{}
	var ferr error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && ferr == nil {
			ferr = fmt.Errorf("end offset of partition %d: %w", o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	return out, ferr
}

func (b *Broker) recreate(ctx context.Context, adm *admin) error {
	if _, err := adm.DeleteTopic(ctx, b.topic); err != nil {
		return fmt.Errorf("recreate %s: delete: %w", b.topic, err)
	}
	resp, err := adm.CreateTopic(ctx, b.parts, 1, nil, b.topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("recreate %s: create: %w", b.topic, err)
	}
	return nil
}
