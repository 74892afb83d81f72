package scale

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/tidalscale/tidal/test/cluster"
)

// auditPolicy records every write in the targets' namespace but the pods'
// and ReplicaSets' (the control plane's own churn, which no tidal service
// makes): who wrote (user agent), what, when the API server received it and
// when it answered. One line per request, at the end of it. PodAutoscaler
// status writes and Events carry their body, for what each one changed
// and why it was made (apiWrite.detail).
func auditPolicy(ns string) string {
	return `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  resources:
  - group: ""
    resources: ["pods", "pods/*"]
  - group: "apps"
    resources: ["replicasets", "replicasets/*"]
- level: Request
  namespaces: ["` + ns + `"]
  verbs: ["create", "update", "patch"]
  resources:
  - group: "autoscaling.tidal.dev"
    resources: ["podautoscalers/status"]
  - group: ""
    resources: ["events"]
- level: Metadata
  namespaces: ["` + ns + `"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`
}

// podReadyDelay is how long a run's pods have their IP before they are
// Ready: the pod farm serves them from when it sees the IP, which on a
// machine as loaded as a 10,000-target run's comes seconds after it was
// given. A real pod takes as long to start its containers and pass its
// first readiness probe.
const podReadyDelay = 3 * time.Second

// ClusterOptions are what a run's cluster needs: the audit policy for the
// writes and their timings in the report (ns holds the targets), pods
// Ready podReadyDelay after they have an address (by 16 kwok workers: that
// is two status writes a pod, and kwok's four made half as many pods
// Ready as the levels asked at 3,000 targets), and only
// the controllers the targets use. The others that watch pods (garbage
// collection, disruption budgets, endpoints, jobs, node lifecycle and
// more) would each handle every pod event of tens of thousands of pods on
// the machine the services are measured on. The control plane runs at
// cfg.ControlPlaneNice.
func ClusterOptions(cfg Config, ns string, log io.Writer) cluster.Options {
	return cluster.Options{Log: log, AuditPolicy: auditPolicy(ns), PodReadyDelay: podReadyDelay, PodStageWorkers: 16, Profiling: true, Nice: cfg.ControlPlaneNice, Controllers: []string{
		"deployment-controller", "replicaset-controller",
		// Pods are admitted only once their namespace's default
		// ServiceAccount exists.
		"serviceaccount-controller", "serviceaccount-token-controller", "root-ca-certificate-publisher-controller",
	}}
}

// apiWrite is one write the API server answered.
type apiWrite struct {
	// agent is the client's user agent up to its first '/': the binary's
	// name for client-go's default ("tidal-actuator").
	agent string
	verb  string
	// what is resource[/subresource].
	what           string
	name           string
	code           int
	received, done time.Time
	// detail says what a PodAutoscaler status write changed from the
	// last one the log holds for it (statusChange) and an Event's
	// reason; empty for other writes.
	detail string
}

// readAudit reads an audit log's writes.
func readAudit(path string) ([]apiWrite, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer func() { _ = f.Close() }()
	var out []apiWrite
	statuses := map[string]map[string]json.RawMessage{} // each PodAutoscaler's last status write
	r := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			// A last line without its newline is an event the API server
			// is still writing (it writes while the run reads): what
			// it holds came after the steady phase.
			break
		}
		if err != nil {
			return nil, fmt.Errorf("audit log %s: %w", path, err)
		}
		var e struct {
			Stage     string `json:"stage"`
			Verb      string `json:"verb"`
			UserAgent string `json:"userAgent"`
			ObjectRef *struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
				Name        string `json:"name"`
			} `json:"objectRef"`
			ResponseStatus *struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
			Received      time.Time `json:"requestReceivedTimestamp"`
			Done          time.Time `json:"stageTimestamp"`
			RequestObject *struct {
				Status map[string]json.RawMessage `json:"status"`
				Reason string                     `json:"reason"`
				Last   time.Time                  `json:"lastTimestamp"`
			} `json:"requestObject"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", path, err)
		}
		if e.Stage != "ResponseComplete" || e.ObjectRef == nil {
			continue
		}
		w := apiWrite{verb: e.Verb, what: e.ObjectRef.Resource, name: e.ObjectRef.Name, received: e.Received, done: e.Done}
		if e.ObjectRef.Subresource != "" {
			w.what += "/" + e.ObjectRef.Subresource
		}
		w.agent, _, _ = strings.Cut(e.UserAgent, "/")
		if e.ResponseStatus != nil {
			w.code = e.ResponseStatus.Code
		}
		if o := e.RequestObject; o != nil {
			switch {
			case w.what == "events":
				w.detail = o.Reason
				if !o.Last.IsZero() && w.received.Sub(o.Last) >= eventLate {
					// The recorder sends Events one at a time: under
					// load they reach the API server long after what
					// they report.
					w.detail += fmt.Sprintf(", sent %v or more after it happened", eventLate)
				}
			case w.what == "podautoscalers/status" && w.code < 300:
				w.detail = statusChange(statuses[w.name], o.Status)
				statuses[w.name] = o.Status
			}
		}
		out = append(out, w)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].received.Before(out[j].received) })
	return out, nil
}

// eventLate is how long after what it reports an Event's write is told
// apart (apiWrite.detail).
const eventLate = 10 * time.Second

// statusChange names the fields of a PodAutoscaler's status that differ
// from was to now: top-level fields by name, lastDecision's and each
// condition's by theirs ("lastDecision.sequence", "conditions.Active");
// "first" when there is no was, "nothing" when they are the same.
func statusChange(was, now map[string]json.RawMessage) string {
	if was == nil {
		return "first"
	}
	var changed []string
	for _, k := range keysOf(was, now) {
		a, b := was[k], now[k]
		switch k {
		case "lastDecision":
			var da, db map[string]json.RawMessage
			if json.Unmarshal(a, &da) != nil || json.Unmarshal(b, &db) != nil {
				// Not an object (null, or unset on one side): the
				// field as a whole.
				if !bytes.Equal(a, b) {
					changed = append(changed, k)
				}
				continue
			}
			for _, f := range keysOf(da, db) {
				if !bytes.Equal(da[f], db[f]) {
					changed = append(changed, k+"."+f)
				}
			}
		case "conditions":
			ca, cb := conditionsByType(a), conditionsByType(b)
			for _, t := range keysOf(ca, cb) {
				if ca[t] != cb[t] {
					changed = append(changed, k+"."+t)
				}
			}
		default:
			if !bytes.Equal(a, b) {
				changed = append(changed, k)
			}
		}
	}
	if len(changed) == 0 {
		return "nothing"
	}
	return strings.Join(changed, " ")
}

// conditionsByType maps each condition in raw to its status, reason and
// message: what a reader sees change (a new transition time comes with a
// new status).
func conditionsByType(raw json.RawMessage) map[string]string {
	var cs []struct{ Type, Status, Reason, Message string }
	_ = json.Unmarshal(raw, &cs)
	m := make(map[string]string, len(cs))
	for _, c := range cs {
		m[c.Type] = c.Status + "/" + c.Reason + "/" + c.Message
	}
	return m
}

// keysOf returns the keys of a and b, sorted, each once.
func keysOf[V any](a, b map[string]V) []string {
	ks := make([]string, 0, len(a)+len(b))
	for k := range a {
		ks = append(ks, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}
