"""A world's bookkeeping: the plan built from a playbook, scoring, the simulated clock, the run directory's journal."""
