package dispatch

import (
	"errors"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/timestamppb"

	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// ErrBadCursor is returned for a page cursor the hub did not make.
var ErrBadCursor = errors.New("not a cursor of a target listing")

// Summary is what a listing shows of one target.
type Summary struct {
	Target *commonv1.TargetRef
	// ReadyPods is -1 when unknown.
	ReadyPods int32
	// LastSampleTime is the time of the newest sample held; nil without one.
	LastSampleTime *timestamppb.Timestamp
	// Decider is the address of the target's decider; empty when it is not
	// connected.
	Decider string
}

// cursorSep separates a cursor's parts; no part of a valid target key has it.
const cursorSep = "\x00"

func (k tkey) cursor() string {
	return k.ns + cursorSep + k.name + cursorSep + k.group + cursorSep + k.kind
}

func parseCursor(c string) (tkey, error) {
	parts := strings.Split(c, cursorSep)
	if len(parts) != 4 || parts[0] == "" || parts[1] == "" {
		return tkey{}, ErrBadCursor
	}
	return tkey{parts[0], parts[1], parts[2], parts[3]}, nil
}

// TargetsPage returns up to limit targets in key order (namespace, name,
// group, kind) after cursor ("" for the first page), only those in
// namespace unless it is empty, and the cursor of the next page ("" after
// the last). It walks every target under the hub's lock but keeps at most
// twice a page aside, and copies no history: a listing costs the hub
// O(targets) per page, and its memory does not grow with the targets.
func (h *Hub) TargetsPage(namespace, cursor string, limit int) (page []Summary, next string, err error) {
	limit = max(limit, 1)
	var after tkey
	if cursor != "" {
		if after, err = parseCursor(cursor); err != nil {
			return nil, "", err
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	// keep holds the smallest keys after the cursor seen so far: at most
	// limit+1 of them once it is trimmed.
	keep := make([]tkey, 0, 2*(limit+1))
	trim := func() {
		slices.SortFunc(keep, tkey.compare)
		keep = keep[:min(len(keep), limit+1)]
	}
	for k := range h.targets {
		if (namespace != "" && k.ns != namespace) || (cursor != "" && k.compare(after) <= 0) {
			continue
		}
		if len(keep) == cap(keep) {
			trim()
		}
		keep = append(keep, k)
	}
	trim()
	if len(keep) > limit {
		keep = keep[:limit]
		next = keep[limit-1].cursor()
	}
	page = make([]Summary, 0, len(keep))
	for _, k := range keep {
		t := h.targets[k]
		s := Summary{Target: t.ref, ReadyPods: t.ready}
		if last, ok := t.hist.LastTime(); ok {
			s.LastSampleTime = timestamppb.New(last)
		}
		if ob := h.outboxes[t.owner]; ob != nil && ob.connected {
			s.Decider = t.owner
		}
		page = append(page, s)
	}
	return page, next, nil
}
