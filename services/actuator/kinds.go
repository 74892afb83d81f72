package main

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tidalscale/tidal/actuator/scale"
	commonv1 "github.com/tidalscale/tidal/proto/tidal/common/v1"
)

// useKinds makes h accept the kinds k allows, counting refusals into reg.
func (h *handler) useKinds(k *scale.Kinds, reg prometheus.Registerer) {
	h.kinds = k
	h.kindRefused = promauto.With(reg).NewCounter(prometheus.CounterOpts{
		Name: "tidal_actuator_kind_refused_total",
		Help: "Scale and GetScale calls refused for a target kind not in --scale-kinds.",
	})
}

// checkKind refuses a target whose kind is not allowed, with
// PERMISSION_DENIED naming the field and the kind.
func (h *handler) checkKind(field string, ref *commonv1.TargetRef) error {
	gk, ok := h.kinds.Allows(ref.GetApiVersion(), ref.GetKind())
	if ok {
		return nil
	}
	if h.kindRefused != nil {
		h.kindRefused.Inc()
	}
	return status.Errorf(codes.PermissionDenied, "invalid %s.kind %q (%s): this actuator scales only %s (--scale-kinds)",
		field, commonv1.Prefix(gk.Kind), commonv1.Prefix(scale.KindName(gk)), h.kinds)
}
