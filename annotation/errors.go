package annotation

import (
	"fmt"
	"unicode/utf8"
)

// maxQuoted is how much of a value an error quotes: the error goes into events and logs,
// and a refused value may be as long as the API server lets all annotations be together.
const maxQuoted = 64

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
	return fmt.Sprintf("%s=%q: %s", e.Field, clip(e.Value), e.Reason)
}

// clip returns s, or, when s is longer than maxQuoted bytes, its start and its length, as
// in "node-1,node-2,…(70000 bytes)". It never cuts a character in two.
func clip(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", s[:cut], len(s))
}
