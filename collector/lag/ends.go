package lag

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// partitionsMaxAge is how long the partitions of a full listing are used
// to ask for end offsets alone: as long as kgo keeps the metadata kadm's
// listing reads (its MetadataMinAge default).
const partitionsMaxAge = 5 * time.Second

// endLister lists topics' end offsets for one cluster. kadm's
// ListEndOffsets reads the topics' metadata first, and at riff's 100 ms
// interval for 1,000 topics turning that metadata into kadm's maps was a
// quarter of the collector's allocations. Between full listings it asks the
// brokers for the end offsets of the partitions the last listing found
// (a partition added since shows at the next, within partitionsMaxAge);
// anything but a clean answer (an error of a shard or a partition, a
// partition gone) is answered by a full listing instead, so every error
// reads as kadm reports it.
type endLister struct {
	cl  *kgo.Client
	adm *kadm.Client

	// mu guards parts and listed: a Poll may list beside a round.
	mu sync.Mutex
	// parts is each topic's partitions at the last full listing, at
	// listed.
	parts  map[string][]int32
	listed time.Time
}

// list returns the end offsets of topics at now.
func (l *endLister) list(ctx context.Context, topics []string, now time.Time) (kadm.ListedOffsets, error) {
	if ends, ok := l.quick(ctx, topics, now); ok {
		return ends, nil
	}
	ends, err := l.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return ends, err
	}
	parts := make(map[string][]int32, len(ends))
	for topic, ps := range ends {
		ids := make([]int32, 0, len(ps))
		for id, p := range ps {
			if p.Err != nil || id < 0 {
				ids = nil
				break
			}
			ids = append(ids, id)
		}
		if ids != nil {
			parts[topic] = ids
		}
	}
	l.mu.Lock()
	l.parts, l.listed = parts, now
	l.mu.Unlock()
	return ends, nil
}

// quick lists topics from the partitions of the last full listing; false
// when that is too old, lacks a topic, or the answer is not clean.
func (l *endLister) quick(ctx context.Context, topics []string, now time.Time) (kadm.ListedOffsets, bool) {
	req := kmsg.NewPtrListOffsetsRequest()
	want := 0
	l.mu.Lock()
	if now.Sub(l.listed) >= partitionsMaxAge {
		l.mu.Unlock()
		return nil, false
	}
	for _, topic := range topics {
		ids, ok := l.parts[topic]
		if !ok {
			l.mu.Unlock()
			return nil, false
		}
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rt.Partitions = make([]kmsg.ListOffsetsRequestTopicPartition, len(ids))
		for i, id := range ids {
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = id, -1 // -1: the end offset
			rt.Partitions[i] = rp
		}
		req.Topics = append(req.Topics, rt)
		want += len(ids)
	}
	l.mu.Unlock()

	ends := make(kadm.ListedOffsets, len(topics))
	got := 0
	for _, shard := range l.cl.RequestSharded(ctx, req) {
		if shard.Err != nil {
			return nil, false
		}
		resp, ok := shard.Resp.(*kmsg.ListOffsetsResponse)
		if !ok {
			return nil, false
		}
		for _, t := range resp.Topics {
			ps := ends[t.Topic]
			if ps == nil {
				ps = make(map[int32]kadm.ListedOffset, len(t.Partitions))
				ends[t.Topic] = ps
			}
			for _, p := range t.Partitions {
				if p.ErrorCode != 0 {
					return nil, false
				}
				if _, dup := ps[p.Partition]; !dup {
					got++
				}
				ps[p.Partition] = kadm.ListedOffset{Topic: t.Topic, Partition: p.Partition, Timestamp: p.Timestamp,
					Offset: p.Offset, LeaderEpoch: p.LeaderEpoch}
			}
		}
	}
	return ends, got == want
}
