package main

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tidalscale/tidal/collector/history"
	collectorv1 "github.com/tidalscale/tidal/proto/tidal/collector/v1"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// handler serves CollectorService. Requests arrive validated by the server's
// interceptor chain.
type handler struct {
	collectorv1.UnimplementedCollectorServiceServer
	store       *history.Store
	deciderAddr string
	now         func() time.Time
	log         *zap.Logger
	connected   atomic.Bool
	pushed      prometheus.Counter
}

var _ collectorv1.CollectorServiceServer = (*handler)(nil)

func newHandler(store *history.Store, deciderAddr string, now func() time.Time, log *zap.Logger, reg prometheus.Registerer) *handler {
	return &handler{
		store:       store,
		deciderAddr: deciderAddr,
		now:         now,
		log:         log,
		pushed: promauto.With(reg).NewCounter(prometheus.CounterOpts{
			Name: "tidal_collector_pushed_stats_total",
			Help: "Stats received through PushStats and PushStatsStream.",
		}),
	}
}

func (h *handler) setConnected(ok bool) { h.connected.Store(ok) }

// record stamps each stat with its arrival second, as Knative's autoscaler
// does with activator stats, and stores it. A target first seen here gets
// the KPA strategy with the decider's defaults.
func (h *handler) record(stats []*collectorv1.Stat) {
	at := timestamppb.New(h.now().Truncate(time.Second))
	for _, s := range stats {
		if !h.store.HasSpec(s.GetTarget()) {
			h.store.SetSpec(&deciderv1.TargetSpec{Target: s.GetTarget(), Strategy: commonv1.Strategy_STRATEGY_KPA})
		}
		h.store.Append(s.GetTarget(), &commonv1.MetricSample{
			Time:                      at,
			Source:                    commonv1.SampleSource_SAMPLE_SOURCE_PUSH,
			AverageConcurrency:        s.GetAverageConcurrency(),
			AverageProxiedConcurrency: s.GetAverageProxiedConcurrency(),
			RequestCount:              s.GetRequestCount(),
			ProxiedRequestCount:       s.GetProxiedRequestCount(),
		})
	}
	h.pushed.Add(float64(len(stats)))
}

func (h *handler) PushStats(_ context.Context, req *collectorv1.PushStatsRequest) (*collectorv1.PushStatsResponse, error) {
	h.record(req.GetStats())
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
		h.record(req.GetStats())
		n += int64(len(req.GetStats()))
	}
}

func (h *handler) ListTargets(_ context.Context, req *collectorv1.ListTargetsRequest) (*collectorv1.ListTargetsResponse, error) {
	resp := &collectorv1.ListTargetsResponse{}
	decider := ""
	if h.connected.Load() {
		decider = h.deciderAddr
	}
	for _, w := range h.store.Targets() {
		if ns := req.GetNamespace(); ns != "" && w.Target.GetNamespace() != ns {
			continue
		}
		sum := &collectorv1.TargetSummary{Target: w.Target, ReadyPods: -1, Decider: decider}
		if n := len(w.Samples); n > 0 {
			sum.LastSampleTime = w.Samples[n-1].GetTime()
		}
		for i := len(w.Samples) - 1; i >= 0; i-- {
			if w.Samples[i].ReadyPods != nil {
				sum.ReadyPods = w.Samples[i].GetReadyPods()
				break
			}
		}
		resp.Targets = append(resp.Targets, sum)
	}
	return resp, nil
}

func (h *handler) GetWindow(_ context.Context, req *collectorv1.GetWindowRequest) (*collectorv1.GetWindowResponse, error) {
	w, ok := h.store.Get(req.GetTarget())
	if !ok {
		return nil, errUnknownTarget(req.GetTarget())
	}
	resp := &collectorv1.GetWindowResponse{
		Target:    w.Target,
		Retention: durationpb.New(h.store.Retention()),
		Samples:   w.Samples,
	}
	if w.Error != "" {
		resp.Errors = append(resp.Errors, &collectorv1.ScrapeError{Reason: "measure", Message: w.Error})
	}
	return resp, nil
}
