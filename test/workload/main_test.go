package workload

import (
	"testing"

	"github.com/tidalscale/tidal/test/cluster"
)

func TestMain(m *testing.M) { cluster.Main(m) }
