package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tidalscale/tidal/decider/engine"
	"github.com/tidalscale/tidal/decider/sender"
	"github.com/tidalscale/tidal/decider/watch"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
)

// handler serves DeciderService. Requests arrive validated by the server's
// interceptor chain; Ingest's samples are checked one by one here, so a bad
// sample is dropped and counted without ending the stream.
type handler struct {
	deciderv1.UnimplementedDeciderServiceServer
	engine *engine.Engine
	hub    *watch.Hub
	sender *sender.Sender
	now    func() time.Time
	log    *zap.Logger
	drops  *prometheus.CounterVec
}

var _ deciderv1.DeciderServiceServer = (*handler)(nil)

// decided hands new decisions to the actuator and to watchers.
func (h *handler) decided(ds []engine.Decision) {
	if len(ds) == 0 {
		return
	}
	h.sender.Enqueue(ds)
	h.hub.Publish(ds)
}

func (h *handler) Ingest(st deciderv1.DeciderService_IngestServer) error {
	// replayed holds the targets whose history this stream already replayed:
	// the first replayed batch of a target rebuilds it, later ones add to it.
	replayed := map[string]bool{}
	var accepted, dropped int64
	for {
		req, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return st.SendAndClose(&deciderv1.IngestResponse{AcceptedSamples: accepted, DroppedSamples: dropped})
		}
		if err != nil {
			return err
		}
		a, d := h.ingest(req, replayed)
		accepted += a
		dropped += d
	}
}

func (h *handler) ingest(req *deciderv1.IngestRequest, replayed map[string]bool) (accepted, dropped int64) {
	now := h.now()
	log := h.log.With(zap.String("collector", req.GetCollectorId()))
	for _, s := range req.GetSpecs() {
		if err := h.engine.Upsert(specOf(s), now); err != nil {
			log.Warn("target spec refused", zap.String("target", s.GetTarget().Key()), zap.Error(err))
		}
	}
	for _, r := range req.GetRemoved() {
		h.engine.Remove(targetOf(r))
	}
	for i, m := range req.GetMetrics() {
		t := targetOf(m.GetTarget())
		samples := make([]engine.Sample, 0, len(m.GetSamples())+1)
		for j, ms := range m.GetSamples() {
			if err := ms.ValidateField(fmt.Sprintf("metrics[%d].samples[%d]", i, j), now); err != nil {
				h.drops.WithLabelValues("invalid").Inc()
				dropped++
				log.Debug("sample dropped", zap.String("target", t.Key()), zap.Error(err))
				continue
			}
			samples = append(samples, sampleOf(ms))
		}
		if m.GetMeasureError() != "" {
			// The error is the target's state now: lag strategies hold
			// their scale on it; it is never read as zero lag.
			samples = append(samples, engine.Sample{At: now, ReadyPods: -1, MeasureError: m.GetMeasureError()})
		}
		if req.GetReplay() && !replayed[t.Key()] {
			replayed[t.Key()] = true
			if err := h.engine.Replay(t, samples, now); err != nil {
				log.Warn("replay refused", zap.String("target", t.Key()), zap.Error(err))
				dropped += int64(len(samples))
				continue
			}
			accepted += int64(len(samples))
			h.setReady(t, m)
			continue
		}
		h.setReady(t, m)
		for _, s := range samples {
			poke, err := h.engine.Record(t, s, now)
			if err != nil {
				dropped++
				continue
			}
			accepted++
			if poke && !req.GetReplay() {
				d, informed, err := h.engine.Poke(t, now)
				if err == nil && informed {
					h.decided([]engine.Decision{d})
				}
			}
		}
	}
	return accepted, dropped
}

// setReady applies a batch's current ready pod count, if it carries one.
func (h *handler) setReady(t engine.Target, m *deciderv1.TargetMetrics) {
	if m.ReadyPods == nil {
		return
	}
	if err := h.engine.SetReady(t, m.GetReadyPods()); err != nil {
		h.log.Debug("ready pods refused", zap.String("target", t.Key()), zap.Error(err))
	}
}

func (h *handler) GetDecision(_ context.Context, req *deciderv1.GetDecisionRequest) (*deciderv1.GetDecisionResponse, error) {
	d, ok := h.engine.Get(targetOf(req.GetTarget()))
	if !ok {
		return nil, errUnknownTarget(req.GetTarget())
	}
	return &deciderv1.GetDecisionResponse{Decision: decisionOf(d)}, nil
}

func (h *handler) ListDecisions(_ context.Context, req *deciderv1.ListDecisionsRequest) (*deciderv1.ListDecisionsResponse, error) {
	resp := &deciderv1.ListDecisionsResponse{}
	for _, d := range h.engine.List(req.GetNamespace()) {
		resp.Decisions = append(resp.Decisions, decisionOf(d))
	}
	return resp, nil
}

func (h *handler) WatchDecisions(req *deciderv1.WatchDecisionsRequest, st deciderv1.DeciderService_WatchDecisionsServer) error {
	w := h.hub.Subscribe(req.GetNamespace())
	defer h.hub.Unsubscribe(w)
	for _, d := range h.engine.List(req.GetNamespace()) {
		if err := st.Send(&deciderv1.WatchDecisionsResponse{Decision: decisionOf(d)}); err != nil {
			return err
		}
	}
	for {
		select {
		case <-st.Context().Done():
			return nil
		case <-w.Dropped():
			return errWatcherTooSlow
		case d := <-w.C():
			if err := st.Send(&deciderv1.WatchDecisionsResponse{Decision: decisionOf(d)}); err != nil {
				return err
			}
		}
	}
}

func (h *handler) Explain(_ context.Context, req *deciderv1.ExplainRequest) (*deciderv1.ExplainResponse, error) {
	d, ok := h.engine.Get(targetOf(req.GetTarget()))
	if !ok {
		return nil, errUnknownTarget(req.GetTarget())
	}
	return explainOf(d), nil
}
