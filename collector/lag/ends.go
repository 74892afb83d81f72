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
// ListEndOffsets reads the topics' metadata first, and kgo's sharded
// ListOffsets looks every partition's leader up again, costly at riff's
// 100 ms interval. A full listing also learns each partition's leader from
// the same cached metadata; between full listings the lister asks each
// leader directly for the end offsets of the partitions the last listing
// of each topic found (a partition added since shows at the next, within
// partitionsMaxAge), one request per broker, built once and reused while
// the topics, their partitions and leaders stay the same. Anything but a
// clean answer (a broker's error, a partition's error such as a leader
// moved, a partition gone or unknown) is answered by a full listing
// instead, so every error reads as kadm reports it. Each topic keeps its
// own listing time, so a KEDA poll's listing of one topic leaves the
// others' as they were.
type endLister struct {
	cl  *kgo.Client
	adm *kadm.Client

	// mu guards parts and version: a Poll may list beside a round.
	mu sync.Mutex
	// parts is each topic's partitions, sorted, and their leaders, as a
	// full listing found them within partitionsMaxAge; older ones are
	// dropped at each listing.
	parts map[string]listedParts
	// version is the last listedParts.version given.
	version uint64
}

// listedParts is a topic's partitions, their leaders, and when a full
// listing found them.
type listedParts struct {
	ids     []int32
	leaders []int32 // leaders[i] is the broker leading partition ids[i]
	at      time.Time
	// version changes whenever a listing finds other ids or leaders than
	// the topic had: requests built from an older version are stale.
	version uint64
}

// leaderAsks is one set of topics' requests for end offsets, one per
// leader broker, and the array their answers fill, one slot per partition,
// that ends hands out in slices by topic. Built from the topics' parts, it
// is reused by the next round of the same topics while each has the same
// version. A cluster's periodic rounds never overlap, so the round running
// owns its asks (rounds keep theirs in roundState); a Poll builds its own.
type leaderAsks struct {
	topics   []string
	versions []uint64 // of each topic's parts, as the requests were built
	brokers  []brokerAsk
	ends     endOffsets
	all      []partitionEnd
}

// brokerAsk is the request for the partitions one broker leads, and its
// answer.
type brokerAsk struct {
	broker *kgo.Broker
	req    *kmsg.ListOffsetsRequest
	resp   kmsg.Response
	err    error
}

// list returns the end offsets of topics at now. Between full listings it
// asks the leaders through asks, nil for requests used once (a Poll's).
func (l *endLister) list(ctx context.Context, topics []string, now time.Time, asks *leaderAsks) (endOffsets, error) {
	if asks == nil {
		asks = &leaderAsks{}
	}
	if ends, ok := l.quick(ctx, topics, now, asks); ok {
		return ends, nil
	}
	listed, err := l.adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, err
	}
	ends := make(endOffsets, len(listed))
	clean := make([]string, 0, len(listed))
	for topic, ps := range listed {
		te := topicEnds{parts: make([]partitionEnd, 0, len(ps))}
		ok := true
		for id, p := range ps {
			if id == -1 && p.Err != nil {
				te.err = p.Err
				ok = false
				continue
			}
			te.parts = append(te.parts, partitionEnd{id: id, offset: p.Offset, err: p.Err})
			ok = ok && p.Err == nil && id >= 0
		}
		slices.SortFunc(te.parts, func(a, b partitionEnd) int { return cmp.Compare(a.id, b.id) })
		ends[topic] = te
		if ok {
			clean = append(clean, topic)
		}
	}
	leaders := l.leaders(ctx, clean)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.parts == nil {
		l.parts = make(map[string]listedParts, len(listed))
	}
	for topic := range listed {
		ids := make([]int32, len(ends[topic].parts))
		for i, p := range ends[topic].parts {
			ids[i] = p.id
		}
		meta, ok := leaders[topic] // a clean topic's only
		var lead []int32
		if ok {
			lead, ok = leaderIDs(ids, meta)
		}
		if !ok {
			// Not clean, or its leaders are not known: the next round
			// lists it again.
			delete(l.parts, topic)
			continue
		}
		l.storeLocked(topic, ids, lead, now)
	}
	maps.DeleteFunc(l.parts, func(_ string, p listedParts) bool { return now.Sub(p.at) >= partitionsMaxAge })
	return ends, nil
}

// leaders returns the partitions of each of topics, with their leaders,
// from kgo's cached metadata, which the listing has just read (as old as
// partitionsMaxAge at most, as the listing's partitions are); nil when it
// cannot be read, so that every topic is listed again.
func (l *endLister) leaders(ctx context.Context, topics []string) map[string][]kmsg.MetadataResponseTopicPartition {
	if len(topics) == 0 {
		return nil
	}
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = make([]kmsg.MetadataRequestTopic, len(topics))
	for i, topic := range topics {
		req.Topics[i] = kmsg.NewMetadataRequestTopic()
		req.Topics[i].Topic = kmsg.StringPtr(topic)
	}
	resp, err := l.cl.RequestCachedMetadata(ctx, req, partitionsMaxAge)
	if err != nil {
		return nil
	}
	out := make(map[string][]kmsg.MetadataResponseTopicPartition, len(resp.Topics))
	for _, t := range resp.Topics {
		if t.Topic != nil && t.ErrorCode == 0 {
			out[*t.Topic] = t.Partitions
		}
	}
	return out
}

// leaderIDs returns the leader of each of ids (sorted) as meta has them;
// false unless meta has exactly those partitions, each with a leader.
func leaderIDs(ids []int32, meta []kmsg.MetadataResponseTopicPartition) ([]int32, bool) {
	if len(meta) != len(ids) {
		return nil, false
	}
	leaders := make([]int32, len(ids))
	for _, p := range meta {
		i, found := slices.BinarySearch(ids, p.Partition)
		if !found || p.ErrorCode != 0 || p.Leader < 0 {
			return nil, false
		}
		leaders[i] = p.Leader
	}
	return leaders, true
}

// storeLocked keeps topic's partitions and leaders found at now, under a
// new version only if they differ from those it had.
func (l *endLister) storeLocked(topic string, ids, leaders []int32, now time.Time) {
	p, ok := l.parts[topic]
	if !ok || !slices.Equal(p.ids, ids) || !slices.Equal(p.leaders, leaders) {
		l.version++
		p = listedParts{ids: ids, leaders: leaders, version: l.version}
	}
	p.at = now
	l.parts[topic] = p
}

// quick lists topics by asking the leaders the last full listing found;
// false when that listing is too old, lacks a topic, or the answer is not
// clean.
func (l *endLister) quick(ctx context.Context, topics []string, now time.Time, asks *leaderAsks) (endOffsets, bool) {
	if !l.prepare(topics, now, asks) {
		return nil, false
	}
	for i := range asks.all {
		asks.all[i].offset = -1
	}
	asks.send(ctx)
	defer func() {
		for i := range asks.brokers {
			asks.brokers[i].resp, asks.brokers[i].err = nil, nil // kept no longer than the round
		}
	}()
	got := 0
	for _, b := range asks.brokers {
		resp, ok := b.resp.(*kmsg.ListOffsetsResponse)
		if b.err != nil || !ok {
			return nil, false
		}
		for _, t := range resp.Topics {
			ps := asks.ends[t.Topic].parts
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
	return asks.ends, got == len(asks.all)
}

// prepare readies asks for topics: as they are when they were built for
// the same topics of the same versions, else built anew. False when a
// topic has no parts younger than partitionsMaxAge at now.
func (l *endLister) prepare(topics []string, now time.Time, asks *leaderAsks) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	same := slices.Equal(asks.topics, topics)
	for i, topic := range topics {
		p, ok := l.parts[topic]
		if !ok || now.Sub(p.at) >= partitionsMaxAge {
			return false
		}
		same = same && asks.versions[i] == p.version
	}
	if !same {
		l.buildLocked(topics, asks)
	}
	return true
}

// buildLocked builds asks for topics from their parts: one request per
// leader, and a slot in all for every partition, in the order of topics.
func (l *endLister) buildLocked(topics []string, asks *leaderAsks) {
	asks.topics = append(asks.topics[:0], topics...)
	asks.versions = asks.versions[:0]
	want := 0
	for _, topic := range topics {
		p := l.parts[topic]
		asks.versions = append(asks.versions, p.version)
		want += len(p.ids)
	}
	asks.all = make([]partitionEnd, want)
	asks.ends = make(endOffsets, len(topics))
	reqs := map[int32]*kmsg.ListOffsetsRequest{}
	at := 0
	for _, topic := range topics {
		p := l.parts[topic]
		for j, id := range p.ids {
			asks.all[at+j] = partitionEnd{id: id, offset: -1}
			req := reqs[p.leaders[j]]
			if req == nil {
				req = kmsg.NewPtrListOffsetsRequest()
				reqs[p.leaders[j]] = req
			}
			if n := len(req.Topics); n == 0 || req.Topics[n-1].Topic != topic {
				rt := kmsg.NewListOffsetsRequestTopic()
				rt.Topic = topic
				req.Topics = append(req.Topics, rt)
			}
			rt := &req.Topics[len(req.Topics)-1]
			rp := kmsg.NewListOffsetsRequestTopicPartition()
			rp.Partition, rp.Timestamp = id, -1 // -1: the end offset
			rt.Partitions = append(rt.Partitions, rp)
		}
		asks.ends[topic] = topicEnds{parts: asks.all[at : at+len(p.ids) : at+len(p.ids)]}
		at += len(p.ids)
	}
	asks.brokers = asks.brokers[:0]
	for id, req := range reqs {
		asks.brokers = append(asks.brokers, brokerAsk{broker: l.cl.Broker(int(id)), req: req})
	}
}

// send sends every broker's request at once and waits for the answers.
func (a *leaderAsks) send(ctx context.Context) {
	var wg sync.WaitGroup
	for i := range a.brokers {
		b := &a.brokers[i]
		if i == len(a.brokers)-1 {
			b.resp, b.err = b.broker.Request(ctx, b.req) // the last on this goroutine
			break
		}
		wg.Go(func() { b.resp, b.err = b.broker.Request(ctx, b.req) })
	}
	wg.Wait()
}
