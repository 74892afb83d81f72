package scale

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// auditPolicy records every write in the targets' namespace but the pods'
// and ReplicaSets' (the control plane's own churn, which no tidal service
// makes): who wrote (user agent), what, when the API server received it and
// when it answered. One line per request, at the end of it.
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
- level: Metadata
  namespaces: ["` + ns + `"]
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`
}

// AuditPolicy is the audit policy a run's cluster needs (cluster.Options)
// for the writes and their timings in the report; ns holds the targets.
func AuditPolicy(ns string) string { return auditPolicy(ns) }

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
}

// readAudit reads an audit log's writes.
func readAudit(path string) ([]apiWrite, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer func() { _ = f.Close() }()
	var out []apiWrite
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
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
			Received time.Time `json:"requestReceivedTimestamp"`
			Done     time.Time `json:"stageTimestamp"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
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
		out = append(out, w)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].received.Before(out[j].received) })
	return out, nil
}
