package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestFlagValidation(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--scaler=etcd"}, `--scaler "etcd": want memory or kubernetes`},
		{[]string{"--scaler=kubernetes", "--workers=0"}, "--workers 0: want 1 to 64"},
		{[]string{"--scaler=kubernetes", "--kube-qps=0"}, "--kube-qps 0: want > 0"},
		{[]string{"--scaler=kubernetes", "--target-retry=0s"}, "--target-retry 0s: want > 0"},
		{[]string{"--scaler=kubernetes", "--config-autoscaler=stable-window"}, `"stable-window" is not key=value`},
		{[]string{"--scaler=kubernetes", "--config-autoscaler=stable-window=2s"}, "stable-window"},
		{[]string{"--scaler=kubernetes", "--progress-deadline=1500ms"}, "--progress-deadline"},
		{[]string{"--scaler=kubernetes", "--kafka-brokers=k1:9092,k2"}, `"k2" is not host:port`},
		{[]string{"--scaler=kubernetes", "--function-sidecar-image="}, "--function-sidecar-image"},
		{[]string{"--scaler=kubernetes", "--kubeconfig=/nonexistent/kubeconfig"}, "kubernetes client config"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			err := run(context.Background(), append([]string{"--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0"}, tt.args...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}
