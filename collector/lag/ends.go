package lag

import (
	"cmp"
	"context"
	"maps"
	"slices"
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

// endOffsets is each topic's end offsets, as a round reads them.
type endOffsets map[string]topicEnds

// topicEnds is one topic's answer: its partitions by id, or the error kadm
// reports for the whole topic (as its partition -1).
type topicEnds struct {
	err   error
	parts []partitionEnd
}

// partitionEnd is one partition's end offset, or its error.
type partitionEnd struct {
	id     int32
	offset int64
	err    error
}

// endLister lists topics' end offsets for one cluster. kadm's
// ListEndOffsets reads the topics' metadata first, costly at riff's 100 ms
// interval. Between full listings it asks the brokers for the end offsets
// of the partitions the last listing of each topic found (a partition added
// since shows at the next, within partitionsMaxAge), into one array per
// round; anything but a clean answer (an error of a shard or a partition, a
// partition gone) is answered by a full listing instead, so every error
// reads as kadm reports it. Each topic keeps its own listing time, so a
// KEDA poll's listing of one topic leaves the others' as they were.
type endLister struct {
	cl  *kgo.Client
	adm *kadm.Client

	// mu guards parts: a Poll may list beside a round.
	mu sync.Mutex
	// parts is each topic's partitions, sorted, as a full listing found
	// them within partitionsMaxAge; older ones are dropped at each listing.
	parts map[string]listedParts
}

// listedParts is a topic's partitions and when a full listing found them.
type listedParts struct {
	ids []int32
	at  time.Time
}

// list returns the end offsets of topics at now.
func (l *endLister) list(ctx context.Context, topics []string, now time.Time) (endOffsets, error) {
	if ends, ok := l.quick(ctx, topics, now); ok {
		return ends, nil
	}
	listed, err := l.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	ends := make(endOffsets, len(listed))
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.parts == nil {
		l.parts = make(map[string]listedParts, len(listed))
	}
	maps.DeleteFunc(l.parts, func(_ string, p listedParts) bool { return now.Sub(p.at) >= partitionsMaxAge })
	for topic, ps := range listed {
		te := topicEnds{parts: make([]partitionEnd, 0, len(ps))}
		clean := true
		for id, p := range ps {
			if id == -1 && p.Err != nil {
				te.err = p.Err
				clean = false
				continue
			}
			te.parts = append(te.parts, partitionEnd{id: id, offset: p.Offset, err: p.Err})
			clean = clean && p.Err == nil && id >= 0
		}
		slices.SortFunc(te.parts, func(a, b partitionEnd) int { return cmp.Compare(a.id, b.id) })
		ends[topic] = te
		if !clean {
			delete(l.parts, topic)
			continue
		}
		ids := make([]int32, len(te.parts))
		for i, p := range te.parts {
			ids[i] = p.id
		}
		l.parts[topic] = listedParts{ids: ids, at: now}
	}
	return ends, nil
}

// quick lists topics from the partitions of the last full listing; false
// when that is too old, lacks a topic, or the answer is not clean.
func (l *endLister) quick(ctx context.Context, topics []string, now time.Time) (endOffsets, bool) {
	req := kmsg.NewPtrListOffsetsRequest()
	ends := make(endOffsets, len(topics))
	l.mu.Lock()
	want := 0
	for _, topic := range topics {
		p, ok := l.parts[topic]
		if !ok || now.Sub(p.at) >= partitionsMaxAge {
			l.mu.Unlock()
			return nil, false
		}
		want += len(p.ids)
	}
	// Every partition has its slot in all, in the order of the request,
	// so an answer split over brokers fills one array.
	all := make([]partitionEnd, want)
	req.Topics = make([]kmsg.ListOffsetsRequestTopic, len(topics))
	at := 0
	for i, topic := range topics {
		ids := l.parts[topic].ids
		rt := &req.Topics[i]
		*rt = kmsg.NewListOffsetsRequestTopic()
		rt.Topic = topic
		rt.Partitions = make([]kmsg.ListOffsetsRequestTopicPartition, len(ids))
		for j, id := range ids {
			rp := &rt.Partitions[j]
			*rp = kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = id, -1 // -1: the end offset
			all[at+j] = partitionEnd{id: id, offset: -1}
		}
		ends[topic] = topicEnds{parts: all[at : at+len(ids) : at+len(ids)]}
		at += len(ids)
	}
	l.mu.Unlock()

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
			ps := ends[t.Topic].parts
			for _, p := range t.Partitions {
				j, found := slices.BinarySearchFunc(ps, p.Partition, func(e partitionEnd, id int32) int { return cmp.Compare(e.id, id) })
				if p.ErrorCode != 0 || !found || p.Offset < 0 {
					return nil, false
				}
				if ps[j].offset < 0 {
					got++
				}
				ps[j].offset = p.Offset
			}
		}
	}
	return ends, got == want
}
