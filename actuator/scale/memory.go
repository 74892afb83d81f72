package scale

import (
	"context"
	"sync"
)

// Memory is a Scaler that keeps replica counts in memory. The actuator runs
// with it when it has no Kubernetes cluster to write to (--scaler=memory), so
// the services can be run and inspected on their own; it holds nothing
// across restarts.
type Memory struct {
	// mu guards replicas.
	mu       sync.Mutex
	replicas map[Target]int32
}

// NewMemory returns an empty in-memory Scaler.
func NewMemory() *Memory { return &Memory{replicas: map[Target]int32{}} }

// GetReplicas implements Scaler. An unknown target has 0 replicas, as a
// Deployment scaled to zero does, so the first decision can create it.
func (m *Memory) GetReplicas(_ context.Context, t Target) (int32, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.replicas[t], nil
}

// SetReplicas implements Scaler.
func (m *Memory) SetReplicas(_ context.Context, t Target, replicas int32) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.replicas[t] = replicas
	return nil
}
