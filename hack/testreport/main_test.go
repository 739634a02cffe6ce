package main

import (
	"strings"
	"testing"
)

// A stream as go test -json writes it for one package with a passing, a failing and two
// skipped tests, and one that failed outside any test.
const stream = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"    a_test.go:9: chatter of a passing test\n"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestOK","Elapsed":0}
{"Action":"run","Package":"example.com/a","Test":"TestBad"}
{"Action":"output","Package":"example.com/a","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"example.com/a","Test":"TestBad","Output":"    a_test.go:12: got 1, want 2\n"}
{"Action":"output","Package":"example.com/a","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"example.com/a","Test":"TestBad","Elapsed":0}
{"Action":"output","Package":"example.com/a","Test":"TestRoot1","Output":"=== RUN   TestRoot1\n"}
{"Action":"output","Package":"example.com/a","Test":"TestRoot1","Output":"    testing.go:27: needs root to create network namespaces\n"}
{"Action":"output","Package":"example.com/a","Test":"TestRoot1","Output":"--- SKIP: TestRoot1 (0.00s)\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestRoot1","Elapsed":0}
{"Action":"output","Package":"example.com/a","Test":"TestRoot2","Output":"    testing.go:27: needs root to create network namespaces\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestRoot2","Elapsed":0}
{"Action":"output","Package":"example.com/a","Output":"FAIL\n"}
{"Action":"fail","Package":"example.com/a","Elapsed":0.5}
{"Action":"output","Package":"example.com/b","Output":"panic: boom in init\n"}
{"Action":"fail","Package":"example.com/b","Elapsed":0.1}
`

func TestReport(t *testing.T) {
	var out strings.Builder
	r := newReport(&out)
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	r.summary()
	got := out.String()
	for _, want := range []string{
		"a_test.go:12: got 1, want 2",                // a failed test's output
		"FAIL\texample.com/a\t0.500s",                // its package's line
		"panic: boom in init",                        // a package failed outside any test
		"2: needs root to create network namespaces", // skips grouped by reason
		"example.com/a.TestRoot1, example.com/a.TestRoot2",
		"\ntests: 1 passed, 2 failed, 2 skipped\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "chatter of a passing test") {
		t.Errorf("report prints a passing test's output:\n%s", got)
	}
	if !strings.HasSuffix(got, "2 skipped\n") {
		t.Errorf("report does not end with the counts:\n%s", got)
	}
}
