package docs

import (
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	// linkRE matches an inline link or image: [text](target "title"); the text may hold
	// one level of brackets and span lines.
	linkRE = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>\n]*>|[^()\s]+)(?:\s+(?:"[^"]*"|'[^']*'))?\s*\)`)
	// refRE matches the definition of a reference link: [id]: target.
	refRE = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*(<[^>\n]*>|\S+)`)
	// codeSpanRE matches inline code, where brackets are no link.
	codeSpanRE = regexp.MustCompile("(`+)[^`]+?(`+)")
	schemeRE   = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
	// htmlAnchorRE matches the anchors a page sets itself, <a id="x"> or <a name="x">.
	htmlAnchorRE = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	// lineAnchorRE matches GitHub's anchors of lines of a file that is not Markdown.
	lineAnchorRE = regexp.MustCompile(`^L\d+(-L\d+)?$`)
	// headingLinkRE matches a link in a heading, whose text alone makes the anchor.
	headingLinkRE = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// link is a relative link of a page.
type link struct {
	line   int
	target string
}

// pageLinks returns the links of a page that point into the repository: those with no
// scheme, outside code.
func pageLinks(lines []string) []link {
	text := strings.Join(outsideFences(lines), "\n")
	text = codeSpanRE.ReplaceAllStringFunc(text, func(s string) string {
		// Keep the newlines, so that line numbers stay true.
		return strings.Repeat("\n", strings.Count(s, "\n"))
	})
	var out []link
	for _, re := range []*regexp.Regexp{linkRE, refRE} {
		for _, m := range re.FindAllStringSubmatchIndex(text, -1) {
			target := strings.Trim(text[m[2]:m[3]], "<>")
			if schemeRE.MatchString(target) || strings.HasPrefix(target, "//") {
				continue
			}
			out = append(out, link{line: strings.Count(text[:m[0]], "\n") + 1 + strings.Count(text[m[0]:m[2]], "\n"), target: target})
		}
	}
	return out
}

// anchors returns the anchors of a page's headings as GitHub makes them: the heading's
// text, lower-cased, without punctuation but '-' and '_', its spaces turned to '-', and
// -1, -2... after the second and later of the same; and the anchors the page sets in HTML.
func anchors(lines []string) map[string]bool {
	out := make(map[string]bool)
	seen := make(map[string]int)
	for _, l := range outsideFences(lines) {
		for _, m := range htmlAnchorRE.FindAllStringSubmatch(l, -1) {
			out[m[1]] = true
		}
		level, text := heading(l)
		if level == 0 {
			continue
		}
		slug := slugify(text)
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// slugify is GitHub's anchor of a heading's text.
func slugify(heading string) string {
	heading = headingLinkRE.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.Is(unicode.M, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestLinks checks every relative link of README.md and docs/*.md: the file it points to
// exists in the repository, and so does its #anchor, a heading of the page it points to.
func TestLinks(t *testing.T) {
	pageAnchors := make(map[string]map[string]bool)
	anchorsOf := func(name string) map[string]bool {
		if a, ok := pageAnchors[name]; ok {
			return a
		}
		a := anchors(readPage(t, name))
		pageAnchors[name] = a
		return a
	}
	checked := 0
	for _, page := range pages(t) {
		for _, l := range pageLinks(readPage(t, page)) {
			checked++
			at := page + ":" + strconv.Itoa(l.line)
			target, fragment, _ := strings.Cut(l.target, "#")
			target, err := url.PathUnescape(target)
			if err != nil {
				t.Errorf("%s: link %s: %v", at, l.target, err)
				continue
			}
			// From the module root, as GitHub resolves it in the repository.
			name := page
			switch {
			case strings.HasPrefix(target, "/"):
				name = path.Clean(strings.TrimPrefix(target, "/"))
			case target != "":
				name = path.Join(path.Dir(page), target)
			}
			if name == ".." || strings.HasPrefix(name, "../") {
				t.Errorf("%s: link %s points outside the repository", at, l.target)
				continue
			}
			info, err := os.Stat(filepath.Join(root, filepath.FromSlash(name)))
			if err != nil {
				t.Errorf("%s: link %s: %s does not exist; fix the path", at, l.target, name)
				continue
			}
			if fragment == "" {
				continue
			}
			switch {
			case !info.IsDir() && strings.HasSuffix(name, ".md"):
				if !anchorsOf(name)[fragment] {
					t.Errorf("%s: link %s: %s has no heading whose anchor is #%s; fix the anchor (lower-case, spaces as '-', no punctuation but '-' and '_')", at, l.target, name, fragment)
				}
			case !info.IsDir() && lineAnchorRE.MatchString(fragment):
			default:
				t.Errorf("%s: link %s: #%s is no anchor GitHub makes in %s", at, l.target, fragment, name)
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no relative link in the pages; has the way links are read broken?")
	}
	t.Logf("checked %d relative links", checked)
}

// TestAnchorRule checks the anchors this package expects of headings against those GitHub
// makes of them.
func TestAnchorRule(t *testing.T) {
	got := anchors([]string{
		"# Configuration reference",
		"## The cloud-config",
		"### `make tools`: the test control plane",
		"### Probe wire format (version 6)",
		"## Why another layer-2 load balancer?",
		"## [Failover](how-it-works.md) and failback",
		"```sh",
		"# not a heading",
		"```",
		"## Failover",
		"## Failover",
		`<a id="custom"></a>`,
	})
	for _, want := range []string{
		"configuration-reference",
		"the-cloud-config",
		"make-tools-the-test-control-plane",
		"probe-wire-format-version-6",
		"why-another-layer-2-load-balancer",
		"failover-and-failback",
		"failover",
		"failover-1",
		"custom",
	} {
		if !got[want] {
			t.Errorf("no anchor %q; the anchors are %v", want, sortedKeys(got))
		}
	}
	if got["not-a-heading"] {
		t.Error("a line of a code block was taken for a heading")
	}
}
