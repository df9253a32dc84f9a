package localenv

import (
	"errors"
	"fmt"
)

// cleanupStack undoes what was started, newest first, so every error path stops exactly what is running.
type cleanupStack struct {
	steps []cleanupStep
}

type cleanupStep struct {
	what string // printed as a step; empty keeps the step quiet
	fn   func() error
}

func (s *cleanupStack) push(what string, fn func() error) {
	s.steps = append(s.steps, cleanupStep{what: what, fn: fn})
}

func (s *cleanupStack) empty() bool {
	return len(s.steps) == 0
}

// unwind runs every step even when one fails, and returns the failures joined.
func (s *cleanupStack) unwind(p *progress) error {
	var errs []error
	for i := len(s.steps) - 1; i >= 0; i-- {
		step := s.steps[i]
		if step.what != "" {
			p.step("%s", step.what)
		}
		if err := step.fn(); err != nil {
			p.detail("warning: %v", err)
			errs = append(errs, fmt.Errorf("cleanup %q: %w", step.what, err))
		}
	}
	s.steps = nil
	return errors.Join(errs...)
}
