package annotation

import (
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// specs indexes Specs by key.
var specs = func() map[string]*Spec {
	m := make(map[string]*Spec, len(Specs))
	for i := range Specs {
		m[Specs[i].Key] = &Specs[i]
	}
	return m
}()

// read returns the value of annotation key, or a *FieldError naming the limit of its Spec
// that the value is over. It costs one pass over the value's bytes, so that what a hostile
// value makes the parsers do afterwards is bounded by the limits.
func read(svc *v1.Service, key string) (string, error) {
	return readFrom(svc.Annotations, key)
}

// readFrom is read of any object's annotations: a Node's as well as a Service's.
func readFrom(annotations map[string]string, key string) (string, error) {
	value := annotations[key]
	spec := specs[key]
	if len(value) > spec.MaxBytes {
		return "", &FieldError{Field: key, Value: value,
			Reason: fmt.Sprintf("%d bytes, more than the limit of %d", len(value), spec.MaxBytes)}
	}
	if spec.MaxItems == 0 {
		return value, nil
	}
	n := 0
	for entry := range strings.SplitSeq(value, ",") {
		if strings.TrimSpace(entry) != "" {
			n++
		}
	}
	if n > spec.MaxItems {
		return "", &FieldError{Field: key, Value: value,
			Reason: fmt.Sprintf("%d entries, more than the limit of %d", n, spec.MaxItems)}
	}
	return value, nil
}
