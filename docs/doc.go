// Package docs holds the tests that keep docs/ and the code together.
package docs
