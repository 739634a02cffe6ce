package docs

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the module's directory, as seen from this package's: the tests run here.
const root = ".."

// pages are the Markdown files the tests read, by their path from the module root.
func pages(t *testing.T) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, n := range names {
		out = append(out, "docs/"+filepath.Base(n))
	}
	return out
}

// readPage returns the lines of a page named by its path from the module root.
func readPage(t *testing.T, name string) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

// fence reports whether line opens or closes a fenced code block. Headings and tables
// inside one are text, not structure: a shell comment is no heading.
func fence(line string) bool {
	l := strings.TrimSpace(line)
	return strings.HasPrefix(l, "```") || strings.HasPrefix(l, "~~~")
}

// outsideFences returns lines with the lines of fenced code blocks blanked, so that line
// numbers stay those of the file.
func outsideFences(lines []string) []string {
	out := make([]string, len(lines))
	in := false
	for i, l := range lines {
		if fence(l) {
			in = !in
			continue
		}
		if !in {
			out[i] = l
		}
	}
	return out
}

var headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)

// heading returns the level and text of a heading line, or 0.
func heading(line string) (int, string) {
	m := headingRE.FindStringSubmatch(line)
	if m == nil {
		return 0, ""
	}
	return len(m[1]), m[2]
}

// section returns the lines of the section that starts with the heading title (as
// "## Metrics"), up to the next heading of its level or above, blanked outside it, so
// that indexes stay those of the page. ok is false if the page has no such heading.
func section(lines []string, title string) (out []string, ok bool) {
	want, wantText := heading(title)
	lines = outsideFences(lines)
	out = make([]string, len(lines))
	in := false
	for i, l := range lines {
		if level, text := heading(l); level > 0 {
			switch {
			case level == want && text == wantText:
				in, ok = true, true
				continue
			case in && level <= want:
				return out, ok
			}
		}
		if in {
			out[i] = l
		}
	}
	return out, ok
}

// table is a Markdown table of a page.
type table struct {
	header []string
	// start and end are the indexes of its first line (the header) and one past its last.
	start, end int
	rows       []row
}

type row struct {
	// index of its line in the page; the line number is one more.
	index int
	cells []string
}

var delimiterRE = regexp.MustCompile(`^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$`)

// tables returns the tables of lines (a page or a section of it, blanked elsewhere).
func tables(lines []string) []table {
	var out []table
	for i := 0; i+1 < len(lines); i++ {
		if !strings.HasPrefix(strings.TrimSpace(lines[i]), "|") || !delimiterRE.MatchString(strings.TrimSpace(lines[i+1])) {
			continue
		}
		tb := table{header: cells(lines[i]), start: i}
		j := i + 2
		for ; j < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[j]), "|"); j++ {
			tb.rows = append(tb.rows, row{index: j, cells: cells(lines[j])})
		}
		tb.end = j
		out = append(out, tb)
		i = j - 1
	}
	return out
}

// tableWith returns the first table of lines whose header starts with the cells given.
func tableWith(lines []string, header ...string) (table, bool) {
	for _, tb := range tables(lines) {
		if len(tb.header) >= len(header) && slices.Equal(tb.header[:len(header)], header) {
			return tb, true
		}
	}
	return table{}, false
}

// cells splits a table line on its unescaped pipes, as GitHub does, and trims each cell.
func cells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(line, "|")
	if strings.HasSuffix(line, "|") && !strings.HasSuffix(line, `\|`) {
		line = line[:len(line)-1]
	}
	var out []string
	var cell strings.Builder
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
			cell.WriteString(`\|`)
			i++
		case line[i] == '|':
			out = append(out, strings.TrimSpace(cell.String()))
			cell.Reset()
		default:
			cell.WriteByte(line[i])
		}
	}
	return append(out, strings.TrimSpace(cell.String()))
}

var codeRE = regexp.MustCompile("`([^`]+)`")

// code returns the code spans of a cell, without their backquotes.
func code(cell string) []string {
	var out []string
	for _, m := range codeRE.FindAllStringSubmatch(cell, -1) {
		out = append(out, m[1])
	}
	return out
}
