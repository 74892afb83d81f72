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
	"github.com/tidalscale/tidal/decider/pbconv"
	"github.com/tidalscale/tidal/decider/sender"
	"github.com/tidalscale/tidal/decider/watch"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
	deciderv1 "github.com/tidalscale/tidal/proto/tidal/decider/v1"
	"github.com/tidalscale/tidal/strategy/kpaconfig"
)

// snapshotPage is how many decisions a new watcher's first part fetches at
// a time: the most a stream holds while its client is slow to read.
const snapshotPage = 256

// handler serves DeciderService. Requests arrive validated by the server's
// interceptor chain; Ingest's samples are checked one by one here, so a bad
// sample is dropped and counted without ending the stream.
type handler struct {
	deciderv1.UnimplementedDeciderServiceServer
	engine *engine.Engine
	// index pages ListDecisions and a new watcher's first decisions.
	index *engine.Index
	hub   *watch.Hub
	// caller names a call's caller, for the per-caller bound on watchers.
	caller func(ctx context.Context) string
	sender *sender.Sender
	now    func() time.Time
	log    *zap.Logger
	drops  *prometheus.CounterVec
	// configRefused counts Knative configurations from collectors that did
	// not parse, by ConfigMap.
	configRefused *prometheus.CounterVec
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
	// The stream's word on how far its scrape samples have come lets the
	// KPA ticks go before --tick-lateness.
	src := h.engine.OpenSource()
	defer src.Close()
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
		if c := req.GetScrapesCompleteBefore(); c != nil {
			src.CompleteBefore(c.AsTime()) // after the batch's samples
		}
	}
}

func (h *handler) ingest(req *deciderv1.IngestRequest, replayed map[string]bool) (accepted, dropped int64) {
	now := h.now()
	// Built only to log: a logger per batch would cost more than the batch.
	log := func() *zap.Logger { return h.log.With(zap.String("collector", req.GetCollectorId())) }
	if kc := req.GetKnativeConfig(); kc != nil {
		h.applyKnativeConfig(kc, now, log())
	}
	// Removals first: a target that went and came back since the last
	// batch is in both, and what the collector holds now is the spec.
	for _, r := range req.GetRemoved() {
		if t := targetOf(r); h.engine.Remove(t) {
			h.sender.Forget(t)
		}
	}
	for _, s := range req.GetSpecs() {
		if err := h.engine.Upsert(specOf(s), now); errors.Is(err, engine.ErrTooManyTargets) {
			// Counted, not logged per target: a flood must not flood the log.
			h.drops.WithLabelValues("target_limit").Inc()
		} else if err != nil {
			log().Warn("target spec refused", zap.String("target", s.GetTarget().Key()), zap.Error(err))
		}
	}
	// One array for every metric's samples: Record and Replay copy them.
	var samples []engine.Sample
	for i, m := range req.GetMetrics() {
		t := targetOf(m.GetTarget())
		samples = samples[:0]
		for j, ms := range m.GetSamples() {
			// Checked under a fixed path, which costs nothing; the error
			// to log is made again with the sample's own.
			if ms.ValidateField("sample", now) != nil {
				err := ms.ValidateField(fmt.Sprintf("metrics[%d].samples[%d]", i, j), now)
				h.drops.WithLabelValues("invalid").Inc()
				dropped++
				log().Debug("sample dropped", zap.String("target", t.Key()), zap.Error(err))
				continue
			}
			samples = append(samples, pbconv.Sample(ms))
		}
		if m.GetMeasureError() != "" {
			// The error is the target's state now: lag strategies hold
			// their scale on it; it is never read as zero lag. It is kept
			// per target and shown by Explain: bounded, printable.
			msg := commonv1.Printable(commonv1.Truncate(m.GetMeasureError(), deciderv1.MaxMeasureError))
			samples = append(samples, engine.Sample{At: now, ReadyPods: -1, MeasureError: msg})
		}
		if req.GetReplay() && !replayed[t.Key()] {
			if err := h.engine.Replay(t, samples, now); err != nil {
				if errors.Is(err, engine.ErrUnknownTarget) {
					h.drops.WithLabelValues("unknown_target").Add(float64(len(samples)))
				} else {
					log().Warn("replay refused", zap.String("target", t.Key()), zap.Error(err))
				}
				dropped += int64(len(samples))
				continue
			}
			// Only targets the engine holds: the set stays within its bound.
			replayed[t.Key()] = true
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

// applyKnativeConfig resolves every KPA target against the Knative
// configuration a collector read from the cluster. A ConfigMap's data that
// does not parse is refused, logged and counted, and the configuration in
// effect stays (the collectors refuse such an edit first; this guards the
// stream).
func (h *handler) applyKnativeConfig(kc *deciderv1.KnativeConfig, now time.Time, log *zap.Logger) {
	kcfg, dep := h.engine.KPAConfig()
	var err error
	if a := kc.GetAutoscaler(); a != nil {
		if kcfg, err = kpaconfig.ParseConfig(a.GetData()); err != nil {
			h.configRefused.WithLabelValues("config-autoscaler").Inc()
			log.Error("knative configuration refused; the one in effect stays", zap.String("configmap", "config-autoscaler"), zap.Error(err))
			return
		}
	}
	if d := kc.GetDeployment(); d != nil {
		if dep, err = kpaconfig.ParseDeploymentConfig(d.GetData()); err != nil {
			h.configRefused.WithLabelValues("config-deployment").Inc()
			log.Error("knative configuration refused; the one in effect stays", zap.String("configmap", "config-deployment"), zap.Error(err))
			return
		}
	}
	if changed, refused := h.engine.SetKPAConfig(kcfg, dep, now); changed {
		log.Info("knative configuration applied to every KPA target", zap.Int("targets_refused", refused))
	}
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
	after, err := commonv1.PageCursor(req.GetPageToken())
	if err != nil {
		return nil, err // the validator checked it already
	}
	ds, next := h.index.Page(req.GetNamespace(), after, commonv1.PageSize(req.GetPageSize()))
	resp := &deciderv1.ListDecisionsResponse{Decisions: make([]*commonv1.Decision, 0, len(ds)), NextPageToken: commonv1.PageToken(next)}
	for _, d := range ds {
		resp.Decisions = append(resp.Decisions, decisionOf(d))
	}
	return resp, nil
}

// WatchDecisions runs on the stream's own goroutine and starts none: it
// sends the current decisions a page at a time, then what the hub queues.
// The hub never waits for it; when it falls a buffer behind, the hub drops
// it and the stream ends as too slow as soon as a send returns.
func (h *handler) WatchDecisions(req *deciderv1.WatchDecisionsRequest, st deciderv1.DeciderService_WatchDecisionsServer) error {
	ctx := st.Context()
	w, err := h.hub.Subscribe(req.GetNamespace(), h.caller(ctx))
	if err != nil {
		return errWatchRefused(err)
	}
	defer h.hub.Unsubscribe(w)
	send := func(d engine.Decision) error {
		return st.Send(&deciderv1.WatchDecisionsResponse{Decision: decisionOf(d)})
	}
	for after := ""; ; {
		ds, next := h.index.Page(req.GetNamespace(), after, snapshotPage)
		for _, d := range ds {
			if err := send(d); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-w.Dropped():
			return errWatcherTooSlow
		default:
		}
		if next == "" {
			break
		}
		after = next
	}
	var batch []engine.Decision
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.Dropped():
			return errWatcherTooSlow
		case <-w.Ready():
			batch = w.Take(batch)
			for _, d := range batch {
				if err := send(d); err != nil {
					return err
				}
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
