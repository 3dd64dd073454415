// KubeRay's own validation of a RayJob, from the pinned ray-operator module: what its
// controller checks before it makes the Ray cluster (ValidateRayJobMetadata, ValidateRayJobSpec,
// ValidateRayClusterSpec in controllers/ray/utils/validation.go). Reads one RayJob as YAML
// (argv[1]); prints "ok" or the refusal and exits 1. Built by testing_support/kuberay.py.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/ray-project/kuberay/ray-operator/controllers/ray/utils"
	"sigs.k8s.io/yaml"
)

func refuse(what string, err error) {
	fmt.Printf("%s: %v\n", what, err)
	os.Exit(1)
}

func main() {
	data, err := os.ReadFile(os.Args[1])
	if err != nil {
		refuse("read", err)
	}
	asJSON, err := yaml.YAMLToJSON(data)
	if err != nil {
		refuse("yaml", err)
	}
	var job rayv1.RayJob
	decoder := json.NewDecoder(bytes.NewReader(asJSON))
	decoder.DisallowUnknownFields()
	if err := decoder.Decode(&job); err != nil {
		refuse("decode", err)
	}
	if err := utils.ValidateRayJobMetadata(job.ObjectMeta); err != nil {
		refuse("metadata", err)
	}
	if err := utils.ValidateRayJobSpec(&job); err != nil {
		refuse("spec", err)
	}
	if job.Spec.RayClusterSpec != nil {
		if err := utils.ValidateRayClusterSpec(job.Spec.RayClusterSpec, job.Annotations); err != nil {
			refuse("rayClusterSpec", err)
		}
	}
	fmt.Println("ok")
}
