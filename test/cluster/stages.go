package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// podAddressStage gives a new pod its IP and nothing more: Pending, its
// containers creating, not Ready. podReadyStage marks it Ready %d ms later
// (the delay), keeping the IP; kwok merges each template into the status.
const podAddressStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-address
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.podIP'
      operator: 'DoesNotExist'
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{ $now | Quote }}
        reason: ContainersNotReady
        status: "False"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        reason: ContainersNotReady
        status: "False"
        type: ContainersReady
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        restartCount: 0
        started: false
        state:
          waiting:
            reason: ContainerCreating
      {{ end }}
      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
      podIP: {{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) | Quote }}
      phase: Pending
`

const podReadyStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.podIP'
      operator: 'Exists'
    - key: '.status.phase'
      operator: 'In'
      values:
      - 'Pending'
  delay:
    durationMilliseconds: %d
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - lastTransitionTime: {{ $now | Quote }}
        reason: ""
        status: "True"
        type: Ready
      - lastTransitionTime: {{ $now | Quote }}
        reason: ""
        status: "True"
        type: ContainersReady
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
`

// writeDelayedReadyStages writes to dir a copy of the kwok stages file base
// in which a pod gets its IP at once and is Ready delay later, in place of
// base's pod-ready stage that does both in one write, and returns its path.
func writeDelayedReadyStages(dir, base string, delay time.Duration) (string, error) {
	b, err := os.ReadFile(base)
	if err != nil {
		return "", fmt.Errorf("kwok stages: %w", err)
	}
	docs := []string{podAddressStage, fmt.Sprintf(podReadyStage, delay.Milliseconds())}
	replaced := false
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return "", fmt.Errorf("kwok stages %s: %w", base, err)
		}
		if meta.Metadata.Name == "pod-ready" {
			replaced = true
			continue
		}
		docs = append(docs, strings.TrimSpace(doc)+"\n")
	}
	if !replaced {
		return "", fmt.Errorf("kwok stages %s: no pod-ready stage to replace", base)
	}
	path := filepath.Join(dir, "kwok-stages.yaml")
	if err := os.WriteFile(path, []byte(strings.Join(docs, "---\n")), 0o644); err != nil {
		return "", fmt.Errorf("kwok stages: %w", err)
	}
	return path, nil
}

// kwokConfiguration is kwok's configuration at its defaults (v0.8.0's
// zz_generated.defaults.go) but %d pod stage workers: kwok does not default
// the options of a configuration it reads, so each is written out.
const kwokConfiguration = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  podPlayStageParallelism: %d
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
  enableDebuggingHandlers: true
  enableContentionProfiling: false
  enableProfilingHandler: true
`

// writeKwokConfiguration writes to dir kwok's configuration with
// podWorkers pod stage workers and returns its path.
func writeKwokConfiguration(dir string, podWorkers int) (string, error) {
	path := filepath.Join(dir, "kwok-config.yaml")
	if err := os.WriteFile(path, []byte(fmt.Sprintf(kwokConfiguration, podWorkers)), 0o644); err != nil {
		return "", fmt.Errorf("kwok configuration: %w", err)
	}
	return path, nil
}
