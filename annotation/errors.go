package annotation

import "fmt"

// FieldError is a Service field or annotation whose value cannot be used.
type FieldError struct {
	// Field is an annotation key or a spec field path, as in "spec.loadBalancerIP".
	Field string
	// Value is the value as written.
	Value string
	// Reason says what is wrong with it, for the Service's owner.
	Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s=%q: %s", e.Field, e.Value, e.Reason)
}
