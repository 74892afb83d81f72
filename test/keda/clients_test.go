package keda

import (
	tidalclient "github.com/tidalscale/tidal/apis/generated/clientset/versioned"
	"github.com/tidalscale/tidal/test/cluster"
)

// tidalClient is a client of tidal's custom resources in c.
func tidalClient(c *cluster.Cluster) (tidalclient.Interface, error) {
	return tidalclient.NewForConfig(c.Config())
}
