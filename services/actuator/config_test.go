package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFlagValidation(t *testing.T) {
	tests := []struct {
		args []string
		// flag, key and value, when set, name a fresh config directory
		// holding that one key, given as --flag.
		flag, key, value string
		want             string
	}{
		{args: []string{"--scaler=etcd"}, want: `--scaler "etcd": want memory or kubernetes`},
		{args: []string{"--scaler=kubernetes", "--workers=0"}, want: "--workers 0: want 1 to 64"},
		{args: []string{"--scaler=kubernetes", "--kube-qps=0"}, want: "--kube-qps 0: want > 0"},
		{args: []string{"--scaler=kubernetes", "--target-retry=0s"}, want: "--target-retry 0s: want > 0"},
		{args: []string{"--scaler=kubernetes", "--config-autoscaler=/nonexistent"}, want: "--config-autoscaler /nonexistent"},
		{args: []string{"--scaler=kubernetes"}, flag: "config-autoscaler", key: "stable-window", value: "2s", want: "stable-window"},
		{args: []string{"--scaler=kubernetes"}, flag: "config-deployment", key: "progress-deadline", value: "1500ms", want: "progress-deadline"},
		{args: []string{"--scaler=kubernetes", "--kafka-brokers=k1:9092,k2"}, want: `"k2" is not host:port`},
		{args: []string{"--scaler=kubernetes", "--function-sidecar-image="}, want: "--function-sidecar-image"},
		{args: []string{"--scaler=kubernetes", "--kubeconfig=/nonexistent/kubeconfig"}, want: "kubernetes client config"},
		{args: []string{"--knative"}, want: "--knative: needs --scaler kubernetes"},
		{args: []string{"--scaler=kubernetes", "--knative", "--knative-classes=hpa.autoscaling.knative.dev"}, want: "Knative's HPA class"},
		{args: []string{"--scaler=kubernetes", "--knative", "--knative-classes=,"}, want: "want 1 to 8 classes"},
		{args: []string{"--scaler=kubernetes", "--knative", "--knative-classes=a b"}, want: `"a b" is not a class name`},
		{args: []string{"--scaler=kubernetes", "--knative", "--cluster-domain="}, want: "--cluster-domain"},
		{args: []string{"--scaler=kubernetes", "--live-read-rate=0"}, want: "--live-read-rate 0"},
		{args: []string{"--scaler=kubernetes", "--live-read-rate=+Inf"}, want: "--live-read-rate +Inf"},
		{args: []string{"--scaler=kubernetes", "--live-read-namespace-rate=-1"}, want: "--live-read-namespace-rate -1"},
		{args: []string{"--scaler=kubernetes", "--live-read-namespace-rate=NaN"}, want: "--live-read-namespace-rate NaN"},
		{args: []string{"--scaler=kubernetes", "--live-read-namespace-burst=0"}, want: "--live-read-namespace-burst 0"},
		{args: []string{"--scale-kinds=Deployment"}, want: `"Deployment": want group/Kind`},
		{args: []string{"--scale-kinds=apps/Deployment,core/Pod"}, want: "Pods have no /scale subresource"},
		{args: []string{"--scale-kinds=Apps!/Deployment"}, want: "DNS-1123 subdomain"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(append(tt.args, tt.flag, tt.key), " "), func(t *testing.T) {
			if tt.flag != "" {
				dir := t.TempDir()
				if err := os.WriteFile(filepath.Join(dir, tt.key), []byte(tt.value), 0o644); err != nil {
					t.Fatal(err)
				}
				tt.args = append(tt.args, "--"+tt.flag+"="+dir)
			}
			err := run(context.Background(), append([]string{"--grpc-addr=127.0.0.1:0", "--http-addr=127.0.0.1:0"}, tt.args...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}
