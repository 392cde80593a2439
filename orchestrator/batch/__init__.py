"""Many runs: comparisons of runbooks over seeds, phase maps."""
