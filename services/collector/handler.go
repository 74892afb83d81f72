package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/collector/dispatch"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// readyPodNames lists a target's ready pods for GetWindow; nil when unknown.
type readyPodNames func(ref *commonv1.TargetRef) []string

// ownerOf names the collector replica that owns a target, and whether it is
// this one. Nil means this replica owns everything.
type ownerOf func(ref *commonv1.TargetRef) (owner string, mine bool)

// handler serves CollectorService. Requests arrive validated by the server's
// interceptor chain.
type handler struct {
	collectorv1.UnimplementedCollectorServiceServer
	hub *dispatch.Hub
	now func() time.Time
	// implicit makes an unknown pushed target a KPA target with defaults
	// (--discovery=push); otherwise it is refused.
	implicit bool
	pods     readyPodNames
	owner    ownerOf
	pushed   prometheus.Counter
	refused  *prometheus.CounterVec
}

var _ collectorv1.CollectorServiceServer = (*handler)(nil)

func newHandler(hub *dispatch.Hub, implicit bool, pods readyPodNames, owner ownerOf, now func() time.Time, reg prometheus.Registerer) *handler {
	f := promauto.With(reg)
	h := &handler{
		hub:      hub,
		now:      now,
		implicit: implicit,
		pods:     pods,
		owner:    owner,
		pushed: f.NewCounter(prometheus.CounterOpts{
			Name: "tidal_collector_pushed_stats_total",
			Help: "Stats recorded from PushStats and PushStatsStream.",
		}),
		refused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "tidal_collector_pushed_stats_refused_total",
			Help: "PushStats calls or stream messages refused, by reason: unknown-target, not-owner.",
		}, []string{"reason"}),
	}
	h.refused.WithLabelValues("unknown-target")
	h.refused.WithLabelValues("not-owner")
	return h
}

// record stamps each stat with its arrival second, as Knative's autoscaler
// stamps activator stats, and records all of them or none. It waits while a
// decider's backlog is full: a fast pusher slows down rather than the
// collector growing without bound.
func (h *handler) record(ctx context.Context, stats []*collectorv1.Stat) error {
	if err := h.hub.WaitRoom(ctx); err != nil {
		return errStopping(err)
	}
	if h.owner != nil {
		for i, s := range stats {
			if owner, mine := h.owner(s.GetTarget()); !mine {
				h.refused.WithLabelValues("not-owner").Inc()
				return errNotOwner(fmt.Sprintf("stats[%d].target", i), s.GetTarget(), owner)
			}
		}
	}
	at := timestamppb.New(h.now().Truncate(time.Second))
	refs := make([]*commonv1.TargetRef, len(stats))
	samples := make([]commonv1.MetricSample, len(stats))
	ptrs := make([]*commonv1.MetricSample, len(stats))
	for i, s := range stats {
		refs[i] = s.GetTarget()
		samples[i] = commonv1.MetricSample{
			Time:                      at,
			Source:                    commonv1.SampleSource_SAMPLE_SOURCE_PUSH,
			AverageConcurrency:        s.GetAverageConcurrency(),
			AverageProxiedConcurrency: s.GetAverageProxiedConcurrency(),
			RequestCount:              s.GetRequestCount(),
			ProxiedRequestCount:       s.GetProxiedRequestCount(),
		}
		ptrs[i] = &samples[i]
	}
	if i, full := h.hub.RecordPushed(refs, ptrs, h.implicit); full {
		h.refused.WithLabelValues("target-limit").Inc()
		return errTargetLimit(fmt.Sprintf("stats[%d].target", i), refs[i])
	} else if i >= 0 {
		h.refused.WithLabelValues("unknown-target").Inc()
		return errUnknownPushed(fmt.Sprintf("stats[%d].target", i), refs[i])
	}
	h.pushed.Add(float64(len(stats)))
	return nil
}

func (h *handler) PushStats(ctx context.Context, req *collectorv1.PushStatsRequest) (*collectorv1.PushStatsResponse, error) {
	if err := h.record(ctx, req.GetStats()); err != nil {
		return nil, err
	}
	return &collectorv1.PushStatsResponse{Accepted: int32(len(req.GetStats()))}, nil
}

func (h *handler) PushStatsStream(st collectorv1.CollectorService_PushStatsStreamServer) error {
	var n int64
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&collectorv1.PushStatsStreamResponse{Accepted: n})
		}
		if err != nil {
			return err
		}
		if err := h.record(st.Context(), req.GetStats()); err != nil {
			return err
		}
		n += int64(len(req.GetStats()))
	}
}

func (h *handler) ListTargets(_ context.Context, req *collectorv1.ListTargetsRequest) (*collectorv1.ListTargetsResponse, error) {
	cursor, err := commonv1.PageCursor(req.GetPageToken())
	if err != nil {
		return nil, err // the validator checked it already
	}
	page, next, err := h.hub.TargetsPage(req.GetNamespace(), cursor, commonv1.PageSize(req.GetPageSize()))
	if err != nil {
		return nil, errBadPageToken(req.GetPageToken())
	}
	resp := &collectorv1.ListTargetsResponse{Targets: make([]*collectorv1.TargetSummary, 0, len(page)), NextPageToken: commonv1.PageToken(next)}
	for _, s := range page {
		resp.Targets = append(resp.Targets, &collectorv1.TargetSummary{Target: s.Target, ReadyPods: s.ReadyPods, LastSampleTime: s.LastSampleTime, Decider: s.Decider})
	}
	return resp, nil
}

func (h *handler) GetWindow(_ context.Context, req *collectorv1.GetWindowRequest) (*collectorv1.GetWindowResponse, error) {
	w, ok := h.hub.Get(req.GetTarget())
	if !ok {
		return nil, errUnknownTarget(req.GetTarget())
	}
	resp := &collectorv1.GetWindowResponse{
		Target:    w.Target,
		Retention: durationpb.New(w.Retention),
		Samples:   w.Samples,
	}
	if h.pods != nil {
		resp.ReadyPods = h.pods(req.GetTarget())
	}
	if w.Error != "" {
		// The current error state (a Kafka broker down, say) comes first.
		reason, msg, ok := strings.Cut(w.Error, ": ")
		if !ok {
			reason, msg = "error", w.Error
		}
		resp.Errors = append(resp.Errors, &collectorv1.ScrapeError{Time: timestamppb.New(h.now()), Reason: reason, Message: msg})
	}
	for _, f := range w.Failures {
		if len(resp.Errors) == 16 {
			break
		}
		resp.Errors = append(resp.Errors, &collectorv1.ScrapeError{Time: timestamppb.New(f.Time), PodName: f.Pod, Reason: f.Reason, Message: f.Message})
	}
	return resp, nil
}
