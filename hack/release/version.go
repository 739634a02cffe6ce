package main

import (
	"fmt"
	"regexp"
	"strings"
)

// versionPattern is a release version: v and a SemVer 2.0.0 version without build
// metadata, whose "+" no image tag may hold. A prerelease's identifiers are
// dot-separated, and numeric ones have no leading zero (semver.org's own pattern).
var versionPattern = regexp.MustCompile(`^v(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)` +
	`(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?$`)

// checkVersion checks that v is vMAJOR.MINOR.PATCH with an optional -prerelease.
func checkVersion(v string) error {
	if !versionPattern.MatchString(v) {
		return fmt.Errorf("VERSION %q is not a release version: want vMAJOR.MINOR.PATCH or vMAJOR.MINOR.PATCH-PRERELEASE "+
			"(SemVer with a leading v, no +build metadata), such as v0.2.0 or v0.2.0-rc.1", v)
	}
	return nil
}

// chartVersion is the chart's version of release v: v without its leading v, as SemVer
// and Helm repositories want it (cloud-provider-baremetal-0.2.0.tgz).
func chartVersion(v string) string {
	return strings.TrimPrefix(v, "v")
}
