package lag

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidalscale/tidal/strategy/lagconfig"
)

// Partition is one partition of the input topic as the collector sampled it.
type Partition struct {
	// Topic is the partition's topic when the target reads several (a KEDA
	// trigger without a topic, whose group commits on several: keda mode
	// sums them, as KEDA does); empty for the one input topic. Either every
	// partition of an Input has one or none has.
	Topic string
	// ID is the partition id, in [0, PartitionCount) for one topic.
	ID int32
	// End is the log-end offset (high-water mark): the offset the next
	// message written will get.
	End int64
	// Committed is the consumer group's committed offset; read only when
	// HasCommitted. Kafka's -1 ("no commit") counts as absent.
	Committed    int64
	HasCommitted bool
}

// Input is what the collector reports for one target at one tick.
type Input struct {
	// Partitions holds one entry per partition, in any order. Set.Observe
	// copies it, so the caller may reuse the slice.
	Partitions []Partition
	// PartitionCount is the topic's partition count from Kafka metadata
	// (of every topic, when the partitions name theirs); 0 means not
	// reported, and len(Partitions) stands in for it.
	PartitionCount int32
	// FetchFailed says the offsets could not be read this tick. The fixed
	// modes hold their previous decision ("no data"); faithful riff-queue
	// counts it as a non-empty queue, as riff did.
	FetchFailed bool
	// Replicas is the target's current replica count (Deployment
	// status.replicas), read only when ReplicasKnown.
	Replicas      int32
	ReplicasKnown bool
	// Writes is the number of messages written to the topic since the
	// previous tick (riff's producer metric), read only when WritesKnown.
	// Otherwise riff-queue derives it from the growth of the end offsets.
	Writes      int64
	WritesKnown bool
}

// Sentinel errors carried by Decision.Err; match them with errors.Is.
var (
	// ErrNoData: the fetch failed or nothing was observed since the last
	// tick. The previous decision is held; lag is never read as zero.
	ErrNoData = errors.New("no lag data")
	// ErrBadInput: the input is inconsistent; the wrapped message names the
	// field and the value. The previous decision is held.
	ErrBadInput = errors.New("bad lag input")
)

func badInput(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadInput}, args...)...)
}

// checkInput rejects what no mode can use. Rules that are not errors (a
// committed offset ahead of the end, a missing commit) belong to each mode.
// seen is scratch space indexed by partition id, gen marks this call.
func checkInput(in *Input, seen []uint32, gen uint32) ([]uint32, error) {
	if in.ReplicasKnown && in.Replicas < 0 {
		return seen, badInput("replicas = %d, want >= 0", in.Replicas)
	}
	if in.WritesKnown && in.Writes < 0 {
		return seen, badInput("writes = %d, want >= 0", in.Writes)
	}
	if in.PartitionCount < 0 {
		return seen, badInput("partitionCount = %d, want >= 0", in.PartitionCount)
	}
	if len(in.Partitions) == 0 {
		return seen, badInput("topic has 0 partitions (partitionCount = %d)", in.PartitionCount)
	}
	if in.PartitionCount > 0 && len(in.Partitions) > int(in.PartitionCount) {
		return seen, badInput("%d partitions reported, want <= partitionCount %d", len(in.Partitions), in.PartitionCount)
	}
	if in.Partitions[0].Topic != "" {
		return seen, checkTopics(in)
	}
	for i := range in.Partitions {
		p := &in.Partitions[i]
		if p.Topic != "" {
			return seen, badInput("partition %d of topic %q beside partitions of no topic: want a topic on every partition or on none", p.ID, prefix(p.Topic))
		}
		if p.ID < 0 || p.ID >= lagconfig.MaxPartitionID || (in.PartitionCount > 0 && p.ID >= in.PartitionCount) {
			return seen, badInput("partition id = %d, want in [0, %d)", p.ID, limitID(in.PartitionCount))
		}
		if p.End < 0 {
			return seen, badInput("partition %d: end offset = %d, want >= 0", p.ID, p.End)
		}
		if p.HasCommitted && p.Committed < -1 {
			return seen, badInput("partition %d: committed offset = %d, want >= 0 or -1 (none)", p.ID, p.Committed)
		}
		for int(p.ID) >= len(seen) {
			seen = append(seen, 0)
		}
		if seen[p.ID] == gen {
			return seen, badInput("partition %d reported twice", p.ID)
		}
		seen[p.ID] = gen
	}
	return seen, nil
}

// checkTopics checks the partitions of several topics: each names its
// topic, once per id.
func checkTopics(in *Input) error {
	type key struct {
		topic string
		id    int32
	}
	seen := make(map[key]bool, len(in.Partitions))
	for i := range in.Partitions {
		p := &in.Partitions[i]
		switch {
		case p.Topic == "":
			return badInput("partition %d of no topic beside partitions of topics: want a topic on every partition or on none", p.ID)
		case p.ID < 0 || p.ID >= lagconfig.MaxPartitionID:
			return badInput("topic %q partition id = %d, want in [0, %d)", prefix(p.Topic), p.ID, lagconfig.MaxPartitionID)
		case p.End < 0:
			return badInput("topic %q partition %d: end offset = %d, want >= 0", prefix(p.Topic), p.ID, p.End)
		case p.HasCommitted && p.Committed < -1:
			return badInput("topic %q partition %d: committed offset = %d, want >= 0 or -1 (none)", prefix(p.Topic), p.ID, p.Committed)
		case seen[key{p.Topic, p.ID}]:
			return badInput("topic %q partition %d reported twice", prefix(p.Topic), p.ID)
		}
		seen[key{p.Topic, p.ID}] = true
	}
	return nil
}

// prefix bounds a topic name quoted in an error.
func prefix(s string) string {
	const n = 64
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

func limitID(count int32) int32 {
	if count > 0 {
		return count
	}
	return lagconfig.MaxPartitionID
}

// committed returns the committed offset and whether there is one, reading
// Kafka's -1 as none.
func (p *Partition) committed() (int64, bool) {
	if !p.HasCommitted || p.Committed < 0 {
		return 0, false
	}
	return p.Committed, true
}
