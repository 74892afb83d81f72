package lag

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// groupCommits is one consumer group's committed offsets as one OffsetFetch
// answered them, or the group's error. Unlike kadm's FetchManyOffsets (maps
// per group and topic), a round's partitions share one array, each group a
// sorted slice of it: riff reads every 100 ms.
type groupCommits struct {
	// err is the group's error, or of its whole shard, as kadm reports it
	// (authorization failures as *kadm.AuthError). A group may have an
	// error and offsets both.
	err   error
	parts []committed
}

// committed is one partition's committed offset; code is its error code.
type committed struct {
	topic     string
	partition int32
	code      int16
	at        int64
}

// at returns the committed offset of topic's partition id, and false when
// none was committed or the partition's answer was an error.
func (g groupCommits) at(topic string, id int32) (int64, bool) {
	i, ok := slices.BinarySearchFunc(g.parts, committed{topic: topic, partition: id}, byPartition)
	if !ok || g.parts[i].code != 0 || g.parts[i].at < 0 {
		return 0, false
	}
	return g.parts[i].at, true
}

// topics returns the topics the group has answers for, sorted.
func (g groupCommits) topics() []string {
	var ts []string
	for _, p := range g.parts {
		if len(ts) == 0 || ts[len(ts)-1] != p.topic {
			ts = append(ts, p.topic)
		}
	}
	return ts
}

// errUnexpectedResponse stands for an answer of another type than the
// request's, which kgo never gives.
var errUnexpectedResponse = errors.New("kafka: unexpected response type")

func byPartition(a, b committed) int {
	return cmp.Or(cmp.Compare(a.topic, b.topic), cmp.Compare(a.partition, b.partition))
}

// commitBufs is the request fetchCommits sends and the map and array it
// fills, kept by a periodic round for the next: the answers are read within
// the round only, and kgo's sharding only reads the request (it splits a
// copy).
type commitBufs struct {
	req *kmsg.OffsetFetchRequest
	by  map[string]groupCommits
	all []committed
}

// fetchCommits asks each group's coordinator for its committed offsets in
// one sharded OffsetFetch, as kadm's FetchManyOffsets does. A group the
// answers leave out has no entry (measure reports it). The answer is built
// in bufs, overwriting the last.
func fetchCommits(ctx context.Context, cl *kgo.Client, groups []string, bufs *commitBufs) map[string]groupCommits {
	if bufs.by == nil {
		bufs.by = make(map[string]groupCommits, len(groups))
	}
	out := bufs.by
	clear(out)
	if len(groups) == 0 {
		return out
	}
	if !asksFor(bufs.req, groups) {
		bufs.req = kmsg.NewPtrOffsetFetchRequest()
		bufs.req.Groups = make([]kmsg.OffsetFetchRequestGroup, len(groups))
		for i, g := range groups {
			bufs.req.Groups[i] = kmsg.NewOffsetFetchRequestGroup()
			bufs.req.Groups[i].Group = g
		}
	}
	shards := cl.RequestSharded(ctx, bufs.req)
	n := 0
	for _, shard := range shards {
		if resp, ok := shard.Resp.(*kmsg.OffsetFetchResponse); ok && shard.Err == nil {
			for _, g := range resp.Groups {
				for _, t := range g.Topics {
					n += len(t.Partitions)
				}
			}
		}
	}
	all := bufs.all[:0]
	if cap(all) < n {
		all = make([]committed, 0, n)
	}
	for _, shard := range shards {
		sreq, _ := shard.Req.(*kmsg.OffsetFetchRequest)
		resp, ok := shard.Resp.(*kmsg.OffsetFetchResponse)
		err := shard.Err
		if err == nil && !ok {
			err = errUnexpectedResponse
		}
		if err == nil {
			err = authErr(resp.ErrorCode)
		}
		if err != nil {
			if sreq != nil {
				for _, g := range sreq.Groups {
					out[g.Group] = groupCommits{err: err}
				}
			}
			continue
		}
		for _, g := range resp.Groups {
			if err := authErr(g.ErrorCode); err != nil {
				out[g.Group] = groupCommits{err: err}
				continue
			}
			start := len(all)
			for _, t := range g.Topics {
				for _, p := range t.Partitions {
					all = append(all, committed{topic: t.Topic, partition: p.Partition, code: p.ErrorCode, at: p.Offset})
				}
			}
			parts := all[start:len(all):len(all)]
			slices.SortStableFunc(parts, byPartition) // brokers answer in order; a check costs as much
			out[g.Group] = groupCommits{err: kerr.ErrorForCode(g.ErrorCode), parts: parts}
		}
	}
	bufs.all = all
	return out
}

// asksFor reports whether req asks for exactly groups, in their order.
func asksFor(req *kmsg.OffsetFetchRequest, groups []string) bool {
	if req == nil || len(req.Groups) != len(groups) {
		return false
	}
	for i, g := range req.Groups {
		if g.Group != groups[i] {
			return false
		}
	}
	return true
}

// authErr is kadm's reading of an error code that fails a whole group or
// shard: an authorization failure, wrapped as kadm wraps it; nil otherwise.
func authErr(code int16) error {
	err := kerr.ErrorForCode(code)
	for _, auth := range authFailures {
		if errors.Is(err, auth) {
			return &kadm.AuthError{Err: err}
		}
	}
	return nil
}

// authFailures are the error codes kadm reads as authorization failures.
var authFailures = []error{kerr.ClusterAuthorizationFailed, kerr.TopicAuthorizationFailed, kerr.GroupAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed, kerr.DelegationTokenAuthorizationFailed}
