// Package validate holds the test that holds tidal-sim to the live system:
// `make run`'s load profile run on the test cluster by the three services
// as processes, and replayed by package sim, compared phase by phase.
package validate
