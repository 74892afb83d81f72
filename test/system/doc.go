// Package system runs tidal the way users run it: the three binaries as
// separate processes on loopback, each in its own process group, with
// helpers to build them, wait for their health service, kill and restart
// them. End-to-end tests, the loopback test and `make run` use it.
package system
