package server_test

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	actuatorv1 "github.com/tidalscale/tidal/proto/tidal/actuator/v1"
	"github.com/tidalscale/tidal/services/server"
)

// A binary builds the server, registers its handler, binds, reports ready
// once its components are primed, and runs until its context ends.
func Example() {
	srv := server.New(server.Config{
		GRPCAddr:      "127.0.0.1:0",
		HTTPAddr:      "127.0.0.1:0",
		ShutdownGrace: time.Second,
		LogLevel:      "info",
	}, zap.NewNop(), prometheus.NewRegistry())
	actuatorv1.RegisterActuatorServiceServer(srv.GRPC(), &actuatorv1.UnimplementedActuatorServiceServer{})
	if _, _, err := srv.Listen(); err != nil {
		fmt.Println(err)
		return
	}
	srv.SetReady(true)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	fmt.Println(srv.Run(ctx)) // a requested shutdown is not an error
	// Output: <nil>
}
