package config

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-multierror"
	"go.yaml.in/yaml/v3"
)

// problem is one thing wrong with a cloud-config, and where.
type problem struct {
	file string
	line int    // 0 when unknown, as for some YAML syntax errors
	path string // the field, as in pools[1].addresses[0]; empty for the file as a whole
	msg  string
}

func (p *problem) Error() string {
	var b strings.Builder
	b.WriteString(p.file)
	if p.line > 0 {
		fmt.Fprintf(&b, ":%d", p.line)
	}
	b.WriteString(": ")
	if p.path != "" {
		b.WriteString(p.path)
		b.WriteString(": ")
	}
	b.WriteString(p.msg)
	return b.String()
}

func (c *checker) add(line int, path, format string, args ...any) {
	// Keep to one line a problem, even when a message echoes a value with a newline in it.
	msg := strings.ReplaceAll(fmt.Sprintf(format, args...), "\n", `\n`)
	c.problems = append(c.problems, &problem{file: c.file, line: line, path: path, msg: msg})
}

// unexpected reports that n, at path, is not want.
func (c *checker) unexpected(n *yaml.Node, path, want string) {
	if n.Kind == yaml.AliasNode {
		// Following aliases would let a small file expand to a huge tree, and a strict
		// config gains little from them.
		c.add(n.Line, path, "YAML aliases are not supported; write out the value of *%s here", n.Value)
		return
	}
	c.add(n.Line, path, "must be %s, not %s", want, describe(n))
}

// describe names what n is, for a report that it should be something else.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "the alias *" + n.Value
	}
	switch n.ShortTag() {
	case "!!null":
		return "null"
	case "!!bool", "!!int", "!!float":
		return n.Value
	}
	return strconv.Quote(n.Value)
}

var yamlErrorLine = regexp.MustCompile(`(?s)^yaml: line (\d+): (.*)$`)

// syntaxError reports an error of the YAML parser, which gives its line only inside the text.
func (c *checker) syntaxError(err error) {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlErrorLine.FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	c.add(line, "", "invalid YAML: %s", msg)
}

// err returns every problem found, in the order of their lines, or nil if there is none.
func (c *checker) err() error {
	if len(c.problems) == 0 {
		return nil
	}
	slices.SortStableFunc(c.problems, func(a, b *problem) int { return cmp.Compare(a.line, b.line) })
	errs := &multierror.Error{ErrorFormat: listProblems(c.file)}
	for _, p := range c.problems {
		errs.Errors = append(errs.Errors, p)
	}
	return errs
}

// listProblems writes the problems one a line, under a header naming the file.
func listProblems(file string) multierror.ErrorFormatFunc {
	return func(errs []error) string {
		noun := "problems"
		if len(errs) == 1 {
			noun = "problem"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "cloud-config %s has %d %s:", file, len(errs), noun)
		for _, err := range errs {
			b.WriteString("\n  ")
			b.WriteString(err.Error())
		}
		return b.String()
	}
}
