package release

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// ChartArgs turns the TIDAL_* environment the chart gives a service's pods
// (dep's first container) into the same flags (services/server reads
// TIDAL_<FLAG> as --<flag>), for a local process: paths under the pod's
// ConfigMap mounts become dirs[mount path], variables in drop are left out
// (the caller passes loopback addresses in their place), and so are the
// addresses test/system's NewProc sets and variables from the downward API.
func ChartArgs(dep *appsv1.Deployment, dirs map[string]string, drop ...string) []string {
	drop = append(drop, "TIDAL_GRPC_ADDR", "TIDAL_HTTP_ADDR")
	var args []string
	for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
		name, ok := strings.CutPrefix(e.Name, "TIDAL_")
		if !ok || e.ValueFrom != nil || slices.Contains(drop, e.Name) {
			continue
		}
		v := e.Value
		if d, ok := dirs[v]; ok {
			v = d
		}
		args = append(args, "--"+strings.ToLower(strings.ReplaceAll(name, "_", "-"))+"="+v)
	}
	return args
}

// ConfigDirs writes the chart's two Knative ConfigMaps among objs (a
// release named by fullname) under dir, one file per key as a pod's mount
// holds them, and maps their mount paths to the directories.
func ConfigDirs(dir string, objs []*unstructured.Unstructured, fullname string) (map[string]string, error) {
	out := map[string]string{}
	for mount, suffix := range map[string]string{"/etc/tidal/config-autoscaler": "-config-autoscaler", "/etc/tidal/config-deployment": "-config-deployment"} {
		var cm *corev1.ConfigMap
		for _, o := range objs {
			if o.GetKind() == "ConfigMap" && o.GetName() == fullname+suffix {
				cm = &corev1.ConfigMap{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, cm); err != nil {
					return nil, fmt.Errorf("ConfigMap %s: %w", o.GetName(), err)
				}
			}
		}
		if cm == nil {
			return nil, fmt.Errorf("the release renders no ConfigMap %s%s", fullname, suffix)
		}
		d := filepath.Join(dir, strings.TrimPrefix(suffix, "-"))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
		for k, v := range cm.Data {
			if err := os.WriteFile(filepath.Join(d, k), []byte(v), 0o600); err != nil {
				return nil, err
			}
		}
		out[mount] = d
	}
	return out, nil
}

// Deployment is the Deployment named name among objs.
func Deployment(objs []*unstructured.Unstructured, name string) (*appsv1.Deployment, error) {
	for _, o := range objs {
		if o.GetKind() == "Deployment" && o.GetName() == name {
			var d appsv1.Deployment
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &d); err != nil {
				return nil, fmt.Errorf("Deployment %s: %w", name, err)
			}
			return &d, nil
		}
	}
	return nil, fmt.Errorf("no Deployment %s among the release's objects", name)
}
