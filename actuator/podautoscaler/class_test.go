package podautoscaler

import (
	"testing"

	"github.com/tidalscale/tidal/actuator/writebudget"
)

func TestClassOf(t *testing.T) {
	wake, down := writebudget.Wake, writebudget.Down
	tests := []struct {
		name    string
		cur     int32
		known   bool
		hint    *writebudget.Class
		desired int32
		want    writebudget.Class
	}{
		{"known zero woken", 0, true, nil, 2, writebudget.Wake},
		{"known replicas beat the decider's hint", 0, true, &down, 2, writebudget.Wake},
		{"known replicas, more asked", 1, true, &wake, 3, writebudget.Up},
		{"unknown replicas follow the decider", 0, false, &wake, 2, writebudget.Wake},
		{"unknown replicas, decider says down", 0, false, &down, 2, writebudget.Down},
		{"unknown replicas, no hint, some asked", 0, false, nil, 2, writebudget.Up},
		{"unknown replicas, no hint, none asked", 0, false, nil, 0, writebudget.Down},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classOf(tt.cur, tt.known, tt.hint, tt.desired); got != tt.want {
				t.Errorf("classOf = %s, want %s", got, tt.want)
			}
		})
	}
}
