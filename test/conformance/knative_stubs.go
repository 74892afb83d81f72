package main

import (
	"errors"

	"github.com/tidalscale/tidal/decider/kpa"
)

func checkResolvedSpec(at string, cfg, ann map[string]string, cc int64, reachable bool, got kpa.Spec) error {
	return nil
}

func replayKnativeReconcilerSteps(raw []byte) error { return errors.New("todo") }
func replayKnativeE2E(raw []byte) error             { return errors.New("todo") }
func replayKnativeSampleSize(raw []byte) error      { return errors.New("todo") }
