// Package testutil holds small helpers shared by the unit tests of several
// packages. Nothing outside tests imports it.
package testutil
