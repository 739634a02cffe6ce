// Package logs holds what a test collects of a program's log.
package logs

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects a log that one goroutine writes (exec.Cmd's copy of a child's output,
// klog) while a test reads it.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p to the log.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns the log so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Tail returns the last n lines of the log.
func (b *Buffer) Tail(n int) string {
	s := strings.TrimRight(b.String(), "\n")
	if s == "" || n <= 0 {
		return ""
	}
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
